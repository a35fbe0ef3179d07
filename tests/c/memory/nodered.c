/* Node reductions, group struct reductions, CmiLookupGroup and remote
 * dynamic reduction IDs. One PE of every node (its rank varies with the
 * node) contributes to:
 *   nmsg     CmiNodeReduce: a message {sum, count, nodes bit mask}
 *   nmsgid   CmiNodeReduceID with an ID from CmiGetGlobalNodeReduction
 *   nstruct  CmiNodeReduceStruct of a Stat (pup, merge, delete in C)
 *   nstructid CmiNodeReduceStructID
 *   ndyn     CmiNodeReduceID with an ID from
 *            CmiGetDynamicNodeReductionRemote (asked for by the last node,
 *            delivered to every node's queue)
 * and every PE to:
 *   pdyn     CmiReduceID with an ID from CmiGetDynamicReductionRemote
 *            (asked for by the last PE, delivered to every PE)
 *   group    CmiGroupReduceStruct over the even PEs, highest first, made by
 *            the last PE, which checks CmiLookupGroup; every member calls
 *            on receiving the group in a message, when it may not have its
 *            definition yet.
 * Each result is checked where it runs (a PE of node 0, or the group's
 * first member), printed, and reported to PE 0. After all seven, PE 0
 * asks every PE how often deleteFn ran there and prints the total (once
 * per struct reduction on every node, or group member, but the root). */
#include <converse.h>

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int kind;
  int sum;
  int count;
  unsigned long long nodes;
} SumMsg;

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int value;
  CmiGroup group;
} IntMsg;

typedef struct {
  int sum;
  int count;
} Stat;

enum { NMSG, NMSGID, NSTRUCT, NSTRUCTID, NDYN, PDYN, GROUP, KINDS };
static const char *names[KINDS] = {"nmsg", "nmsgid", "nstruct", "nstructid", "ndyn", "pdyn", "group"};

CpvStaticDeclare(int, h_sum);
CpvStaticDeclare(int, h_done);
CpvStaticDeclare(int, h_ndyn);
CpvStaticDeclare(int, h_pdyn);
CpvStaticDeclare(int, h_group);
CpvStaticDeclare(int, h_check);
CpvStaticDeclare(int, finished);
CpvStaticDeclare(int, deletes);
CpvStaticDeclare(int, h_count);
CpvStaticDeclare(int, h_counted);
CpvStaticDeclare(int, counted);
CpvStaticDeclare(int, total_deletes);

static int value_of(int kind, int who) { return (kind + 1) * 1000 + who * who; }

static int contributes(void) { return CmiMyRank() == (CmiMyNode() * 7 + 3) % CmiMyNodeSize(); }

static void send_int(int pe, int handler, int value) {
  IntMsg *m = (IntMsg *)CmiAlloc(sizeof(IntMsg));
  CmiSetHandler(m, handler);
  m->value = value;
  CmiSyncSendAndFree(pe, sizeof(IntMsg), m);
}

/* ---- message form -------------------------------------------------------- */

static void *merge_sum(int *size, void *local, void **remote, int count) {
  SumMsg *l = (SumMsg *)local;
  int i;
  if (*size != (int)sizeof(SumMsg)) CmiAbort("merge_sum: *size is %d", *size);
  for (i = 0; i < count; i++) {
    SumMsg *r = (SumMsg *)remote[i];
    if (CmiGetHandler(r) != CmiGetHandler(l)) CmiAbort("merge_sum: a child's handler differs");
    if (r->kind != l->kind) CmiAbort("merge_sum: contributions to different reductions merged");
    l->sum += r->sum;
    l->count += r->count;
    if (l->nodes & r->nodes) CmiAbort("merge_sum: a node contributed twice");
    l->nodes |= r->nodes;
  }
  return local;
}

static void contribute_msg(int kind, CmiReductionID id, int by_id) {
  SumMsg *m = (SumMsg *)CmiAlloc(sizeof(SumMsg));
  CmiSetHandler(m, CpvAccess(h_sum));
  m->kind = kind;
  m->sum = value_of(kind, CmiMyNode());
  m->count = 1;
  m->nodes = 1ULL << CmiMyNode();
  if (by_id)
    CmiNodeReduceID(m, sizeof(SumMsg), merge_sum, id);
  else
    CmiNodeReduce(m, sizeof(SumMsg), merge_sum);
}

static void on_sum(void *msg) {
  SumMsg *m = (SumMsg *)msg;
  int kind = m->kind, n = CmiNumNodes(), want = 0, i;
  if (kind != NMSG && kind != NMSGID && kind != NDYN) CmiAbort("on_sum: kind %d", kind);
  for (i = 0; i < n; i++) want += value_of(kind, i);
  if (CmiMyNode() != 0) CmiAbort("%s: the result ran on node %d", names[kind], CmiMyNode());
  if (m->sum != want || m->count != n || m->nodes != (n == 64 ? ~0ULL : (1ULL << n) - 1))
    CmiAbort("%s: sum %d count %d, expected %d %d", names[kind], m->sum, m->count, want, n);
  CmiPrintf("%s: sum %d count %d on node 0\n", names[kind], m->sum, m->count);
  CmiFree(msg);
  send_int(0, CpvAccess(h_done), kind);
}

