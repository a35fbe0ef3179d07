/* Sends beyond one PE and reductions, run with +p 4 ++ppn 2 (two nodes of
 * two PEs) in one process or two. Each phase ends by reporting to PE 0,
 * which starts the next:
 *   1. node broadcast: every node's copy counted in a Csv under a node lock
 *   2. multicast to a group of the odd PEs; receivers write their copy and
 *      forward it to PE 0
 *   3. CmiMultipleSend of three messages to PE 1, which forwards the second
 *      one (a sub-message) to PE 0 with CmiSyncSendAndFree
 *   4. a vector send and a list send
 *   5. reductions: a sum by call order, then one by a global ID over a
 *      list (the even PEs)
 * then CmiDeliverSpecificMsg and the spanning tree, and PE 0 ends the job.
 * Needs at least 2 PEs (phase 2 multicasts to the odd ones). */
#include <converse.h>

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int value;
  int from;
} IntMsg;

CpvStaticDeclare(int, h_node_bcast);
CpvStaticDeclare(int, h_phase_done);
CpvStaticDeclare(int, h_mcast);
CpvStaticDeclare(int, h_multi);
CpvStaticDeclare(int, h_vector);
CpvStaticDeclare(int, h_list);
CpvStaticDeclare(int, h_sum);
CpvStaticDeclare(int, h_sum_done);
CpvStaticDeclare(int, h_start_reduce);
CpvStaticDeclare(int, h_id_sum);
CpvStaticDeclare(int, h_specific);
CpvStaticDeclare(int, h_other);
CpvStaticDeclare(int, phase_reports);
CpvStaticDeclare(CmiReductionID, red_id);

CsvStaticDeclare(int, node_copies);
CsvStaticDeclare(CmiNodeLock, node_lock);

static void *new_int(int handler, int value) {
  IntMsg *m = (IntMsg *)CmiAlloc(sizeof(IntMsg));
  CmiSetHandler(m, handler);
  m->value = value;
  m->from = CmiMyPe();
  return m;
}

static void report(int phase) { CmiSyncSendAndFree(0, sizeof(IntMsg), new_int(CpvAccess(h_phase_done), phase)); }

static void start_phase(int phase);

/* PE 0 counts the reports of a phase; the expected number per phase: */
static int expected_reports(int phase) {
  switch (phase) {
    case 1: return CmiNumNodes();     /* one per node */
    case 2: return CmiNumPes() / 2;   /* the odd PEs */
    case 3: return 1;                 /* the forwarded sub-message */
    case 4: return 1 + 2;             /* vector receiver + two list receivers */
    default: return 1;
  }
}

static void phase_done(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  int phase = m->value;
  CmiFree(msg);
  CpvAccess(phase_reports)++;
  if (CpvAccess(phase_reports) == expected_reports(phase)) {
    CpvAccess(phase_reports) = 0;
    CmiPrintf("phase %d done\n", phase);
    start_phase(phase + 1);
  }
}

static void node_bcast(void *msg) {
  int copies;
  CmiFree(msg);
  CmiLock(CsvAccess(node_lock));
  copies = ++CsvAccess(node_copies);
  CmiUnlock(CsvAccess(node_lock));
  /* A node message runs on one PE of the node: one copy per node. */
  if (copies != 1) CmiAbort("node %d got %d copies", CmiMyNode(), copies);
  report(1);
}

static void mcast(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  if (CmiMyPe() % 2 != 1) CmiAbort("multicast reached PE %d, not in the group", CmiMyPe());
  if (m->value != 42) CmiAbort("multicast value %d", m->value);
  m->value = CmiMyPe();
  m->from = CmiMyPe();
  CmiSetHandler(m, CpvAccess(h_phase_done));
  m->value = 2;
  CmiSyncSendAndFree(0, sizeof(IntMsg), m);
}

static void multi(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  if (m->value == 2) {
    /* forward this sub-message as it is, to PE 0's report handler */
    CmiSetHandler(m, CpvAccess(h_phase_done));
    m->value = 3;
    CmiSyncSendAndFree(0, sizeof(IntMsg), m);
  } else {
    CmiFree(msg);
  }
}

