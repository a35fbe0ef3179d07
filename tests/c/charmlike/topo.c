/* The CPU-topology calls Charm++'s benchmarks make at start-up: every PE
 * checks that its answers agree with each other, reports its host to PE
 * 0, which checks the hosts' PE lists against the reports and prints the
 * layout. */
#include "suite.h"
#include "cputopology.h"

typedef struct {
  char core[CmiMsgHeaderSizeBytes];
  int pe, host, rank;
} TopoMsg;

CpvStaticDeclare(int, ask_handler);
CpvStaticDeclare(int, tell_handler);
CpvStaticDeclare(int, told);
CpvStaticDeclare(int *, host_of);
CpvStaticDeclare(int *, rank_of);

static void ask(void *msg) {
  TopoMsg *m = (TopoMsg *)msg;
  int me = CmiMyPe(), host = CmiPhysicalNodeID(me), *pes, n, i, found = 0;
  if (!CmiCpuTopologyEnabled()) CmiAbort("topo: topology not enabled");
  if (CmiNumCores() < 1) CmiAbort("topo: %d cores", CmiNumCores());
  if (host < 0 || host >= CmiNumPhysicalNodes()) CmiAbort("topo: host %d", host);
  CmiGetPesOnPhysicalNode(host, &pes, &n);
  if (n != CmiNumPesOnPhysicalNode(host)) CmiAbort("topo: %d PEs listed, %d counted", n, CmiNumPesOnPhysicalNode(host));
  for (i = 0; i < n; i++) {
    if (i > 0 && pes[i] <= pes[i - 1]) CmiAbort("topo: host %d's PEs out of order", host);
    if (pes[i] == me) {
      found = 1;
      if (CmiPhysicalRank(me) != i) CmiAbort("topo: PE %d is %d-th on its host, rank %d", me, i, CmiPhysicalRank(me));
    }
  }
  if (!found) CmiAbort("topo: PE %d not on its host's list", me);
  if (CmiGetFirstPeOnPhysicalNode(host) != pes[0]) CmiAbort("topo: first PE");
  if (!CmiPeOnSamePhysicalNode(me, pes[0])) CmiAbort("topo: same node");
  /* The PEs of a node share its host. */
  if (CmiPhysicalNodeID(CmiNodeFirst(CmiMyNode())) != host) CmiAbort("topo: a node on two hosts");
  m->pe = me;
  m->host = host;
  m->rank = CmiPhysicalRank(me);
  CmiSetHandler(m, CpvAccess(tell_handler));
  CmiSyncSendAndFree(0, sizeof *m, m);
}

static void tell(void *msg) {
  TopoMsg *m = (TopoMsg *)msg;
  int h, i, n, *pes, total = 0;
  CpvAccess(host_of)[m->pe] = m->host;
  CpvAccess(rank_of)[m->pe] = m->rank;
  CmiFree(m);
  if (++CpvAccess(told) < CmiNumPes()) return;
  if (CmiPhysicalNodeID(0) != 0) CmiAbort("topo: PE 0 is not on host 0");
  for (h = 0; h < CmiNumPhysicalNodes(); h++) {
    CmiGetPesOnPhysicalNode(h, &pes, &n);
    if (n < 1) CmiAbort("topo: host %d holds no PE", h);
    for (i = 0; i < n; i++)
      if (CpvAccess(host_of)[pes[i]] != h || CpvAccess(rank_of)[pes[i]] != i)
        CmiAbort("topo: PE %d said host %d rank %d", pes[i], CpvAccess(host_of)[pes[i]], CpvAccess(rank_of)[pes[i]]);
    total += n;
    CmiPrintf("topo: host %d holds %d PEs from PE %d\n", h, n, CmiGetFirstPeOnPhysicalNode(h));
  }
  if (total != CmiNumPes()) CmiAbort("topo: the hosts hold %d PEs of %d", total, CmiNumPes());
  suite_done("topo");
}

void topo_moduleinit(void) {
  CpvInitialize(int, ask_handler);
  CpvInitialize(int, tell_handler);
  CpvInitialize(int, told);
  CpvInitialize(int *, host_of);
  CpvInitialize(int *, rank_of);
  CpvAccess(ask_handler) = CmiRegisterHandler(ask);
  CpvAccess(tell_handler) = CmiRegisterHandler(tell);
}

void topo_init(void) {
  TopoMsg m;
  CpvAccess(host_of) = (int *)calloc(CmiNumPes(), sizeof(int));
  CpvAccess(rank_of) = (int *)calloc(CmiNumPes(), sizeof(int));
  CmiInitMsgHeader(&m, sizeof m);
  CmiSetHandler(&m, CpvAccess(ask_handler));
  CmiSyncBroadcastAll(sizeof m, &m);
}
