/* One-sided communication between neighbours on a ring of PEs: every PE
 * registers a region of its memory and sends its address to the PE before
 * it, which then, on that region:
 *   - puts BIG bytes (CmiPut) and polls CmiWaitTest to completion, then
 *     tells the owner, which checks the bytes landed;
 *   - gets BIG bytes back (CmiGet, polled) and checks them;
 *   - gets GETCB_LEN bytes at an odd offset with CmiGetCb and checks them
 *     in the callback;
 *   - puts SMALL_LEN bytes at an odd offset with CmiPutCb, then tells the
 *     owner, which checks them.
 * BIG is at least the runtime's single-copy threshold (4 KiB), so between
 * processes over shm both ways of moving bytes are used. When every PE is
 * done, PE 0 prints a summary and every PE unregisters its region. */
#include <converse.h>

#define BIG 8192
#define GETCB_OFF 3
#define GETCB_LEN 3000
#define SMALL_OFF (2 * BIG + 1)
#define SMALL_LEN 99
#define REGION (2 * BIG + 128)

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int from;
  char *addr; /* an address in the sender's process, as a plain value */
} AddrMsg;

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int from;
  int what; /* 1: the big put is in; 2: the small put is in */
} NoteMsg;

typedef struct {
  int region_ok;        /* my region's incoming bytes checked (count) */
  int own_done;         /* my operations checked (count) */
  int reported;
  int done_count;       /* PE 0: PEs done */
  unsigned char *region;
  unsigned char *got;   /* CmiGet's destination */
  unsigned char *got_cb; /* CmiGetCb's destination */
  unsigned char small[SMALL_LEN]; /* CmiPutCb's source */
  int param_get, param_put;
} State;

CpvStaticDeclare(State, st);
CpvStaticDeclare(int, addr_h);
CpvStaticDeclare(int, note_h);
CpvStaticDeclare(int, done_h);
CpvStaticDeclare(int, exit_h);

static unsigned char pattern(int pe, int i, int salt) {
  return (unsigned char)(pe * 31 + i * 7 + salt * 13);
}

static int next_pe(void) { return (CmiMyPe() + 1) % CmiNumPes(); }
static int prev_pe(void) { return (CmiMyPe() + CmiNumPes() - 1) % CmiNumPes(); }

static void maybe_report(void) {
  State *s = &CpvAccess(st);
  if (s->reported || s->own_done < 4 || s->region_ok < 2) return;
  s->reported = 1;
  {
    void *m = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(m, CpvAccess(done_h));
    CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, m);
  }
}

static void note(int to, int what) {
  NoteMsg m;
  m.from = CmiMyPe();
  m.what = what;
  CmiSetHandler(&m, CpvAccess(note_h));
  CmiSyncSend(to, sizeof m, &m);
}

/* The owner checks bytes its predecessor put into its region. */
static void on_note(void *msg) {
  NoteMsg *m = (NoteMsg *)msg;
  State *s = &CpvAccess(st);
  int i;
  if (m->from != prev_pe()) CmiAbort("note from PE %d, not %d", m->from, prev_pe());
  if (m->what == 1) {
    for (i = 0; i < BIG; i++) {
      if (s->region[BIG + i] != pattern(m->from, i, 1))
        CmiAbort("PE %d: byte %d of the put from PE %d is %d", CmiMyPe(), i, m->from,
                 s->region[BIG + i]);
    }
  } else {
    if (s->region[SMALL_OFF - 1] != 0 || s->region[SMALL_OFF + SMALL_LEN] != 0)
      CmiAbort("PE %d: the small put wrote outside its bytes", CmiMyPe());
    for (i = 0; i < SMALL_LEN; i++) {
      if (s->region[SMALL_OFF + i] != pattern(m->from, i, 2))
        CmiAbort("PE %d: byte %d of the small put is wrong", CmiMyPe(), i);
    }
  }
  s->region_ok++;
  CmiFree(msg);
  maybe_report();
}

static void get_done(void *param) {
  State *s = &CpvAccess(st);
  int i, target = next_pe();
  if (param != &s->param_get) CmiAbort("CmiGetCb callback: wrong param");
  for (i = 0; i < GETCB_LEN; i++) {
    if (s->got_cb[i] != pattern(target, GETCB_OFF + i, 0))
      CmiAbort("PE %d: byte %d of CmiGetCb from PE %d is wrong", CmiMyPe(), i, target);
  }
  s->own_done++;
  maybe_report();
}

