/* Threads on every PE: created, suspended, awakened, yielding, resumed,
 * queued by priority, ended by returning and by CthFree(CthSelf()) then
 * CthSuspend(). Each step appends to the PE's log; the last thread checks
 * the identities on the way and prints the log, which the test compares,
 * then leaves the scheduler. */
#include <converse.h>

/* Charm++'s numbers, in case the header that defines them is not there. */
#ifndef CQS_QUEUEING_IFIFO
#define CQS_QUEUEING_IFIFO 4
#endif

typedef struct {
  char text[512];
  CthThread main, a, b, c, r;
  int ended;
} Log;

CpvStaticDeclare(Log, log);

static void note(const char *what) {
  Log *l = &CpvAccess(log);
  if (l->text[0] != '\0') strcat(l->text, " ");
  strcat(l->text, what);
}

static void check(int ok, const char *what) {
  if (!ok) CmiAbort("PE %d: %s", CmiMyPe(), what);
}

/* A: suspends until B awakens it, then returns (which ends it). */
static void thread_a(void *arg) {
  check(strcmp((const char *)arg, "A") == 0, "A's argument");
  check(CthSelf() == CpvAccess(log).a, "CthSelf in A is what CthCreate returned");
  check(CthSelf() == CthSelf(), "CthSelf is stable");
  check(!CthIsMainThread(CthSelf()), "A is not the main thread");
  note("A1");
  CthSuspend();
  check(CthSelf() == CpvAccess(log).a, "CthSelf in A after resuming");
  note("A2");
  CpvAccess(log).ended++;
}

/* B: awakens A, yields, then ends itself with CthFree + CthSuspend. */
static void thread_b(void *arg) {
  (void)arg;
  note("B1");
  CthAwaken(CpvAccess(log).a);
  CthYield();
  note("B2");
  CpvAccess(log).ended++;
  CthFree(CthSelf());
  CthSuspend();
  CmiAbort("PE %d: B runs after CthFree(CthSelf()); CthSuspend()", CmiMyPe());
}

/* P: runs in the order of its priority; logs it and returns. */
static void thread_p(void *arg) {
  char text[16];
  snprintf(text, sizeof text, "p%d", *(int *)arg);
  note(text);
}

/* R: resumed directly by C, hands control back; awakened by C, it awakens C
 * and ends. */
static void thread_r(void *arg) {
  (void)arg;
  note("R1");
  CthResume(CpvAccess(log).c);
  note("R2");
  CthAwaken(CpvAccess(log).c);
}

static void thread_m(void *arg) {
  (void)arg;
  note("M");
}

static int prios[4] = {5, -3, 0, 2};
static int last_prio = 100;

/* C: waits (yielding) until A and B have ended, then the priority, resume,
 * next-field and migratable parts, then prints the log and stops. */
static void thread_c(void *arg) {
  int i;
  CthThread p[4], m;
  (void)arg;
  note("C1");
  while (CpvAccess(log).ended < 2) CthYield();
  note("C2");

  /* Awakened by priority, smallest first; C itself behind them all. */
  for (i = 0; i < 4; i++) {
    p[i] = CthCreate(thread_p, &prios[i], 0);
    CthAwakenPrio(p[i], CQS_QUEUEING_IFIFO, 0, (unsigned int *)&prios[i]);
  }
  CthYieldPrio(CQS_QUEUEING_IFIFO, 0, (unsigned int *)&last_prio);
  note("C3");

  CpvAccess(log).r = CthCreate(thread_r, NULL, 0);
  CthResume(CpvAccess(log).r);
  note("C4");
  CthAwaken(CpvAccess(log).r);
  CthSuspend(); /* until R awakens it */
  note("C5");

  CthSetNext(CthSelf(), CpvAccess(log).main);
  check(CthGetNext(CthSelf()) == CpvAccess(log).main, "CthGetNext gives what CthSetNext set");
  CthSetNext(CthSelf(), NULL);
  check(CthGetNext(CthSelf()) == NULL, "CthSetNext(t, NULL) clears it");

  m = CthCreateMigratable(thread_m, NULL, 0);
  CthAwaken(m);
  CthYield();
  note("C6");

  CmiPrintf("cth: PE %d: %s\n", CmiMyPe(), CpvAccess(log).text);
  CsdExitScheduler();
}

static void start(int argc, char **argv) {
  Log *l;
  (void)argc;
  (void)argv;
  CpvInitialize(Log, log);
  l = &CpvAccess(log);
  check(CthImplemented() == 1, "CthImplemented");
  l->main = CthSelf();
  check(l->main != NULL && l->main == CthSelf(), "CthSelf in the start function");
  check(CthIsMainThread(l->main) == 1, "the start function runs on the main thread");
  l->a = CthCreate(thread_a, "A", 0);
  l->b = CthCreate(thread_b, NULL, 0);
  l->c = CthCreate(thread_c, NULL, 64 * 1024);
  check(l->a != l->b && l->b != l->c && l->a != l->main, "distinct threads");
  CthAwaken(l->a);
  CthAwaken(l->b);
  CthAwaken(l->c);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