static void vector(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  if (CmiSize(msg) != (int)sizeof(IntMsg) || m->value != 1234) {
    CmiAbort("vector message: size %d value %d", CmiSize(msg), m->value);
  }
  CmiFree(msg);
  report(4);
}

static void list(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  if (m->value != 7) CmiAbort("list message value %d", m->value);
  CmiFree(msg);
  report(4);
}

static void *sum_merge(int *size, void *local, void **remote, int count) {
  IntMsg *l = (IntMsg *)local;
  int i;
  for (i = 0; i < count; i++) l->value += ((IntMsg *)remote[i])->value;
  *size = sizeof(IntMsg);
  return local;
}

static void sum_done(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  int want = 0, pe;
  for (pe = 0; pe < CmiNumPes(); pe++) want += pe + 1;
  if (m->value != want) CmiAbort("sum %d, expected %d", m->value, want);
  CmiPrintf("reduce: sum %d on PE %d\n", m->value, CmiMyPe());
  CmiFree(msg);
  /* Now every PE reduces over the even PEs by ID. */
  CmiSyncBroadcastAllAndFree(sizeof(IntMsg), new_int(CpvAccess(h_start_reduce), 0));
}

static void start_reduce(void *msg) {
  CmiFree(msg);
  if (CmiMyPe() % 2 == 0) {
    int evens[64], n = 0, pe;
    for (pe = 0; pe < CmiNumPes(); pe += 2) evens[n++] = pe;
    CmiListReduce(n, evens, new_int(CpvAccess(h_id_sum), 10 * CmiMyPe()), sizeof(IntMsg), sum_merge,
                  CpvAccess(red_id));
  }
}

static void id_sum(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  int want = 0, pe;
  for (pe = 0; pe < CmiNumPes(); pe += 2) want += 10 * pe;
  if (m->value != want) CmiAbort("list sum %d, expected %d", m->value, want);
  CmiPrintf("list reduce: sum %d on PE %d\n", m->value, CmiMyPe());
  CmiFree(msg);
  start_phase(6);
}

static void specific(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  CmiPrintf("specific message %d delivered first\n", m->value);
  CmiFree(msg);
}

static void other(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  CmiPrintf("other message %d delivered after\n", m->value);
  CmiFree(msg);
  if (m->value == 2) {
    int root = CmiSpanTreeRoot(), children[64], n, i, total = 0, pe;
    for (pe = 0; pe < CmiNumPes(); pe++) {
      n = CmiNumSpanTreeChildren(pe);
      CmiSpanTreeChildren(pe, children);
      for (i = 0; i < n; i++) {
        if (CmiSpanTreeParent(children[i]) != pe) CmiAbort("tree: parent of %d", children[i]);
      }
      total += n;
    }
    if (CmiSpanTreeParent(root) != -1 || total != CmiNumPes() - 1) CmiAbort("tree: %d edges", total);
    CmiPrintf("spanning tree: root %d, %d edges\n", root, total);
    ConverseExit();
  }
}