static void put_done(void *param) {
  State *s = &CpvAccess(st);
  if (param != &s->param_put) CmiAbort("CmiPutCb callback: wrong param");
  note(next_pe(), 2);
  s->own_done++;
  maybe_report();
}

static void poll(void *h) {
  while (!CmiWaitTest(h)) CsdSchedulePoll();
  if (!CmiWaitTest(h)) CmiAbort("CmiWaitTest: 0 after 1");
}

/* The successor's region address: operate on it. */
static void on_addr(void *msg) {
  AddrMsg *m = (AddrMsg *)msg;
  State *s = &CpvAccess(st);
  unsigned int me = (unsigned int)CmiMyPe(), target = (unsigned int)next_pe();
  char *remote = m->addr;
  unsigned char *src = (unsigned char *)malloc(BIG);
  void *h;
  int i;
  if (m->from != (int)target) CmiAbort("address from PE %d, not %u", m->from, target);
  CmiFree(msg);

  /* Put, polled; the source may change once CmiPut returns. */
  for (i = 0; i < BIG; i++) src[i] = pattern((int)me, i, 1);
  h = CmiPut(me, target, src, remote + BIG, BIG);
  memset(src, 0xee, BIG);
  poll(h);
  free(src);
  note((int)target, 1);
  s->own_done++;

  /* Get, polled. */
  h = CmiGet(me, target, s->got, remote, BIG);
  poll(h);
  for (i = 0; i < BIG; i++) {
    if (s->got[i] != pattern((int)target, i, 0))
      CmiAbort("PE %u: byte %d of the get from PE %u is %d", me, i, target, s->got[i]);
  }
  s->own_done++;

  /* The callback forms: the callbacks run from the scheduler. */
  CmiGetCb(me, target, s->got_cb, remote + GETCB_OFF, GETCB_LEN, get_done, &s->param_get);
  for (i = 0; i < SMALL_LEN; i++) s->small[i] = pattern((int)me, i, 2);
  CmiPutCb(me, target, s->small, remote + SMALL_OFF, SMALL_LEN, put_done, &s->param_put);
  maybe_report();
}

static void on_done(void *msg) {
  State *s = &CpvAccess(st);
  CmiFree(msg);
  if (++s->done_count == CmiNumPes()) {
    void *m = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiPrintf("onesided: %d PEs, put and get of %d bytes checked, callbacks ran\n", CmiNumPes(),
              BIG);
    CmiSetHandler(m, CpvAccess(exit_h));
    CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, m);
  }
}

static void on_exit_msg(void *msg) {
  State *s = &CpvAccess(st);
  CmiFree(msg);
  if (CmiUnRegisterMemory(s->region, REGION) != 1) CmiAbort("CmiUnRegisterMemory failed");
  if (CmiUnRegisterMemory(s->region, REGION) != 0) CmiAbort("unregistered twice");
  free(s->region);
  free(s->got);
  free(s->got_cb);
  if (CmiMyPe() == 0) CmiPrintf("onesided: regions unregistered\n");
  CsdExitScheduler();
}

static void start(int argc, char **argv) {
  State *s;
  AddrMsg m;
  int i;
  (void)argc;
  (void)argv;
  CpvInitialize(State, st);
  CpvInitialize(int, addr_h);
  CpvInitialize(int, note_h);
  CpvInitialize(int, done_h);
  CpvInitialize(int, exit_h);
  CpvAccess(addr_h) = CmiRegisterHandler(on_addr);
  CpvAccess(note_h) = CmiRegisterHandler(on_note);
  CpvAccess(done_h) = CmiRegisterHandler(on_done);
  CpvAccess(exit_h) = CmiRegisterHandler(on_exit_msg);
  if (CmiNumPes() < 2) CmiAbort("onesided needs 2 PEs or more");
  s = &CpvAccess(st);
  s->region = (unsigned char *)calloc(REGION, 1);
  s->got = (unsigned char *)malloc(BIG);
  s->got_cb = (unsigned char *)malloc(GETCB_LEN);
  for (i = 0; i < BIG; i++) s->region[i] = pattern(CmiMyPe(), i, 0);
  if (CmiRegisterMemory(s->region, REGION) != 1) CmiAbort("CmiRegisterMemory failed");
  if (CmiRegisterMemory(s->region + 10, 5) != 0) CmiAbort("an overlapping range registered");
  if (CmiUnRegisterMemory(s->region, 5) != 0) CmiAbort("unregistered with the wrong size");
  m.from = CmiMyPe();
  m.addr = (char *)s->region;
  CmiSetHandler(&m, CpvAccess(addr_h));
  CmiSyncSend(prev_pe(), sizeof m, &m);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
