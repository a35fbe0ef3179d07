/* The extensions manual's sample balancer (section 7.3, `cldb.test.c`):
 * every PE periodically hands half of its movable seeds to the next PE in a
 * ring. The program defines CldEnqueue, CldModuleInit and CldGetStrategy,
 * and so links them instead of the library's; the runtime calls its
 * CldModuleInit on every PE before the start function. The balancer's code
 * is the manual's, with its braces put back (the manual prints it without
 * them) and the status counters kept.
 *
 * The driver: PE 0 enqueues SEEDS seeds (CLD_ANYWHERE, so they become
 * tokens), checks the token count, calls CldDistributeTokens itself once
 * (which moves half of them to PE 1 at once: CldLoad()/2 of them), checks
 * the count again, and the seeds then run wherever the balancing puts
 * them; each reports to PE 0, which checks that every seed ran exactly
 * once and ends the job. Then PE 0 gives DIRECTED more seeds to named PEs
 * (CldEnqueue(pe, ...)): those to another PE take the balancer's third
 * branch, CldSwitchHandler and then CmiSetInfo on the same message, so
 * the set-aside handler and the info function must both survive (they
 * are separate header fields, xhdl and info); each must run on its PE.
 *
 * Built whole, or in two halves (CLDTEST_BALANCER_ONLY for the balancer, in
 * an archive; CLDTEST_DRIVER_ONLY for a driver that names nothing of the
 * balancer but Charm++'s Cld functions): the archive's balancer must still
 * win over the library's. */
#include <stdio.h>
#include "converse.h"
#include "cldb.h"
#define PERIOD 100
#define MAXMSGBFRSIZE 100000

#ifndef CLDTEST_DRIVER_ONLY

const char *CldGetStrategy(void) { return "test"; }

CpvDeclare(int, CldHandlerIndex);
CpvDeclare(int, CldBalanceHandlerIndex);
CpvDeclare(int, CldRelocatedMessages);
CpvDeclare(int, CldLoadBalanceMessages);
CpvDeclare(int, CldMessageChunks);

void CldDistributeTokens(void) {
  int destPe = (CmiMyPe() + 1) % CmiNumPes(), numToSend;

  numToSend = CldLoad() / 2;
  if (numToSend > CldCountTokens()) numToSend = CldCountTokens() / 2;
  if (numToSend > 0) CldMultipleSend(destPe, numToSend);
  CcdCallFnAfter((CcdVoidFn)CldDistributeTokens, NULL, PERIOD);
}

void CldBalanceHandler(void *msg) {
  CmiGrabBuffer((void **)&msg);
  CldRestoreHandler(msg);
  CldPutToken(msg);
}

void CldHandler(void *msg) {
  CldInfoFn ifn;
  CldPackFn pfn;
  int len, queueing, priobits;
  unsigned int *prioPtr;

  CmiGrabBuffer((void **)&msg);
  CldRestoreHandler(msg);
  ifn = (CldInfoFn)CmiHandlerToFunction(CmiGetInfo(msg));
  ifn(msg, &pfn, &len, &queueing, &priobits, &prioPtr);
  CsdEnqueueGeneral(msg, queueing, priobits, prioPtr);
}

void CldEnqueue(int pe, void *msg, int infofn) {
  int len, queueing, priobits;
  unsigned int *prioPtr;
  CldInfoFn ifn = (CldInfoFn)CmiHandlerToFunction(infofn);
  CldPackFn pfn;

  if ((pe == CLD_ANYWHERE) && (CmiNumPes() > 1)) {
    ifn(msg, &pfn, &len, &queueing, &priobits, &prioPtr);
    CmiSetInfo(msg, infofn);
    CldPutToken(msg);
  } else if ((pe == CmiMyPe()) || (CmiNumPes() == 1)) {
    ifn(msg, &pfn, &len, &queueing, &priobits, &prioPtr);
    CmiSetInfo(msg, infofn);
    CsdEnqueueGeneral(msg, queueing, priobits, prioPtr);
  } else {
    ifn(msg, &pfn, &len, &queueing, &priobits, &prioPtr);
    if (pfn) {
      pfn(&msg);
      ifn(msg, &pfn, &len, &queueing, &priobits, &prioPtr);
    }
    CldSwitchHandler(msg, CpvAccess(CldHandlerIndex));
    CmiSetInfo(msg, infofn);
    if (pe == CLD_BROADCAST)
      CmiSyncBroadcastAndFree(len, msg);
    else if (pe == CLD_BROADCAST_ALL)
      CmiSyncBroadcastAllAndFree(len, msg);
    else
      CmiSyncSendAndFree(pe, len, msg);
  }
}

void CldModuleInit(void) {
  char *argv[] = {NULL};
  CpvInitialize(int, CldHandlerIndex);
  CpvAccess(CldHandlerIndex) = CmiRegisterHandler(CldHandler);
  CpvInitialize(int, CldBalanceHandlerIndex);
  CpvAccess(CldBalanceHandlerIndex) = CmiRegisterHandler(CldBalanceHandler);
  CpvInitialize(int, CldRelocatedMessages);
  CpvInitialize(int, CldLoadBalanceMessages);
  CpvInitialize(int, CldMessageChunks);
  CpvAccess(CldRelocatedMessages) = CpvAccess(CldLoadBalanceMessages) =
      CpvAccess(CldMessageChunks) = 0;
  CldModuleGeneralInit(argv);
  if (CmiNumPes() > 1) CldDistributeTokens();
}

