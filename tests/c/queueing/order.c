/* The PE's scheduler queue runs messages in the order Converse promises:
 * smaller priorities first; among equal ones, LIFO items newest first, then
 * FIFO items oldest first; integer 0, long 0 and plain FIFO/LIFO are one
 * priority (the middle one, ".1"). Each PE enqueues the same messages from
 * its start function, before its scheduler runs any, then prints the
 * order its handlers ran in; CsdEmpty and CsdLength are checked on the way.
 * PE 0 ends the job once every PE has reported. */
#include <converse.h>

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  char label;
} LabelMsg;

CpvStaticDeclare(int, label_handler);
CpvStaticDeclare(int, report_handler);
CpvStaticDeclare(int, reports);
CpvStaticDeclare(int, ran);
CpvStaticDeclare(char *, order); /* the labels in the order they ran */

#define MAX_LABELS 32

static void report(void *msg) {
  CmiFree(msg);
  if (++CpvAccess(reports) == CmiNumPes()) {
    CmiPrintf("order: all %d PEs ran their queue in order\n", CmiNumPes());
    ConverseExit();
  }
}

static void label(void *msg) {
  LabelMsg *m = (LabelMsg *)msg;
  char *order = CpvAccess(order);
  order[CpvAccess(ran)++] = m->label;
  if (m->label == 'z') { /* the least urgent: the last to run */
    void *done;
    order[CpvAccess(ran)] = '\0';
    CmiPrintf("PE %d ran %s; then CsdEmpty %d CsdLength %d\n", CmiMyPe(), order, CsdEmpty(),
              CsdLength());
    free(order); /* a C Cpv is not destroyed with its PE: free what it holds */
    CpvAccess(order) = NULL;
    done = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(done, CpvAccess(report_handler));
    CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, done);
  }
  CmiFree(msg);
}

static LabelMsg *make(char c) {
  LabelMsg *m = (LabelMsg *)CmiAlloc(sizeof(LabelMsg));
  CmiSetHandler(m, CpvAccess(label_handler));
  m->label = c;
  return m;
}

static void enqueue_int(char c, int strategy, int prio) {
  CsdEnqueueGeneral(make(c), strategy, 8 * (int)sizeof(int), (unsigned int *)&prio);
}

static void start(int argc, char **argv) {
  unsigned int quarter = 0x40000000u;       /* ".01": 0.25 */
  unsigned int three_quarters = 0xC0000000u; /* ".11": 0.75 */
  long long minus_one = -1;
  (void)argc;
  (void)argv;
  CpvInitialize(int, label_handler);
  CpvInitialize(int, report_handler);
  CpvInitialize(int, reports);
  CpvInitialize(int, ran);
  CpvInitialize(char *, order);
  CpvAccess(label_handler) = CmiRegisterHandler(label);
  CpvAccess(report_handler) = CmiRegisterHandler(report);
  CpvAccess(order) = (char *)malloc(MAX_LABELS + 1);

  CmiPrintf("PE %d before: CsdEmpty %d CsdLength %d\n", CmiMyPe(), CsdEmpty(), CsdLength());
  CsdEnqueue(make('a'));                             /* middle, FIFO */
  CsdEnqueueLifo(make('b'));                         /* middle, LIFO */
  enqueue_int('c', CQS_QUEUEING_IFIFO, 5);           /* just after the middle */
  enqueue_int('d', CQS_QUEUEING_IFIFO, -3);          /* just before it */
  enqueue_int('e', CQS_QUEUEING_ILIFO, -3);          /* in front of d */
  enqueue_int('f', CQS_QUEUEING_IFIFO, -3);          /* behind d */
  CsdEnqueueGeneral(make('g'), CQS_QUEUEING_BFIFO, 2, &quarter);
  CsdEnqueueGeneral(make('h'), CQS_QUEUEING_BLIFO, 2, &three_quarters);
  CsdEnqueueGeneral(make('i'), CQS_QUEUEING_LFIFO, 64, (unsigned int *)&minus_one);
  CsdEnqueueFifo(make('j'));                         /* middle, FIFO, behind a */
  enqueue_int('k', CQS_QUEUEING_ILIFO, 0);           /* the middle too: in front of b */
  CsdEnqueueGeneral(make('m'), CQS_QUEUEING_BFIFO, 0, NULL); /* priority 0: first */
  enqueue_int('z', CQS_QUEUEING_IFIFO, 2147483647);  /* .FFFFFFFF: last */
  CmiPrintf("PE %d queued: CsdEmpty %d CsdLength %d\n", CmiMyPe(), CsdEmpty(), CsdLength());
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
