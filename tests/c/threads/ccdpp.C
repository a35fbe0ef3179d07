// C++: the Ccd calls take callbacks of either type (the manual's CcdVoidFn,
// with the time, and Charm++'s CcdCondFn, without), functions and
// captureless lambdas alike; and a thread-private variable of a trivial
// type next to the Ccd calls.
#include <converse.h>

#include <string>

CpvStaticDeclare(std::string, log);
CtvStaticDeclare(int, mark);

static void note(const char *what) {
  if (!CpvAccess(log).empty()) CpvAccess(log) += " ";
  CpvAccess(log) += what;
}

static void with_time(void *arg, double now) {
  if (now <= 0.0) CmiAbort("no time");
  note(static_cast<const char *>(arg));
}

static void without_time(void *arg) { note(static_cast<const char *>(arg)); }

static void done(void *arg) {
  note(static_cast<const char *>(arg));
  CmiPrintf("ccdpp: PE %d: %s\n", CmiMyPe(), CpvAccess(log).c_str());
  CsdExitScheduler();
}

static void start(int, char **) {
  CpvInitialize(std::string, log);
  CtvInitialize(int, mark);
  CtvAccess(mark) = 7;
  const int u = CcdUSER;
  CcdCallOnCondition(u, with_time, const_cast<char *>("a"));
  CcdCallOnCondition(u, without_time, const_cast<char *>("b"));
  CcdCallOnConditionKeep(u, [](void *arg) { note(static_cast<const char *>(arg)); },
                         const_cast<char *>("c"));
  CcdCallOnConditionKeep(u, [](void *arg, double) { note(static_cast<const char *>(arg)); },
                         const_cast<char *>("d"));
  CcdRaiseCondition(u);
  if (CtvAccess(mark) != 7) CmiAbort("the main flow's Ctv");
  CcdCallFnAfter(without_time, const_cast<char *>("t1"), 1);
  CcdCallFnAfter(done, const_cast<char *>("t2"), 2);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
