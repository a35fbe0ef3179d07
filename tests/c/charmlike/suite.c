/* A Charm++-style multi-part test: every part's module init runs on every
 * PE at start-up (after CPU affinity and topology are set up, as
 * Charm++'s benchmarks do), PE 0 starts the parts one after another, and
 * each part reports back when done; after the last, the job ends. */
#include <stdio.h>
#include "suite.h"
#include "cputopology.h"

CpvStaticDeclare(int, done_handler);
CpvStaticDeclare(int, next_part);

typedef struct {
  char core[CmiMsgHeaderSizeBytes];
  char part[32];
} DoneMsg;

static void (*const parts[])(void) = {ring_init, topo_init, args_init, vars_init};
#define NPARTS ((int)(sizeof parts / sizeof parts[0]))

static void next(void) {
  int p = CpvAccess(next_part)++;
  if (p < NPARTS) {
    parts[p]();
  } else {
    CmiPrintf("suite: all %d parts passed on %d PEs\n", NPARTS, CmiNumPes());
    ConverseExit();
  }
}

static void done_handler(void *msg) {
  DoneMsg *m = (DoneMsg *)msg;
  CmiPrintf("suite: %s passed\n", m->part);
  CmiFree(m);
  next();
}

/* Any PE: tells PE 0 that `part` passed (a message made on the stack,
 * its header readied with CmiInitMsgHeader, sent with a copying send). */
void suite_done(const char *part) {
  DoneMsg m;
  memset(&m, 0, sizeof m);
  CmiInitMsgHeader(&m, sizeof m);
  snprintf(m.part, sizeof m.part, "%s", part);
  CmiSetHandler(&m, CpvAccess(done_handler));
  CmiSyncSend(0, sizeof m, &m);
}

static void start(int argc, char **argv) {
  CmiInitCPUAffinity(argv);
  CmiInitCPUTopology(argv);
  if (argc != CmiGetArgc(argv)) CmiAbort("suite: argc %d but CmiGetArgc %d", argc, CmiGetArgc(argv));
  /* Where each PE may run, as Charm++ benchmarks print it on request. */
  if (CmiGetArgFlag(argv, "-print-affinity") && CmiPrintCPUAffinity() != 0)
    CmiAbort("suite: PE %d cannot read its affinity", CmiMyPe());
  CpvInitialize(int, done_handler);
  CpvInitialize(int, next_part);
  CpvAccess(done_handler) = CmiRegisterHandler(done_handler);
  CpvAccess(next_part) = 0;
  ring_moduleinit();
  topo_moduleinit();
  args_moduleinit(argv);
  vars_moduleinit();
  if (CmiMyPe() == 0) next();
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
