/* Quiescence detection from C.
 *   1. Every PE starts a burst of BURST messages that each hop HOPS times
 *      round the ring, and calls CmiStartQD with a CcdVoidFn: when it
 *      fires, the PE must have handled its whole share of the hops
 *      (BURST * (HOPS + 1)), and gets its argument back.
 *   2. PE 0 checks the CQd counts (CQdCreate and CQdProcess, negative ones
 *      too, move CQdGetCreated and CQdGetProcessed exactly), then counts
 *      one unit of outside work (CQdCreate(CpvAccess(cQdState), 1)) and
 *      starts detection with a CcdCondFn; the work is finished
 *      (CQdProcess) only after PE 0 has gone idle many times (detection's
 *      waves keep it busy now and then), and detection must not fire
 *      before that.
 *
 * With the argument bad-state, PE 0 passes a CQdState that is not its
 * own: the job must end naming the call. */
#include <converse.h>

#define BURST 20
#define HOPS 15
#define IDLE_EDGES 40

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int hops_left;
} HopMsg;

CpvStaticDeclare(int, h_hop);
CpvStaticDeclare(int, h_qd_report);
CpvStaticDeclare(int, handled);
CpvStaticDeclare(int, reports);
CpvStaticDeclare(int, tag);
CpvStaticDeclare(int, released);
CpvStaticDeclare(int, idle_edges);

static void hop(void *msg) {
  HopMsg *m = (HopMsg *)msg;
  CpvAccess(handled)++;
  if (m->hops_left > 0) {
    m->hops_left--;
    CmiSyncSendAndFree((CmiMyPe() + 1) % CmiNumPes(), sizeof(HopMsg), m);
  } else {
    CmiFree(msg);
  }
}

/* Kept on CcdPROCESSOR_BEGIN_IDLE: PE 0 goes idle after each message of
 * the detection's waves; the work is finished at the IDLE_EDGES-th time,
 * after enough waves to have declared quiescence without the work. */
static void release(void *arg, double now) {
  (void)arg;
  (void)now;
  if (CpvAccess(released) || ++CpvAccess(idle_edges) < IDLE_EDGES) return;
  CpvAccess(released) = 1;
  CQdProcess(CpvAccess(cQdState), 1);
}

static void quiet_after_release(void *arg) {
  if (arg != (void *)&CpvAccess(released)) CmiAbort("qd: the second callback got %p", arg);
  if (!CpvAccess(released)) CmiAbort("qd: quiescence declared while CQdCreate work was outstanding");
  CmiPrintf("qd: held by CQdCreate until CQdProcess\n");
  ConverseExit();
}

static void phase2(void) {
  CQdState s = CpvAccess(cQdState);
  int64_t c0 = CQdGetCreated(s), p0 = CQdGetProcessed(s);
  CQdCreate(s, 5);
  CQdProcess(s, 5);
  if (CQdGetCreated(s) != c0 + 5 || CQdGetProcessed(s) != p0 + 5) CmiAbort("qd: the counts did not move by 5");
  CQdCreate(s, -2); /* takes back two creations: counted as processed */
  CQdProcess(s, -2);
  if (CQdGetCreated(s) != c0 + 7 || CQdGetProcessed(s) != p0 + 7) CmiAbort("qd: negative counts");
  CmiPrintf("qd: CQd counts move as asked\n");

  CQdCreate(s, 1);
  CpvAccess(released) = 0;
  CmiStartQD(quiet_after_release, &CpvAccess(released));
  CcdCallOnConditionKeep(CcdPROCESSOR_BEGIN_IDLE, release, NULL);
}

static void qd_report(void *msg) {
  CmiFree(msg);
  if (++CpvAccess(reports) == CmiNumPes()) {
    CmiPrintf("qd: fired on %d PEs after %d hops each\n", CmiNumPes(), BURST * (HOPS + 1));
    phase2();
  }
}

static void quiet(void *arg, double now) {
  (void)now;
  if (arg != (void *)&CpvAccess(tag)) CmiAbort("qd: the callback got %p, not its argument", arg);
  if (CpvAccess(handled) != BURST * (HOPS + 1))
    CmiAbort("qd: PE %d declared quiescent after %d of %d hops", CmiMyPe(), CpvAccess(handled), BURST * (HOPS + 1));
  {
    char m[CmiMsgHeaderSizeBytes];
    CmiSetHandler(m, CpvAccess(h_qd_report));
    CmiSyncSend(0, sizeof m, m);
  }
}

static void start(int argc, char **argv) {
  int i;
  CpvInitialize(int, h_hop);
  CpvInitialize(int, h_qd_report);
  CpvInitialize(int, handled);
  CpvInitialize(int, reports);
  CpvInitialize(int, tag);
  CpvInitialize(int, released);
  CpvInitialize(int, idle_edges);
  CpvAccess(h_hop) = CmiRegisterHandler(hop);
  CpvAccess(h_qd_report) = CmiRegisterHandler(qd_report);

  if (argc > 1 && strcmp(argv[1], "bad-state") == 0) {
    if (CmiMyPe() == 0) {
      CQdCreate((CQdState)NULL, 1);
      CmiAbort("qd: the bad state was not caught");
    }
    return;
  }

  for (i = 0; i < BURST; i++) {
    HopMsg *m = (HopMsg *)CmiAlloc(sizeof(HopMsg));
    CmiSetHandler(m, CpvAccess(h_hop));
    m->hops_left = HOPS;
    CmiSyncSendAndFree((CmiMyPe() + 1) % CmiNumPes(), sizeof(HopMsg), m);
  }
  CmiStartQD(quiet, &CpvAccess(tag));
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
