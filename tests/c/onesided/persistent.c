/* Persistent channels on a ring of PEs. Every PE makes a channel to the PE
 * after it (CmiCreatePersistent), and a receiver's channel to itself
 * (CmiCreateReceiverPersistent) whose request it sends to the PE before it,
 * which registers it (CmiRegisterReceivePersistent). Each PE then streams
 * COUNT messages to the PE after it on the first channel and COUNT on the
 * second, of sizes on both sides of MAXB (longer ones go the ordinary
 * way), by CmiSyncSendAndFree and CmiSyncSend; the receiver checks every
 * byte. Then the first handle goes with CmiDestroyPersistent, the second
 * with CmiDestroyAllPersistent, and PE 0 prints a summary. */
#include <converse.h>

#define MAXB 2048
#define COUNT 100

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int from;
  PersistentReq req;
} ReqMsg;

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int from;
  int phase;
  int seq;
  int len;
  unsigned char data[1]; /* len bytes */
} DataMsg;

typedef struct {
  PersistentHandle created; /* to the next PE, made here */
  PersistentHandle registered; /* to the next PE, from its request */
  int received[2];
  int long_ones;
  int done_count;
} State;

CpvStaticDeclare(State, st);
CpvStaticDeclare(int, req_h);
CpvStaticDeclare(int, data_h);
CpvStaticDeclare(int, done_h);
CpvStaticDeclare(int, exit_h);

static int next_pe(void) { return (CmiMyPe() + 1) % CmiNumPes(); }
static int prev_pe(void) { return (CmiMyPe() + CmiNumPes() - 1) % CmiNumPes(); }

static int data_len(int seq) { return (seq * 37) % 3000; }
static unsigned char byte(int from, int phase, int seq, int i) {
  return (unsigned char)(from * 3 + phase * 7 + seq + i);
}
static int msg_size(int len) { return (int)(sizeof(DataMsg) - 1) + len; }

static void stream(int phase) {
  int seq, i;
  for (seq = 0; seq < COUNT; seq++) {
    int len = data_len(seq), size = msg_size(len);
    DataMsg *m = (DataMsg *)(seq % 2 ? malloc(size) : CmiAlloc(size));
    m->from = CmiMyPe();
    m->phase = phase;
    m->seq = seq;
    m->len = len;
    for (i = 0; i < len; i++) m->data[i] = byte(m->from, phase, seq, i);
    CmiSetHandler(m, CpvAccess(data_h));
    if (seq % 2) {
      CmiSyncSend(next_pe(), size, m);
      free(m);
    } else {
      CmiSyncSendAndFree(next_pe(), size, m);
    }
  }
}

static void report(void) {
  void *m = CmiAlloc(CmiMsgHeaderSizeBytes);
  CmiSetHandler(m, CpvAccess(done_h));
  CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, m);
}

/* The next PE's request: register it, stream on both channels, destroy. */
static void on_req(void *msg) {
  ReqMsg *m = (ReqMsg *)msg;
  State *s = &CpvAccess(st);
  PersistentHandle h;
  if (m->from != next_pe() || m->req.pe != next_pe() || m->req.maxBytes < MAXB)
    CmiAbort("request from PE %d: pe %d maxBytes %d", m->from, m->req.pe, m->req.maxBytes);
  s->registered = CmiRegisterReceivePersistent(m->req);
  if (s->registered == NULL) CmiAbort("CmiRegisterReceivePersistent gave NULL");
  CmiFree(msg);

  h = s->created;
  CmiUsePersistentHandle(&h, 1);
  stream(0);
  h = s->registered;
  CmiUsePersistentHandle(&h, 1);
  stream(1);
  CmiUsePersistentHandle(NULL, 0);

  CmiDestroyPersistent(s->created);
  CmiDestroyPersistent(s->created); /* again: nothing more */
  CmiDestroyPersistent(NULL);
  CmiDestroyAllPersistent();
  CmiDestroyPersistent(s->registered); /* destroyed already */
}

static void on_data(void *msg) {
  DataMsg *m = (DataMsg *)msg;
  State *s = &CpvAccess(st);
  int i;
  if (m->from != prev_pe() || m->phase < 0 || m->phase > 1 || m->seq < 0 || m->seq >= COUNT ||
      m->len != data_len(m->seq) || CmiSize(m) < msg_size(m->len))
    CmiAbort("PE %d: a bad message: from %d phase %d seq %d len %d size %d", CmiMyPe(), m->from,
             m->phase, m->seq, m->len, CmiSize(m));
  for (i = 0; i < m->len; i++) {
    if (m->data[i] != byte(m->from, m->phase, m->seq, i))
      CmiAbort("PE %d: byte %d of message %d of phase %d is wrong", CmiMyPe(), i, m->seq,
               m->phase);
  }
  if (msg_size(m->len) > MAXB) s->long_ones++;
  s->received[m->phase]++;
  m->seq = -1; /* the handler's own copy: writable */
  CmiFree(msg);
  if (s->received[0] + s->received[1] == 2 * COUNT) {
    if (s->received[0] != COUNT || s->long_ones == 0)
      CmiAbort("PE %d: %d and %d messages, %d long", CmiMyPe(), s->received[0], s->received[1],
               s->long_ones);
    report();
  }
}

static void on_done(void *msg) {
  State *s = &CpvAccess(st);
  CmiFree(msg);
  if (++s->done_count == CmiNumPes()) {
    void *m = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiPrintf("persistent: %d PEs, %d messages each on 2 channels checked\n", CmiNumPes(),
              COUNT);
    CmiSetHandler(m, CpvAccess(exit_h));
    CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, m);
  }
}

static void on_exit_msg(void *msg) {
  CmiFree(msg);
  CsdExitScheduler();
}

static void start(int argc, char **argv) {
  State *s;
  ReqMsg m;
  (void)argc;
  (void)argv;
  CpvInitialize(State, st);
  CpvInitialize(int, req_h);
  CpvInitialize(int, data_h);
  CpvInitialize(int, done_h);
  CpvInitialize(int, exit_h);
  CpvAccess(req_h) = CmiRegisterHandler(on_req);
  CpvAccess(data_h) = CmiRegisterHandler(on_data);
  CpvAccess(done_h) = CmiRegisterHandler(on_done);
  CpvAccess(exit_h) = CmiRegisterHandler(on_exit_msg);
  if (CmiNumPes() < 2) CmiAbort("persistent needs 2 PEs or more");
  s = &CpvAccess(st);
  s->created = CmiCreatePersistent(next_pe(), MAXB);
  if (s->created == NULL) CmiAbort("CmiCreatePersistent gave NULL");
  m.from = CmiMyPe();
  m.req = CmiCreateReceiverPersistent(MAXB);
  if (m.req.pe != CmiMyPe() || m.req.maxBytes != MAXB)
    CmiAbort("CmiCreateReceiverPersistent: pe %d maxBytes %d", m.req.pe, m.req.maxBytes);
  CmiSetHandler(&m, CpvAccess(req_h));
  CmiSyncSend(prev_pe(), sizeof m, &m);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
