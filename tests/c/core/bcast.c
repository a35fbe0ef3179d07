/* PE 0 broadcasts a value; every PE's handler writes into the copy it got
 * (its own: broadcast copies are exclusive) and sends it back to PE 0,
 * which checks the sum. Also CsdEnqueue, CmiReference and CmiSize. */
#include <converse.h>

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int value;
  int from;
} ValueMsg;

CpvStaticDeclare(int, value_handler);
CpvStaticDeclare(int, reply_handler);
CpvStaticDeclare(int, enqueued_handler);
CpvStaticDeclare(int, ignore_handler);
CpvStaticDeclare(int, replies);
CpvStaticDeclare(long, sum);

static void enqueued(void *msg) {
  ValueMsg *m = (ValueMsg *)msg;
  if (m->value != 7) CmiAbort("enqueued message holds %d", m->value);
  CmiPrintf("PE %d: enqueued message ran\n", CmiMyPe());
  CmiFree(msg);
  CsdExitScheduler();
}

static void ignore(void *msg) { CmiFree(msg); }

static void reply(void *msg) {
  ValueMsg *m = (ValueMsg *)msg;
  CpvAccess(sum) += m->value;
  CpvAccess(replies)++;
  CmiFree(msg);
  if (CpvAccess(replies) == CmiNumPes()) {
    long want = 0;
    int pe;
    for (pe = 0; pe < CmiNumPes(); pe++) want += 100 + pe;
    if (CpvAccess(sum) != want) CmiAbort("sum %ld, expected %ld", CpvAccess(sum), want);
    CmiPrintf("bcast: sum %ld from %d PEs\n", CpvAccess(sum), CmiNumPes());
    ConverseExit(0);
  }
}

static void value(void *msg) {
  ValueMsg *m = (ValueMsg *)msg;
  if (m->value != 100) CmiAbort("PE %d got %d", CmiMyPe(), m->value);
  /* Write into the copy and forward it: no other PE sees this write. */
  m->value += CmiMyPe();
  m->from = CmiMyPe();
  CmiSetHandler(m, CpvAccess(reply_handler));
  CmiSyncSendAndFree(0, sizeof(ValueMsg), m);
}

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CpvInitialize(int, value_handler);
  CpvInitialize(int, reply_handler);
  CpvInitialize(int, enqueued_handler);
  CpvInitialize(int, ignore_handler);
  CpvInitialize(int, replies);
  CpvInitialize(long, sum);
  CpvAccess(value_handler) = CmiRegisterHandler(value);
  CpvAccess(reply_handler) = CmiRegisterHandler(reply);
  CpvAccess(enqueued_handler) = CmiRegisterHandler(enqueued);
  CpvAccess(ignore_handler) = CmiRegisterHandler(ignore);
  if (CmiMyPe() == 0) {
    ValueMsg v;
    ValueMsg *q = (ValueMsg *)CmiAlloc(sizeof(ValueMsg));
    void *tiny = CmiAlloc(4);
    /* CmiAlloc of less than a header is plain memory. */
    if (CmiSize(tiny) != 4) CmiAbort("CmiSize of CmiAlloc(4) is %d", CmiSize(tiny));
    memset(tiny, 0xab, 4);
    CmiFree(tiny);
    {
      /* CmiSize is kept beside the buffer: plain data over the header
       * leaves it alone. */
      int *plain = (int *)CmiAlloc(24), i;
      CmiCommHandle h;
      for (i = 0; i < 6; i++) plain[i] = i;
      if (CmiSize(plain) != 24) CmiAbort("CmiSize of CmiAlloc(24) is %d", CmiSize(plain));
      CmiFree(plain);
      /* An async send copies at once: its handle says sent. */
      CmiSetHandler(&v, CpvAccess(ignore_handler));
      h = CmiAsyncSend(CmiMyPe(), sizeof v, &v);
      if (!CmiAsyncMsgSent(h)) CmiAbort("async send not sent");
      CmiReleaseCommHandle(h);
    }
    /* A referenced buffer takes two frees. */
    CmiReference(q);
    CmiFree(q);
    if (CmiSize(q) != (int)sizeof(ValueMsg)) CmiAbort("CmiSize %d", CmiSize(q));
    q->value = 7;
    CmiSetHandler(q, CpvAccess(enqueued_handler));
    CsdEnqueue(q);
    /* The enqueued message's handler stops this scheduler loop. */
    CsdScheduler(-1);
    v.value = 100;
    CmiSetHandler(&v, CpvAccess(value_handler));
    CmiSyncBroadcastAll(sizeof v, &v);
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
