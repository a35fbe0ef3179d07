/* Struct reductions of a C struct {sum, max, count, the PEs that took part
 * (a heap array)}, with C pup, merge and delete functions:
 *   order   CmiReduceStruct over all PEs (by call order)
 *   id      CmiReduceStructID over all PEs (even PEs call it after the
 *           order one, odd PEs before: the ID matches them)
 *   list    CmiListReduceStruct over the odd PEs, highest first (so its
 *           root is not PE 0; PE 0 alone with one PE), deleteFn NULL
 * Each root's dest checks the merged struct and frees it (dest owns it),
 * then tells PE 0. Once all three are done, every PE checks its delete
 * count: deleteFn runs once per reduction on every PE but the root, and
 * not at all with a NULL deleteFn; on a leaf it has run when the call
 * returns. */
#include <converse.h>

typedef struct {
  int sum;
  int max;
  int count;
  int npes;
  int *pes;
} Stat;

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int value;
} IntMsg;

enum { ORDER = 0, ID = 1, LIST = 2 };

CpvStaticDeclare(int, deletes);
CpvStaticDeclare(int, h_done);
CpvStaticDeclare(int, h_report_request);
CpvStaticDeclare(int, h_report);
CpvStaticDeclare(int, finished);
CpvStaticDeclare(int, reports);
CpvStaticDeclare(int, total_deletes);
CpvStaticDeclare(CmiReductionID, id_all);
CpvStaticDeclare(CmiReductionID, id_list);
CpvStaticDeclare(Stat *, list_data);

static int value_of(int kind, int pe) { return (kind + 1) * 100 + pe * pe; }

/* The list: the odd PEs, highest first; PE 0 alone with one PE. */
static int list_of(int *pes) {
  int n = 0, pe;
  for (pe = CmiNumPes() - 1; pe >= 1; pe--)
    if (pe % 2 == 1) pes[n++] = pe;
  if (n == 0) pes[n++] = 0;
  return n;
}

static int in_list(int pe, int *pos) {
  int pes[64], n = list_of(pes), i;
  for (i = 0; i < n; i++)
    if (pes[i] == pe) {
      *pos = i;
      return 1;
    }
  return 0;
}

static Stat *new_stat(int kind) {
  Stat *s = (Stat *)malloc(sizeof *s);
  s->sum = s->max = value_of(kind, CmiMyPe());
  s->count = 1;
  s->npes = 1;
  s->pes = (int *)malloc(sizeof(int));
  s->pes[0] = CmiMyPe();
  return s;
}

static void pup_stat(pup_er p, void *data) {
  Stat *s = (Stat *)data;
  pup_int(p, &s->sum);
  pup_int(p, &s->max);
  pup_int(p, &s->count);
  pup_int(p, &s->npes);
  if (pup_isUnpacking(p)) s->pes = (int *)malloc(s->npes * sizeof(int));
  pup_ints(p, s->pes, s->npes);
}

static void delete_stat(void *data) {
  Stat *s = (Stat *)data;
  free(s->pes);
  free(s);
  CpvAccess(deletes)++;
}

/* remote[i] is child i's Stat as pup_stat packed it. */
static void *merge_stat(int *size, void *local, void **remote, int count) {
  Stat *l = (Stat *)local;
  int i;
  if (*size != 0) CmiAbort("merge: *size is %d, not 0", *size);
  if (((uintptr_t)remote[0]) % 16 != 0) CmiAbort("merge: remote data not 16-aligned");
  for (i = 0; i < count; i++) {
    Stat r;
    pup_er p = pup_new_fromMem(remote[i]);
    pup_stat(p, &r);
    pup_destroy(p);
    l->sum += r.sum;
    if (r.max > l->max) l->max = r.max;
    l->count += r.count;
    l->pes = (int *)realloc(l->pes, (l->npes + r.npes) * sizeof(int));
    memcpy(l->pes + l->npes, r.pes, r.npes * sizeof(int));
    l->npes += r.npes;
    free(r.pes);
  }
  return local;
}

static void check(const char *what, int kind, Stat *s, int root, int n, const int *pes) {
  int sum = 0, max = -1, i, j;
  if (CmiMyPe() != root) CmiAbort("%s: dest ran on PE %d, not the root %d", what, CmiMyPe(), root);
  for (i = 0; i < n; i++) {
    int v = value_of(kind, pes[i]);
    sum += v;
    if (v > max) max = v;
  }
  if (s->sum != sum || s->max != max || s->count != n || s->npes != n)
    CmiAbort("%s: sum %d max %d count %d npes %d; expected %d %d %d", what, s->sum, s->max, s->count,
             s->npes, sum, max, n);
  for (i = 0; i < n; i++) {
    int found = 0;
    for (j = 0; j < n; j++) found += s->pes[j] == pes[i];
    if (found != 1) CmiAbort("%s: PE %d is in the result %d times", what, pes[i], found);
  }
  CmiPrintf("%s: sum %d max %d count %d on PE %d\n", what, s->sum, s->max, s->count, CmiMyPe());
  free(s->pes);
  free(s);
  {
    IntMsg *m = (IntMsg *)CmiAlloc(sizeof(IntMsg));
    CmiSetHandler(m, CpvAccess(h_done));
    m->value = kind;
    CmiSyncSendAndFree(0, sizeof(IntMsg), m);
  }
}

