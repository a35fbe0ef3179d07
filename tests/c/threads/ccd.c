/* Conditions and timers: user conditions raised with CcdRaiseCondition
 * (one-shot and kept callbacks, their order, cancelling both kinds), with
 * callbacks of both types (the manual's CcdVoidFn, with the time, and
 * Charm++'s CcdCondFn, without); the timer resolution calls; and, once the
 * start function has returned, timers (CcdCallFnAfter), a periodic
 * condition and the idle conditions firing. When all have fired, a message
 * to the PE itself ends it. Only what fired is checked, never when. */
#include <converse.h>

#define U (CcdUSER + 1)

typedef struct {
  char text[512];
  int periodic, periodic_idx, idle, still_idle, after10, after20, finishing;
} State;

CpvStaticDeclare(State, st);
CpvStaticDeclare(int, finish_handler);

static void note(const char *what) {
  State *s = &CpvAccess(st);
  if (s->text[0] != '\0') strcat(s->text, " ");
  strcat(s->text, what);
}

static void check(int ok, const char *what) {
  if (!ok) CmiAbort("PE %d: %s", CmiMyPe(), what);
}

/* The manual's callback type: with the wall time. */
static void with_time(void *arg, double now) {
  check(now > 0.0 && now <= CmiWallTimer(), "the callback's time is the wall time");
  note((const char *)arg);
}

/* Charm++'s condition callback type: without it. */
static void without_time(void *arg) { note((const char *)arg); }

static void never(void *arg, double now) {
  (void)arg;
  (void)now;
  CmiAbort("PE %d: a cancelled callback ran", CmiMyPe());
}

/* Once everything has fired: a message, so that cancelling and ending the
 * scheduler happen in a handler, not in a callback. */
static void maybe_finish(void) {
  State *s = &CpvAccess(st);
  if (s->after10 && s->after20 && s->periodic >= 3 && s->idle && s->still_idle && !s->finishing) {
    void *m = CmiAlloc(CmiMsgHeaderSizeBytes);
    s->finishing = 1;
    CmiSetHandler(m, CpvAccess(finish_handler));
    CmiSyncSendAndFree(CmiMyPe(), CmiMsgHeaderSizeBytes, m);
  }
}

static void after10(void *arg, double now) {
  check(arg == &CpvAccess(st), "the timer's argument");
  check(now > 0.0, "the timer's time");
  CpvAccess(st).after10++;
  maybe_finish();
}

static void after20(void *arg) {
  check(arg == &CpvAccess(st), "the timer's argument");
  check(CpvAccess(st).after10 == 1, "the earlier timer fired first");
  CpvAccess(st).after20++;
  maybe_finish();
}

static void periodic(void *arg, double now) {
  (void)arg;
  (void)now;
  CpvAccess(st).periodic++;
  maybe_finish();
}

static void idle(void *arg) {
  (void)arg;
  CpvAccess(st).idle++;
  maybe_finish();
}

static void still_idle(void *arg, double now) {
  (void)arg;
  (void)now;
  CpvAccess(st).still_idle++;
  maybe_finish();
}

static void finish(void *msg) {
  State *s = &CpvAccess(st);
  int periodic;
  CmiFree(msg);
  CcdCancelCallOnConditionKeep(CcdPERIODIC, s->periodic_idx);
  periodic = s->periodic;
  check(s->after10 == 1 && s->after20 == 1, "each timer fired once");
  check(s->idle == 1 && s->still_idle == 1, "one-shot idle callbacks fired once");
  CmiPrintf("ccd: PE %d: timers fired, periodic fired, idle fired, user: %s\n", CmiMyPe(),
            s->text);
  /* The cancelled periodic callback must not run again: raise it by hand. */
  CcdRaiseCondition(CcdPERIODIC);
  check(s->periodic == periodic, "a cancelled kept callback ran");
  CsdExitScheduler();
}

static void start(int argc, char **argv) {
  State *s;
  int k1, o1, c, k2;
  double r0, r1, r2, r3;
  (void)argc;
  (void)argv;
  CpvInitialize(State, st);
  CpvInitialize(int, finish_handler);
  CpvAccess(finish_handler) = CmiRegisterHandler(finish);
  s = &CpvAccess(st);

  r0 = CcdSetResolution(0.001);
  r1 = CcdIncreaseResolution(0.002); /* not shorter: unchanged */
  r2 = CcdIncreaseResolution(0.0005);
  r3 = CcdResetResolution();
  if (CmiMyPe() == 0) CmiPrintf("ccd: resolutions %g %g %g %g\n", r0, r1, r2, r3);

  /* Registered in this order; a raise runs one-shots first, then kept
   * ones, each oldest first (Charm++'s order). */
  k1 = CcdCallOnConditionKeep(U, without_time, "k1");
  o1 = CcdCallOnCondition(U, with_time, "o1");
  c = CcdCallOnCondition(U, never, NULL);
  k2 = CcdCallOnConditionKeep(U, with_time, "k2");
  (void)CcdCallOnCondition(U, without_time, "o2");
  CcdCallOnConditionKeep(CcdUSERMAX, without_time, "max");
  CcdCancelCallOnCondition(U, c);
  CcdRaiseCondition(U);
  note("|");
  CcdRaiseCondition(U);
  note("|");
  CcdCancelCallOnCondition(U, o1); /* ran already: nothing to cancel */
  CcdCancelCallOnConditionKeep(U, k1);
  CcdRaiseCondition(U);
  note("|");
  CcdCancelCallOnConditionKeep(U, k2);
  CcdRaiseCondition(U);
  CcdRaiseCondition(U + 1); /* nothing registered */
  CcdRaiseCondition(CcdUSERMAX);

  CcdCallFnAfter(after20, s, 20);
  CcdCallFnAfter(after10, s, 10);
  s->periodic_idx = CcdCallOnConditionKeep(CcdPERIODIC, periodic, NULL);
  CcdCallOnCondition(CcdPROCESSOR_BEGIN_IDLE, idle, NULL);
  CcdCallOnCondition(CcdPROCESSOR_STILL_IDLE, still_idle, NULL);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