/* ---- struct form ----------------------------------------------------------- */

static void pup_stat(pup_er p, void *data) {
  Stat *s = (Stat *)data;
  pup_int(p, &s->sum);
  pup_int(p, &s->count);
}

static void delete_stat(void *data) {
  free(data);
  CpvAccess(deletes)++;
}

static void *merge_stat(int *size, void *local, void **remote, int count) {
  Stat *l = (Stat *)local;
  int i;
  (void)size;
  for (i = 0; i < count; i++) {
    Stat r;
    pup_er p = pup_new_fromMem(remote[i]);
    pup_stat(p, &r);
    pup_destroy(p);
    l->sum += r.sum;
    l->count += r.count;
  }
  return local;
}

static Stat *new_stat(int kind, int who) {
  Stat *s = (Stat *)malloc(sizeof *s);
  s->sum = value_of(kind, who);
  s->count = 1;
  return s;
}

static void check_stat(int kind, Stat *s, int n, const int *who) {
  int want = 0, i;
  for (i = 0; i < n; i++) want += value_of(kind, who[i]);
  if (s->sum != want || s->count != n)
    CmiAbort("%s: sum %d count %d, expected %d %d", names[kind], s->sum, s->count, want, n);
  CmiPrintf("%s: sum %d count %d\n", names[kind], s->sum, s->count);
  free(s);
  send_int(0, CpvAccess(h_done), kind);
}

static void all_nodes(int *who) {
  int i;
  for (i = 0; i < CmiNumNodes(); i++) who[i] = i;
}

static void dest_nstruct(void *data) {
  int who[64];
  if (CmiMyNode() != 0) CmiAbort("nstruct: dest ran on node %d", CmiMyNode());
  all_nodes(who);
  check_stat(NSTRUCT, (Stat *)data, CmiNumNodes(), who);
}

static void dest_nstructid(void *data) {
  int who[64];
  if (CmiMyNode() != 0) CmiAbort("nstructid: dest ran on node %d", CmiMyNode());
  all_nodes(who);
  check_stat(NSTRUCTID, (Stat *)data, CmiNumNodes(), who);
}

/* ---- the group -------------------------------------------------------------- */

static int group_of(int *pes) {
  int n = 0, pe;
  for (pe = CmiNumPes() - 1; pe >= 0; pe--)
    if (pe % 2 == 0) pes[n++] = pe;
  return n;
}

static void dest_group(void *data) {
  int pes[64], n = group_of(pes);
  if (CmiMyPe() != pes[0]) CmiAbort("group: dest ran on PE %d, not %d", CmiMyPe(), pes[0]);
  check_stat(GROUP, (Stat *)data, n, pes);
}

static void on_group(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  int npes = -1, *pes = NULL, want[64], n = group_of(want), i;
  CmiLookupGroup(m->group, &npes, &pes);
  if (npes != 0) {
    if (npes != n) CmiAbort("PE %d: CmiLookupGroup gave %d members, not %d", CmiMyPe(), npes, n);
    for (i = 0; i < n; i++)
      if (pes[i] != want[i]) CmiAbort("PE %d: member %d is %d, not %d", CmiMyPe(), i, pes[i], want[i]);
  } else if (pes != NULL) {
    CmiAbort("PE %d: CmiLookupGroup gave no members but a list", CmiMyPe());
  }
  if (CmiMyPe() % 2 == 0)
    CmiGroupReduceStruct(m->group, new_stat(GROUP, CmiMyPe()), pup_stat, merge_stat, dest_group,
                         delete_stat, (CmiReductionID)m->value);
  CmiFree(msg);
}

/* ---- remote dynamic IDs ----------------------------------------------------- */

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int id;
  int size;
  char data[8];
} IdMsg;

static void on_ndyn(void *msg) {
  IdMsg *m = (IdMsg *)msg;
  if (m->size != 8 || memcmp(m->data, "nodeids", 8) != 0) CmiAbort("ndyn: bad data");
  contribute_msg(NDYN, (CmiReductionID)m->id, 1);
  CmiFree(msg);
}

static void *merge_pe_sum(int *size, void *local, void **remote, int count) {
  SumMsg *l = (SumMsg *)local;
  int i;
  (void)size;
  for (i = 0; i < count; i++) {
    l->sum += ((SumMsg *)remote[i])->sum;
    l->count += ((SumMsg *)remote[i])->count;
  }
  return local;
}

static void on_pdyn_result(void *msg) {
  SumMsg *m = (SumMsg *)msg;
  int want = 0, i;
  for (i = 0; i < CmiNumPes(); i++) want += value_of(PDYN, i);
  if (CmiMyPe() != 0 || m->sum != want || m->count != CmiNumPes())
    CmiAbort("pdyn: sum %d count %d on PE %d, expected %d %d on 0", m->sum, m->count, CmiMyPe(), want,
             CmiNumPes());
  CmiPrintf("pdyn: sum %d count %d on PE 0\n", m->sum, m->count);
  CmiFree(msg);
  send_int(0, CpvAccess(h_done), PDYN);
}