static void all_pes(int *pes) {
  int pe;
  for (pe = 0; pe < CmiNumPes(); pe++) pes[pe] = pe;
}

static void dest_order(void *data) {
  int pes[64];
  all_pes(pes);
  check("order", ORDER, (Stat *)data, 0, CmiNumPes(), pes);
}

static void dest_id(void *data) {
  int pes[64];
  all_pes(pes);
  check("id", ID, (Stat *)data, 0, CmiNumPes(), pes);
}

static void dest_list(void *data) {
  int pes[64], n = list_of(pes);
  if (data != CpvAccess(list_data)) CmiAbort("list: dest got %p, not the root's own %p", data, (void *)CpvAccess(list_data));
  CpvAccess(list_data) = NULL; /* dest owns it now */
  check("list", LIST, (Stat *)data, pes[0], n, pes);
}

static void send_int(int pe, int handler, int value) {
  IntMsg *m = (IntMsg *)CmiAlloc(sizeof(IntMsg));
  CmiSetHandler(m, handler);
  m->value = value;
  CmiSyncSendAndFree(pe, sizeof(IntMsg), m);
}

static void done(void *msg) {
  CmiFree(msg);
  if (++CpvAccess(finished) == 3) {
    int pe;
    for (pe = 0; pe < CmiNumPes(); pe++) send_int(pe, CpvAccess(h_report_request), 0);
  }
}

static void report_request(void *msg) {
  int me = CmiMyPe(), pos, want = me == 0 ? 0 : 2;
  CmiFree(msg);
  if (CpvAccess(deletes) != want) CmiAbort("PE %d: deleteFn ran %d times, expected %d", me, CpvAccess(deletes), want);
  /* deleteFn was NULL for the list: each member but the root frees its own. */
  if (in_list(me, &pos) && pos != 0) {
    Stat *s = CpvAccess(list_data);
    if (s == NULL) CmiAbort("PE %d: its list data is gone", me);
    free(s->pes);
    free(s);
    CpvAccess(list_data) = NULL;
  }
  send_int(0, CpvAccess(h_report), CpvAccess(deletes));
}

static void report(void *msg) {
  IntMsg *m = (IntMsg *)msg;
  CpvAccess(total_deletes) += m->value;
  CmiFree(msg);
  if (++CpvAccess(reports) == CmiNumPes()) {
    CmiPrintf("deletes: %d in all, once per reduction on every PE but the root\n", CpvAccess(total_deletes));
    ConverseExit();
  }
}

static void reduce_order(int leaf, int root) {
  int before = CpvAccess(deletes);
  CmiReduceStruct(new_stat(ORDER), pup_stat, merge_stat, dest_order, delete_stat);
  if (leaf && !root && CpvAccess(deletes) != before + 1) CmiAbort("order: a leaf's deleteFn has not run");
  if (root && CpvAccess(deletes) != before) CmiAbort("order: the root's deleteFn ran");
}

static void reduce_id(int leaf, int root) {
  int before = CpvAccess(deletes);
  CmiReduceStructID(new_stat(ID), pup_stat, merge_stat, dest_id, delete_stat, CpvAccess(id_all));
  if (leaf && !root && CpvAccess(deletes) != before + 1) CmiAbort("id: a leaf's deleteFn has not run");
  if (root && CpvAccess(deletes) != before) CmiAbort("id: the root's deleteFn ran");
}

static void start(int argc, char **argv) {
  int me = CmiMyPe(), leaf, root, pes[64], n, pos;
  (void)argc;
  (void)argv;
  CpvInitialize(int, deletes);
  CpvInitialize(int, h_done);
  CpvInitialize(int, h_report_request);
  CpvInitialize(int, h_report);
  CpvInitialize(int, finished);
  CpvInitialize(int, reports);
  CpvInitialize(int, total_deletes);
  CpvInitialize(CmiReductionID, id_all);
  CpvInitialize(CmiReductionID, id_list);
  CpvInitialize(Stat *, list_data);
  CpvAccess(h_done) = CmiRegisterHandler(done);
  CpvAccess(h_report_request) = CmiRegisterHandler(report_request);
  CpvAccess(h_report) = CmiRegisterHandler(report);
  CpvAccess(id_all) = CmiGetGlobalReduction();
  CpvAccess(id_list) = CmiGetGlobalReduction();

  leaf = CmiNumSpanTreeChildren(me) == 0;
  root = me == 0;
  if (me % 2 == 0) {
    reduce_order(leaf, root);
    reduce_id(leaf, root);
  } else {
    reduce_id(leaf, root);
    reduce_order(leaf, root);
  }
  if (in_list(me, &pos)) {
    n = list_of(pes);
    CpvAccess(list_data) = new_stat(LIST);
    CmiListReduceStruct(n, pes, CpvAccess(list_data), pup_stat, merge_stat, dest_list, NULL,
                        CpvAccess(id_list));
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
