/* CthSetStrategy: two threads scheduled by a ready queue of the program's
 * own (an awaken function that appends, a choose function that takes the
 * front, or the driver thread S when the queue is empty), and
 * CthSetStrategyDefault putting a third back on the scheduler. Each step
 * appends to the PE's log, which the test compares. */
#include <converse.h>

#ifndef CQS_QUEUEING_FIFO
#define CQS_QUEUEING_FIFO 2
#endif
#ifndef CQS_QUEUEING_IFIFO
#define CQS_QUEUEING_IFIFO 4
#endif

typedef struct {
  char text[512];
  CthThread s, t1, t2, t3;
  CthThread ready[8];
  int head, tail;
  int awakenings;
} State;

CpvStaticDeclare(State, st);

static int seven = 7;
static int three = 3;

static void note(const char *what) {
  State *s = &CpvAccess(st);
  if (s->text[0] != '\0') strcat(s->text, " ");
  strcat(s->text, what);
}

static void check(int ok, const char *what) {
  if (!ok) CmiAbort("PE %d: %s", CmiMyPe(), what);
}

static const char *name(CthThread t) {
  State *s = &CpvAccess(st);
  if (t == s->t1) return "1";
  if (t == s->t2) return "2";
  if (t == s->t3) return "3";
  return "?";
}

static void my_awaken(CthThread t, int strategy, int priobits, int *prio) {
  State *s = &CpvAccess(st);
  char text[64];
  if (prio != NULL) {
    snprintf(text, sizeof text, "aw%s:%d:%d:%d", name(t), strategy, priobits, *prio);
  } else {
    snprintf(text, sizeof text, "aw%s:%d:%d:-", name(t), strategy, priobits);
  }
  note(text);
  if (t == s->t2 && s->awakenings == 1) {
    check(prio == &seven, "CthAwakenPrio's prio pointer reaches the awaken function");
  }
  s->awakenings++;
  s->ready[s->tail++ % 8] = t;
}

static CthThread my_choose(void) {
  State *s = &CpvAccess(st);
  if (s->head == s->tail) return s->s;
  return s->ready[s->head++ % 8];
}

static void thread_1(void *arg) {
  (void)arg;
  note("1a");
  CthYield();
  note("1b");
  CthFree(CthSelf());
  CthSuspend(); /* chooses 2 */
  CmiAbort("thread 1 runs after CthFree");
}

static void thread_2(void *arg) {
  (void)arg;
  note("2a");
  CthYieldPrio(CQS_QUEUEING_IFIFO, 0, (unsigned int *)&three);
  note("2b");
  CthFree(CthSelf());
  CthSuspend(); /* the queue is empty: chooses S */
  CmiAbort("thread 2 runs after CthFree");
}

static void thread_3(void *arg) {
  (void)arg;
  note("3");
}

static void driver(void *arg) {
  State *s = &CpvAccess(st);
  int awakenings;
  (void)arg;
  s->t1 = CthCreate(thread_1, NULL, 0);
  s->t2 = CthCreate(thread_2, NULL, 0);
  CthSetStrategy(s->t1, my_awaken, my_choose);
  CthSetStrategy(s->t2, my_awaken, my_choose);
  CthAwaken(s->t1);
  CthAwakenPrio(s->t2, CQS_QUEUEING_IFIFO, 0, (unsigned int *)&seven);
  CthResume(my_choose());
  note("S1");
  check(s->head == s->tail, "the ready queue is empty");

  s->t3 = CthCreate(thread_3, NULL, 0);
  CthSetStrategy(s->t3, my_awaken, my_choose);
  CthSetStrategyDefault(s->t3);
  awakenings = s->awakenings;
  CthAwaken(s->t3);
  check(s->awakenings == awakenings, "CthSetStrategyDefault: the scheduler queues it");
  CthYield();
  note("S2");
  CmiPrintf("strategy: PE %d: %s\n", CmiMyPe(), s->text);
  CsdExitScheduler();
}

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CpvInitialize(State, st);
  CpvAccess(st).s = CthCreate(driver, NULL, 0);
  CthAwaken(CpvAccess(st).s);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
