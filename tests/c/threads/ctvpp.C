// Thread-private variables in C++: a class with a constructor and a
// destructor, constructed (T()) in each thread on its first access and
// destroyed when the thread ends, whether its function returns or it frees
// itself (CthFree(CthSelf()); CthSuspend();, which also unwinds its stack:
// the destructors of its locals run then).
#include <converse.h>

#include <string>
#include <vector>

CpvStaticDeclare(int, constructed);
CpvStaticDeclare(int, destroyed);
CpvStaticDeclare(int, done);
CpvStaticDeclare(std::string, log);
CpvStaticDeclare(int, check_handler);

static void note(const std::string &what) {
  if (!CpvAccess(log).empty()) CpvAccess(log) += " ";
  CpvAccess(log) += what;
}

static void check(bool ok, const char *what) {
  if (!ok) CmiAbort("PE %d: %s", CmiMyPe(), what);
}

struct Tally {
  std::vector<std::string> seen;
  int serial;
  Tally() : serial(++CpvAccess(constructed)) {}
  ~Tally() { ++CpvAccess(destroyed); }
};

CtvDeclare(Tally, tally);

struct Witness {
  const char *what;
  ~Witness() { note(what); }
};

static void w1(void *) {
  CtvAccess(tally).seen.push_back("w1");
  CthYield();
  check(CtvAccess(tally).seen.size() == 1 && CtvAccess(tally).seen[0] == "w1", "w1's own tally");
  note("w1");
  CpvAccess(done)++;
}

static void w2(void *) {
  Witness w = {"~w2"};
  CtvAccess(tally).seen.push_back("w2");
  CthYield();
  check(CtvAccess(tally).seen.size() == 1 && CtvAccess(tally).seen[0] == "w2", "w2's own tally");
  note("w2");
  CpvAccess(done)++;
  CthFree(CthSelf());
  CthSuspend();
  CmiAbort("w2 runs after CthFree");
}

static void last(void *) {
  while (CpvAccess(done) < 2) CthYield();
  check(CtvAccess(tally).seen.empty(), "a new thread's tally is new");
  // main's, w1's, w2's, and this one's; w1's and w2's are gone already.
  check(CpvAccess(constructed) == 4, "one Tally constructed per thread");
  check(CpvAccess(destroyed) == 2, "the ended threads' Tallies destroyed");
  note("last");
  void *m = CmiAlloc(CmiMsgHeaderSizeBytes);
  CmiSetHandler(m, CpvAccess(check_handler));
  CmiSyncSendAndFree(CmiMyPe(), CmiMsgHeaderSizeBytes, m);
}

static void check_main(void *msg) {
  CmiFree(msg);
  check(CtvAccess(tally).serial == 1 && CtvAccess(tally).seen.size() == 1 &&
            CtvAccess(tally).seen[0] == "main",
        "the main flow kept its own tally");
  CmiPrintf("ctvpp: PE %d: constructed %d, destroyed %d: %s\n", CmiMyPe(),
            CpvAccess(constructed), CpvAccess(destroyed), CpvAccess(log).c_str());
  CsdExitScheduler();
}

static void start(int, char **) {
  CpvInitialize(int, constructed);
  CpvInitialize(int, destroyed);
  CpvInitialize(int, done);
  CpvInitialize(std::string, log);
  CpvInitialize(int, check_handler);
  CpvAccess(check_handler) = CmiRegisterHandler(check_main);
  CtvInitialize(Tally, tally);
  CtvAccess(tally).seen.push_back("main");
  CthAwaken(CthCreate(w1, nullptr, 0));
  CthAwaken(CthCreate(w2, nullptr, 0));
  CthAwaken(CthCreate(last, nullptr, 0));
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