static void start_phase(int phase) {
  switch (phase) {
    case 1: {
      IntMsg m;
      CmiSetHandler(&m, CpvAccess(h_node_bcast));
      CmiSyncNodeBroadcastAll(sizeof m, &m);
      break;
    }
    case 2: {
      int odds[64], n = 0, pe;
      CmiGroup g;
      IntMsg m;
      for (pe = 1; pe < CmiNumPes(); pe += 2) odds[n++] = pe;
      g = CmiEstablishGroup(n, odds);
      CmiSetHandler(&m, CpvAccess(h_mcast));
      m.value = 42;
      CmiSyncMulticast(g, sizeof m, &m);
      break;
    }
    case 3: {
      IntMsg parts[3];
      int sizes[3], i;
      char *comps[3];
      for (i = 0; i < 3; i++) {
        CmiSetHandler(&parts[i], CpvAccess(h_multi));
        parts[i].value = i + 1;
        sizes[i] = sizeof(IntMsg);
        comps[i] = (char *)&parts[i];
      }
      CmiMultipleSend(1, 3, sizes, comps);
      break;
    }
    case 4: {
      IntMsg head;
      int sizes[2], pes[2] = {0, CmiNumPes() - 1};
      char *comps[2];
      int value = 1234;
      IntMsg l;
      CmiSetHandler(&head, CpvAccess(h_vector));
      sizes[0] = CmiMsgHeaderSizeBytes;
      comps[0] = (char *)&head;
      sizes[1] = (int)(sizeof(IntMsg) - CmiMsgHeaderSizeBytes);
      head.value = 0;
      head.from = 0;
      comps[1] = (char *)&head.value;
      /* the second piece carries value and from */
      memcpy(&head.value, &value, sizeof value);
      CmiSyncVectorSend(CmiNumPes() - 1, 2, sizes, comps);
      CmiSetHandler(&l, CpvAccess(h_list));
      l.value = 7;
      CmiSyncListSend(2, pes, sizeof l, &l);
      break;
    }
    case 5:
      /* Every PE contributes pe + 1; the result runs sum_done on PE 0. */
      CmiSyncBroadcastAllAndFree(sizeof(IntMsg), new_int(CpvAccess(h_sum), 0));
      break;
    case 6: {
      /* Two messages for handler h_other, then one for h_specific:
       * CmiDeliverSpecificMsg runs the specific one first. */
      CmiSyncSendAndFree(0, sizeof(IntMsg), new_int(CpvAccess(h_other), 1));
      CmiSyncSendAndFree(0, sizeof(IntMsg), new_int(CpvAccess(h_other), 2));
      CmiSyncSendAndFree(0, sizeof(IntMsg), new_int(CpvAccess(h_specific), 9));
      CmiDeliverSpecificMsg(CpvAccess(h_specific));
      break;
    }
  }
}

static void contribute(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  m->value = CmiMyPe() + 1;
  /* The merged message runs this handler on PE 0. */
  CmiSetHandler(m, CpvAccess(h_sum_done));
  CmiReduce(m, sizeof(IntMsg), sum_merge);
}

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CpvInitialize(int, h_node_bcast);
  CpvInitialize(int, h_phase_done);
  CpvInitialize(int, h_mcast);
  CpvInitialize(int, h_multi);
  CpvInitialize(int, h_vector);
  CpvInitialize(int, h_list);
  CpvInitialize(int, h_sum);
  CpvInitialize(int, h_sum_done);
  CpvInitialize(int, h_start_reduce);
  CpvInitialize(int, h_id_sum);
  CpvInitialize(int, h_specific);
  CpvInitialize(int, h_other);
  CpvInitialize(int, phase_reports);
  CpvInitialize(CmiReductionID, red_id);
  CsvInitialize(int, node_copies);
  CsvInitialize(CmiNodeLock, node_lock);
  if (CmiMyRank() == 0) CsvAccess(node_lock) = CmiCreateLock();
  CmiNodeBarrier(); /* the lock exists before any PE of the node uses it */
  CpvAccess(h_node_bcast) = CmiRegisterHandler(node_bcast);
  CpvAccess(h_phase_done) = CmiRegisterHandler(phase_done);
  CpvAccess(h_mcast) = CmiRegisterHandler(mcast);
  CpvAccess(h_multi) = CmiRegisterHandler(multi);
  CpvAccess(h_vector) = CmiRegisterHandler(vector);
  CpvAccess(h_list) = CmiRegisterHandler(list);
  CpvAccess(h_sum) = CmiRegisterHandler(contribute);
  CpvAccess(h_sum_done) = CmiRegisterHandler(sum_done);
  CpvAccess(h_start_reduce) = CmiRegisterHandler(start_reduce);
  CpvAccess(h_id_sum) = CmiRegisterHandler(id_sum);
  CpvAccess(h_specific) = CmiRegisterHandler(specific);
  CpvAccess(h_other) = CmiRegisterHandler(other);
  CpvAccess(red_id) = CmiGetGlobalReduction();
  if (CmiMyPe() == 0) start_phase(1);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
