// C++: a Cpv holding a class with a constructor (CpvInitialize constructs
// it on each PE), a Csv holding one (constructed with the program's static
// objects) and initret mode: ConverseInit returns on the first PE of each
// process, which does its share by hand; the other PEs run it as their
// start function.
//
// Each PE sets its own Cpv and marks its bit in its node's Csv, then tells
// every PE; once a PE has heard from all of them (so every PE has written),
// it prints its Cpv and which PEs its node's Csv saw: a Cpv shared by PEs
// or a Csv shared by two logical nodes of one process (++ppn) shows there.
// PE 0 ends the job once every PE has printed, after telling the other
// processes' main threads.
#include <converse.h>

#include <atomic>
#include <string>
#include <vector>

struct Log {
  std::vector<std::string> lines;
  int constructed;
  Log() : constructed(1) {}
};

struct NodeInfo {
  std::atomic<unsigned> pes;  // a bit per PE that marked it
  int constructed;
  NodeInfo() : pes(0), constructed(1) {}
};

CpvDeclare(Log, log);
CpvStaticDeclare(int, mine);
CpvStaticDeclare(int, note_handler);
CpvStaticDeclare(int, written_handler);
CpvStaticDeclare(int, printed_handler);
CpvStaticDeclare(int, finish_handler);
CpvStaticDeclare(int, heard);    // "written" messages
CpvStaticDeclare(int, printed);  // on PE 0: "printed" messages
CpvStaticDeclare(int, finished); // PE 0 said the job may end
CpvStaticDeclare(std::vector<int>, mains);  // on PE 0: the other main threads' PEs
typedef bool (*Cond)();
CpvStaticDeclare(Cond, until);  // what ends the current CsdScheduler
CsvStaticDeclare(NodeInfo, node_info);

struct PeMsg {
  char header[CmiMsgHeaderSizeBytes];
  int pe;
  int is_main;
};

static void send(int pe, int handler, int is_main) {
  PeMsg m;
  CmiSetHandler(&m, handler);
  m.pe = CmiMyPe();
  m.is_main = is_main;
  CmiSyncSend(pe, (int)sizeof m, &m);
}

// Leaves the scheduler once the condition it runs until holds.
static void check_until() {
  if (CpvAccess(until) && CpvAccess(until)()) {
    CpvAccess(until) = nullptr;
    CsdExitScheduler();
  }
}

// Schedules until `cond` holds (or the job ends).
static void schedule_until(Cond cond) {
  if (cond()) return;
  CpvAccess(until) = cond;
  CsdScheduler(-1);
}

static bool all_written() {
  return CpvAccess(log).lines.size() == 1 && CpvAccess(heard) == CmiNumPes();
}
static bool all_printed() { return CpvAccess(printed) == CmiNumPes(); }
static bool finish_said() { return CpvAccess(finished) != 0; }

static void note(void *msg) {
  CpvAccess(log).lines.push_back("note from PE " + std::to_string(CmiMyPe()));
  CmiFree(msg);
  check_until();
}

static void written(void *msg) {
  CmiFree(msg);
  CpvAccess(heard)++;
  check_until();
}

static void printed(void *msg) {
  PeMsg *m = (PeMsg *)msg;
  if (m->is_main && m->pe != 0) CpvAccess(mains).push_back(m->pe);
  CmiFree(msg);
  CpvAccess(printed)++;
  check_until();
}

static void finish(void *msg) {
  CmiFree(msg);
  CpvAccess(finished) = 1;
  check_until();
}

// Each PE's whole computation: in initret mode the PEs other than the
// processes' first run it as their start function and then end, and the
// first PE of each process runs it from main after ConverseInit returns;
// nobody schedules unless it calls the scheduler.
static void work(int is_main) {
  CpvInitialize(Log, log);
  CpvInitialize(int, mine);
  CpvInitialize(int, note_handler);
  CpvInitialize(int, written_handler);
  CpvInitialize(int, printed_handler);
  CpvInitialize(int, finish_handler);
  CpvInitialize(int, heard);
  CpvInitialize(int, printed);
  CpvInitialize(int, finished);
  CpvInitialize(std::vector<int>, mains);
  CpvInitialize(Cond, until);
  CsvInitialize(NodeInfo, node_info);
  if (CpvAccess(log).constructed != 1) CmiAbort("Cpv not constructed");
  if (CsvAccess(node_info).constructed != 1) CmiAbort("Csv not constructed");
  CpvAccess(note_handler) = CmiRegisterHandler(note);
  CpvAccess(written_handler) = CmiRegisterHandler(written);
  CpvAccess(printed_handler) = CmiRegisterHandler(printed);
  CpvAccess(finish_handler) = CmiRegisterHandler(finish);
  CpvAccess(mine) = 1000 + CmiMyPe();
  CsvAccess(node_info).pes.fetch_or(1u << CmiMyPe());

  void *m = CmiAlloc(CmiMsgHeaderSizeBytes);
  CmiSetHandler(m, CpvAccess(note_handler));
  CmiSyncSendAndFree(CmiMyPe(), CmiMsgHeaderSizeBytes, m);
  char w[CmiMsgHeaderSizeBytes];
  CmiSetHandler(w, CpvAccess(written_handler));
  CmiSyncBroadcastAll((int)sizeof w, w);
  schedule_until(all_written);  // until the note and every PE's "written"
  if (!all_written()) CmiAbort("PE %d: no note, or not every PE's", CmiMyPe());

  // Every PE has written its Cpv and its node's Csv.
  std::string seen;
  unsigned pes = CsvAccess(node_info).pes.load();
  for (int pe = 0; pe < CmiNumPes(); pe++) {
    if (pes & (1u << pe)) seen += (seen.empty() ? "" : " ") + std::to_string(pe);
  }
  CmiPrintf("cpv: PE %d of %d (node %d, rank %d): Cpv %d, its node's Csv marked by PEs %s\n",
            CmiMyPe(), CmiNumPes(), CmiMyNode(), CmiMyRank(), CpvAccess(mine), seen.c_str());
  send(0, CpvAccess(printed_handler), is_main);
}

// A C++ Cpv is not destroyed with its PE (as in Charm++): a program that
// wants its destructor run calls it.
static void start(int, char **) {
  work(0);
  CpvAccess(log).~Log();
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 1);
  work(1);
  CmiPrintf("cpv: PE %d of %d log has %zu line(s): %s\n", CmiMyPe(), CmiNumPes(),
            CpvAccess(log).lines.size(), CpvAccess(log).lines.at(0).c_str());
  if (CmiMyPe() == 0) {
    // Every PE has printed: the other processes' main threads may end.
    schedule_until(all_printed);
    if (!all_printed()) CmiAbort("PE 0: not every PE printed");
    for (int pe : CpvAccess(mains)) send(pe, CpvAccess(finish_handler), 0);
  } else {
    schedule_until(finish_said);
  }
  CpvAccess(log).~Log();
  ConverseExit();
  return 1;  // not reached
}
