// C++: a Cpv holding a class with a constructor (CpvInitialize constructs
// it on each PE) and initret mode: ConverseInit returns on PE 0, which does
// its share by hand and ends the job with ConverseExit.
#include <converse.h>

#include <string>
#include <vector>

struct Log {
  std::vector<std::string> lines;
  int constructed;
  Log() : constructed(1) {}
};

CpvDeclare(Log, log);
CpvStaticDeclare(int, note_handler);

static void note(void *msg) {
  CpvAccess(log).lines.push_back("note from PE " + std::to_string(CmiMyPe()));
  CmiFree(msg);
  CsdExitScheduler();
}

// Each PE's whole computation: in initret mode the PEs other than PE 0 run
// it as their start function and then end, and PE 0 runs it from main after
// ConverseInit returns; nobody schedules unless it calls the scheduler.
static void work(void) {
  CpvInitialize(Log, log);
  CpvInitialize(int, note_handler);
  if (CpvAccess(log).constructed != 1) CmiAbort("Cpv not constructed");
  CpvAccess(note_handler) = CmiRegisterHandler(note);
  void *m = CmiAlloc(CmiMsgHeaderSizeBytes);
  CmiSetHandler(m, CpvAccess(note_handler));
  CmiSyncSendAndFree(CmiMyPe(), CmiMsgHeaderSizeBytes, m);
  CsdScheduler(-1);  // until the note's handler stops it
  if (CpvAccess(log).lines.size() != 1) CmiAbort("PE %d: no note", CmiMyPe());
}

// A C++ Cpv is not destroyed with its PE (as in Charm++): a program that
// wants its destructor run calls it.
static void start(int, char **) {
  work();
  CpvAccess(log).~Log();
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 1);
  work();
  CmiPrintf("cpv: PE %d of %d log has %zu line(s): %s\n", CmiMyPe(), CmiNumPes(),
            CpvAccess(log).lines.size(), CpvAccess(log).lines.at(0).c_str());
  CpvAccess(log).~Log();
  ConverseExit();
  return 1;  // not reached
}