#endif /* CLDTEST_DRIVER_ONLY */

#ifndef CLDTEST_BALANCER_ONLY
/* ---- the driver ---------------------------------------------------------- */

#define SEEDS 40
#define DIRECTED 8
#define ALL_SEEDS (SEEDS + DIRECTED)
/* The PE that directed seed i (SEEDS <= i < ALL_SEEDS) is given to. */
#define DIRECTED_PE(i) (((i) - SEEDS + 1) % CmiNumPes())

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int seed;
} SeedMsg;

CpvStaticDeclare(int, seed_handler);
CpvStaticDeclare(int, report_handler);
CpvStaticDeclare(int, stop_handler);
CpvStaticDeclare(int, info_index);
CpvStaticDeclare(int, ran);
CpvStaticDeclare(char *, seen);

static void seed_info(void *msg, CldPackFn *pfn, int *len, int *queueing, int *priobits,
                      unsigned int **prioptr) {
  (void)msg;
  *pfn = 0;
  *len = sizeof(SeedMsg);
  *queueing = CQS_QUEUEING_FIFO;
  *priobits = 0;
  *prioptr = 0;
}

static void stop(void *msg) {
  CmiFree(msg);
  CsdExitScheduler();
}

static void report(void *msg) {
  SeedMsg *m = (SeedMsg *)msg;
  int i;
  if (m->seed < 0 || m->seed >= ALL_SEEDS) CmiAbort("cldtest: seed %d out of range", m->seed);
  if (CpvAccess(seen)[m->seed]++) CmiAbort("cldtest: seed %d ran twice", m->seed);
  CmiFree(msg);
  if (++CpvAccess(ran) == ALL_SEEDS) {
    for (i = 0; i < ALL_SEEDS; i++)
      if (CpvAccess(seen)[i] != 1) CmiAbort("cldtest: seed %d ran %d times", i, CpvAccess(seen)[i]);
    CmiPrintf("cldtest: all %d seeds ran once, %d of them on the PE named\n", ALL_SEEDS,
              DIRECTED);
    {
      char *s = (char *)CmiAlloc(CmiMsgHeaderSizeBytes);
      CmiSetHandler(s, CpvAccess(stop_handler));
      CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, s);
    }
  }
}

static void run_seed(void *msg) {
  SeedMsg *m = (SeedMsg *)msg;
  if (m->seed >= SEEDS && CmiMyPe() != DIRECTED_PE(m->seed))
    CmiAbort("cldtest: seed %d for PE %d ran on PE %d", m->seed, DIRECTED_PE(m->seed), CmiMyPe());
  CmiSetHandler(m, CpvAccess(report_handler));
  CmiSyncSendAndFree(0, sizeof(SeedMsg), m);
}

static void start(int argc, char **argv) {
  int i, before, after;
  (void)argc;
  (void)argv;
  CpvInitialize(int, seed_handler);
  CpvInitialize(int, report_handler);
  CpvInitialize(int, stop_handler);
  CpvInitialize(int, info_index);
  CpvInitialize(int, ran);
  CpvInitialize(char *, seen);
  CpvAccess(seed_handler) = CmiRegisterHandler(run_seed);
  CpvAccess(report_handler) = CmiRegisterHandler(report);
  CpvAccess(stop_handler) = CmiRegisterHandler(stop);
  CpvAccess(info_index) = CldRegisterInfoFn(seed_info);
  CpvAccess(seen) = (char *)calloc(ALL_SEEDS, 1);
  if (CmiMyPe() != 0) return;
  CmiPrintf("cldtest: strategy %s\n", CldGetStrategy());
#ifndef CLDTEST_DRIVER_ONLY
  CmiPrintf("cldtest: CldModuleInit ran: handler %d\n", CpvAccess(CldHandlerIndex) > 0);
#endif
  for (i = 0; i < SEEDS; i++) {
    SeedMsg *m = (SeedMsg *)CmiAlloc(sizeof(SeedMsg));
    CmiSetHandler(m, CpvAccess(seed_handler));
    m->seed = i;
    CldEnqueue(CLD_ANYWHERE, m, CpvAccess(info_index));
  }
  before = CldCountTokens();
#ifndef CLDTEST_DRIVER_ONLY
  if (CmiNumPes() > 1) CldDistributeTokens();
#endif
  after = CldCountTokens();
  CmiPrintf("cldtest: PE 0 held %d tokens, then %d\n", before, after);
  for (i = SEEDS; i < ALL_SEEDS; i++) {
    SeedMsg *m = (SeedMsg *)CmiAlloc(sizeof(SeedMsg));
    CmiSetHandler(m, CpvAccess(seed_handler));
    m->seed = i;
    CldEnqueue(DIRECTED_PE(i), m, CpvAccess(info_index));
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
#endif /* CLDTEST_BALANCER_ONLY */
