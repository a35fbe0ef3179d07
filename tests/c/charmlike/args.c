/* Command-line options as Charm++ programs read them: every PE takes its
 * own options out of argv in its module init (the job is started with
 * `-iters 3 -scale=2.5 -name bob -verbose -big 0x10000000000 rest`), and
 * PE 0 checks what every PE read. */
#include "suite.h"

typedef struct {
  char core[CmiMsgHeaderSizeBytes];
  int pe, iters, verbose, left;
  CmiInt8 big;
  double scale;
  char name[16], rest[16];
} ArgsMsg;

CpvStaticDeclare(ArgsMsg, mine);
CpvStaticDeclare(int, report_handler);
CpvStaticDeclare(int, ask_handler);
CpvStaticDeclare(int, reports);

static void report(void *msg);
static void ask(void *msg);

void args_moduleinit(char **argv) {
  ArgsMsg *a;
  char *name = NULL;
  CpvInitialize(ArgsMsg, mine);
  CpvInitialize(int, report_handler);
  CpvInitialize(int, ask_handler);
  CpvInitialize(int, reports);
  CpvAccess(report_handler) = CmiRegisterHandler(report);
  CpvAccess(ask_handler) = CmiRegisterHandler(ask);
  a = &CpvAccess(mine);
  a->iters = -1;
  CmiGetArgIntDesc(argv, "-iters", &a->iters, "iterations");
  CmiGetArgDouble(argv, "-scale", &a->scale);
  CmiGetArgLong(argv, "-big", &a->big);
  if (CmiGetArgString(argv, "-name", &name)) snprintf(a->name, sizeof a->name, "%s", name);
  a->verbose = CmiGetArgFlagDesc(argv, "-verbose", "say more");
  /* Not given: 0, the destination unchanged. */
  if (CmiGetArgInt(argv, "-missing", &a->left) != 0 || a->left != 0) CmiAbort("args: -missing found");
  a->left = CmiGetArgc(argv);
  if (a->left > 1) snprintf(a->rest, sizeof a->rest, "%s", argv[1]);
}

static void report(void *msg) {
  ArgsMsg *m = (ArgsMsg *)msg;
  if (m->iters != 3 || m->scale != 2.5 || m->big != (CmiInt8)1 << 40 || strcmp(m->name, "bob") ||
      m->verbose != 1 || m->left != 2 || strcmp(m->rest, "rest"))
    CmiAbort("args: PE %d read iters %d scale %g big %lld name %s verbose %d, %d left (%s)", m->pe,
             m->iters, m->scale, (long long)m->big, m->name, m->verbose, m->left, m->rest);
  CmiFree(m);
  if (++CpvAccess(reports) == CmiNumPes()) {
    CmiPrintf("args: every PE read -iters 3 -scale 2.5 -big 2^40 -name bob -verbose\n");
    suite_done("args");
  }
}

static void ask(void *msg) {
  ArgsMsg *m = (ArgsMsg *)msg;
  *m = CpvAccess(mine);
  CmiInitMsgHeader(m, sizeof *m);
  m->pe = CmiMyPe();
  CmiSetHandler(m, CpvAccess(report_handler));
  CmiSyncSendAndFree(0, sizeof *m, m);
}

void args_init(void) {
  void *m = CmiAlloc(sizeof(ArgsMsg));
  CmiSetHandler(m, CpvAccess(ask_handler));
  CmiSyncBroadcastAllAndFree(sizeof(ArgsMsg), m);
}