static void on_pdyn(void *msg) {
  IdMsg *m = (IdMsg *)msg;
  SumMsg *s = (SumMsg *)CmiAlloc(sizeof(SumMsg));
  if (m->size != 8 || memcmp(m->data, "pe ids!", 8) != 0) CmiAbort("pdyn: bad data");
  CmiSetHandler(s, CpvAccess(h_check));
  s->kind = PDYN;
  s->sum = value_of(PDYN, CmiMyPe());
  s->count = 1;
  CmiReduceID(s, sizeof(SumMsg), merge_pe_sum, (CmiReductionID)m->id);
  CmiFree(msg);
}

/* ---- the end ------------------------------------------------------------------ */

static void counted(void *msg) {
  CpvAccess(total_deletes) += ((IntMsg *)msg)->value;
  CmiFree(msg);
  if (++CpvAccess(counted) == CmiNumPes()) {
    CmiPrintf("deletes: %d in all\n", CpvAccess(total_deletes));
    ConverseExit();
  }
}

static void count(void *msg) {
  CmiFree(msg);
  send_int(0, CpvAccess(h_counted), CpvAccess(deletes));
}

static void done(void *msg) {
  CmiFree(msg);
  if (++CpvAccess(finished) == KINDS) {
    int pe;
    CmiPrintf("all %d reductions done\n", KINDS);
    for (pe = 0; pe < CmiNumPes(); pe++) send_int(pe, CpvAccess(h_count), 0);
  }
}

static void start(int argc, char **argv) {
  int me = CmiMyPe(), last = CmiNumPes() - 1;
  (void)argc;
  (void)argv;
  CpvInitialize(int, h_sum);
  CpvInitialize(int, h_done);
  CpvInitialize(int, h_ndyn);
  CpvInitialize(int, h_pdyn);
  CpvInitialize(int, h_group);
  CpvInitialize(int, h_check);
  CpvInitialize(int, finished);
  CpvInitialize(int, deletes);
  CpvInitialize(int, h_count);
  CpvInitialize(int, h_counted);
  CpvInitialize(int, counted);
  CpvInitialize(int, total_deletes);
  CpvAccess(h_sum) = CmiRegisterHandler(on_sum);
  CpvAccess(h_done) = CmiRegisterHandler(done);
  CpvAccess(h_ndyn) = CmiRegisterHandler(on_ndyn);
  CpvAccess(h_pdyn) = CmiRegisterHandler(on_pdyn);
  CpvAccess(h_group) = CmiRegisterHandler(on_group);
  CpvAccess(h_check) = CmiRegisterHandler(on_pdyn_result);
  CpvAccess(h_count) = CmiRegisterHandler(count);
  CpvAccess(h_counted) = CmiRegisterHandler(counted);

  if (contributes()) {
    CmiReductionID a = CmiGetGlobalNodeReduction(), b = CmiGetGlobalNodeReduction();
    int node = CmiMyNode();
    contribute_msg(NMSG, 0, 0);
    CmiNodeReduceStruct(new_stat(NSTRUCT, node), pup_stat, merge_stat, dest_nstruct, delete_stat);
    if (node % 2 == 0) {
      contribute_msg(NMSGID, a, 1);
      CmiNodeReduceStructID(new_stat(NSTRUCTID, node), pup_stat, merge_stat, dest_nstructid,
                            delete_stat, b);
    } else {
      CmiNodeReduceStructID(new_stat(NSTRUCTID, node), pup_stat, merge_stat, dest_nstructid,
                            delete_stat, b);
      contribute_msg(NMSGID, a, 1);
    }
    if (node == CmiNumNodes() - 1)
      CmiGetDynamicNodeReductionRemote(CpvAccess(h_ndyn), -1, 8, (void *)"nodeids");
  }
  if (me == last) {
    int pes[64], n = group_of(pes), npes = 0, *got = NULL, i;
    CmiGroup g = CmiEstablishGroup(n, pes);
    CmiReductionID id = CmiGetGlobalReduction();
    CmiLookupGroup(g, &npes, &got);
    if (npes != n) CmiAbort("CmiLookupGroup on the creator: %d members, not %d", npes, n);
    for (i = 0; i < n; i++)
      if (got[i] != pes[i]) CmiAbort("CmiLookupGroup on the creator: member %d differs", i);
    for (i = 0; i < CmiNumPes(); i++) {
      IntMsg *m = (IntMsg *)CmiAlloc(sizeof(IntMsg));
      CmiSetHandler(m, CpvAccess(h_group));
      m->value = (int)id;
      m->group = g;
      CmiSyncSendAndFree(i, sizeof(IntMsg), m);
    }
    CmiGetDynamicReductionRemote(CpvAccess(h_pdyn), -1, 8, (void *)"pe ids!");
  } else {
    (void)CmiGetGlobalReduction(); /* the same IDs on every PE */
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
