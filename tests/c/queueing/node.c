/* The node queue: rank 0 of every node puts five messages in its node's
 * queue (CsdNodeEnqueue, -Fifo, -Lifo, -General) and three in its own
 * queue. Each node message must run on a PE of the node that queued it;
 * each reports to PE 0, which ends the job once all have.
 *
 * With one PE per node, that PE takes from its own queue or the node's,
 * whichever front is more urgent (its own on ties): it prints the order it
 * ran the eight messages in, and checks CsdNodeEmpty before and after
 * (and CsdNodeLength after queueing). */
#include <converse.h>

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  char label;
  int node; /* the node that queued it (node messages) or -1 */
} LabelMsg;

#define NODE_MSGS 5
#define PE_MSGS 3

CpvStaticDeclare(int, label_handler);
CpvStaticDeclare(int, report_handler);
CpvStaticDeclare(int, reports);
CpvStaticDeclare(int, ran);
CpvStaticDeclare(char *, order);

static void report(void *msg) {
  CmiFree(msg);
  if (++CpvAccess(reports) == NODE_MSGS * CmiNumNodes()) {
    CmiPrintf("node: %d node messages ran on their own node; node 0's queue empty %d\n",
              CpvAccess(reports), CsdNodeEmpty());
    ConverseExit();
  }
}

static void label(void *msg) {
  LabelMsg *m = (LabelMsg *)msg;
  char *order = CpvAccess(order);
  order[CpvAccess(ran)++] = m->label;
  if (CmiMyNodeSize() == 1 && CpvAccess(ran) == NODE_MSGS + PE_MSGS) {
    order[CpvAccess(ran)] = '\0';
    CmiPrintf("PE %d alone on node %d ran %s; then CsdNodeEmpty %d CsdEmpty %d\n", CmiMyPe(),
              CmiMyNode(), order, CsdNodeEmpty(), CsdEmpty());
  }
  if (m->node >= 0) {
    void *done;
    if (m->node != CmiMyNode()) {
      CmiAbort("node message %c of node %d ran on PE %d of node %d", m->label, m->node,
               CmiMyPe(), CmiMyNode());
    }
    done = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(done, CpvAccess(report_handler));
    CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, done);
  }
  CmiFree(msg);
}

static LabelMsg *make(char c, int node) {
  LabelMsg *m = (LabelMsg *)CmiAlloc(sizeof(LabelMsg));
  CmiSetHandler(m, CpvAccess(label_handler));
  m->label = c;
  m->node = node;
  return m;
}

static void start(int argc, char **argv) {
  int me = CmiMyNode();
  int minus_ten = -10, minus_five = -5, three = 3;
  unsigned int three_quarters = 0xC0000000u;
  (void)argc;
  (void)argv;
  CpvInitialize(int, label_handler);
  CpvInitialize(int, report_handler);
  CpvInitialize(int, reports);
  CpvInitialize(int, ran);
  CpvInitialize(char *, order);
  CpvAccess(label_handler) = CmiRegisterHandler(label);
  CpvAccess(report_handler) = CmiRegisterHandler(report);
  CpvAccess(order) = (char *)malloc(NODE_MSGS + PE_MSGS + 1);
  if (CmiMyRank() != 0) return;

  if (CmiMyNodeSize() == 1) {
    CmiPrintf("PE %d before: CsdNodeEmpty %d\n", CmiMyPe(), CsdNodeEmpty());
  }
  CsdEnqueueGeneral(make('A', -1), CQS_QUEUEING_IFIFO, 32, (unsigned int *)&minus_ten);
  CsdEnqueueFifo(make('B', -1));
  CsdEnqueueGeneral(make('C', -1), CQS_QUEUEING_IFIFO, 32, (unsigned int *)&three);
  CsdNodeEnqueue(make('v', me));
  CsdNodeEnqueueFifo(make('w', me));
  CsdNodeEnqueueLifo(make('x', me));
  CsdNodeEnqueueGeneral(make('y', me), CQS_QUEUEING_IFIFO, 32, (unsigned int *)&minus_five);
  CsdNodeEnqueueGeneral(make('z', me), CQS_QUEUEING_BFIFO, 2, &three_quarters);
  if (CmiMyNodeSize() == 1) {
    CmiPrintf("PE %d queued: CsdNodeEmpty %d CsdLength %d CsdNodeLength %d\n", CmiMyPe(),
              CsdNodeEmpty(), CsdLength(), CsdNodeLength());
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
