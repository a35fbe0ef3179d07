/* Cqs as a plain data structure (queueing.h included before converse.h):
 * priority order, FIFO among equals, LIFO in front, length and maximum
 * length, emptiness, the front priority, enumeration, removal, deletion.
 * Every check prints a line; a wrong result ends the job with CmiAbort. */
#include <queueing.h>
#include <converse.h>

static char items[16];
#define ITEM(c) ((void *)&items[(c) - 'a'])

#define CHECK(cond)                                                                       \
  do {                                                                                    \
    if (!(cond)) CmiAbort("cqs: check `%s` failed at line %d", #cond, __LINE__);           \
  } while (0)

/* The labels of what CqsDequeue returns until the queue is empty ('-' for
 * a removed, NULL, item). */
static void drain(Queue q, char *out) {
  void *item;
  int n = 0;
  while (!CqsEmpty(q)) {
    CqsDequeue(q, &item);
    out[n++] = item == NULL ? '-' : (char)('a' + ((char *)item - items));
  }
  out[n] = '\0';
}

static void enqueue_int(Queue q, char c, int strategy, int prio) {
  CqsEnqueueGeneral(q, ITEM(c), strategy, 32, (unsigned int *)&prio);
}

static void start(int argc, char **argv) {
  Queue q, r;
  void *item;
  void **all;
  char order[32];
  unsigned int i, n;
  unsigned int bits_01 = 0x40000000u;
  unsigned int three_words[3] = {0x80000000u, 0u, 1u}; /* just after the middle */
  long long lp = 7;
  _prio p;
  (void)argc;
  (void)argv;
  if (CmiMyPe() != 0) return;

  q = CqsCreate();
  item = ITEM('a');
  CqsDequeue(q, &item);
  CmiPrintf("new queue: empty %d length %u max %u dequeue %s\n", CqsEmpty(q), CqsLength(q),
            CqsMaxLength(q), item == NULL ? "NULL" : "an item");

  /* a..l with mixed strategies; the expected order is below. */
  CqsEnqueue(q, ITEM('a'));                                   /* middle FIFO */
  CqsEnqueueFifo(q, ITEM('b'));                               /* middle FIFO */
  CqsEnqueueLifo(q, ITEM('c'));                               /* middle LIFO */
  enqueue_int(q, 'd', CQS_QUEUEING_IFIFO, -1);                /* before the middle */
  enqueue_int(q, 'e', CQS_QUEUEING_IFIFO, 100);               /* after it */
  enqueue_int(q, 'f', CQS_QUEUEING_IFIFO, -1);                /* behind d */
  enqueue_int(q, 'g', CQS_QUEUEING_ILIFO, -1);                /* in front of d */
  CqsEnqueueGeneral(q, ITEM('h'), CQS_QUEUEING_BFIFO, 2, &bits_01); /* .01: first */
  CqsEnqueueGeneral(q, ITEM('i'), CQS_QUEUEING_BLIFO, 96, three_words);
  CqsEnqueueGeneral(q, ITEM('j'), CQS_QUEUEING_LFIFO, 64, (unsigned int *)&lp);
  enqueue_int(q, 'k', CQS_QUEUEING_IFIFO, 0);                 /* the middle: behind b */
  CqsEnqueueGeneral(q, ITEM('l'), CQS_QUEUEING_LIFO, 0, NULL); /* middle LIFO: before c */
  CmiPrintf("queued: empty %d length %u max %u\n", CqsEmpty(q), CqsLength(q), CqsMaxLength(q));

  p = CqsGetPriority(q);
  CmiPrintf("front priority: bits %u ints %u word 0x%08x\n", p->bits, p->ints, p->data[0]);

  CqsEnumerateQueue(q, &all);
  n = CqsLength(q);
  for (i = 0; i < n; i++) order[i] = (char)('a' + ((char *)all[i] - items));
  order[n] = '\0';
  CmiFree(all);
  CmiPrintf("enumerated: %s (length still %u)\n", order, CqsLength(q));

  /* Two items out, then the rest. */
  CqsDequeue(q, &item);
  CHECK(item == ITEM('h'));
  CqsDequeue(q, &item);
  CHECK(item == ITEM('g'));
  p = CqsGetPriority(q);
  CmiPrintf("front priority after two: bits %u ints %u word 0x%08x\n", p->bits, p->ints,
            p->data[0]);
  CqsRemoveSpecific(q, ITEM('a'));
  CmiPrintf("after removing a: length %u\n", CqsLength(q));
  drain(q, order);
  CmiPrintf("dequeued: hg%s; then empty %d length %u max %u\n", order, CqsEmpty(q),
            CqsLength(q), CqsMaxLength(q));

  /* The middle priority, and comparisons between queues' fronts. */
  CqsEnqueueFifo(q, ITEM('a'));
  p = CqsGetPriority(q);
  CmiPrintf("middle priority: bits %u ints %u word 0x%08x\n", p->bits, p->ints, p->data[0]);
  r = CqsCreate();
  enqueue_int(r, 'b', CQS_QUEUEING_IFIFO, 1);
  CmiPrintf("PrioGT(q front, r front) %d, PrioGT(r front, q front) %d\n",
            CqsPrioGT(CqsGetPriority(q), CqsGetPriority(r)),
            CqsPrioGT(CqsGetPriority(r), CqsGetPriority(q)));
  {
    /* Numbers, not strings: .1 in one word equals .1 in two words. */
    struct {
      unsigned short bits, ints;
      unsigned int data[2];
    } one = {1, 1, {0x80000000u, 0}}, two = {64, 2, {0x80000000u, 0}};
    CmiPrintf("PrioGT(.1, .10...0) %d %d\n", CqsPrioGT((_prio)(void *)&one, (_prio)(void *)&two),
              CqsPrioGT((_prio)(void *)&two, (_prio)(void *)&one));
  }
  CqsDelete(r);
  CqsDelete(q);
  CmiPrintf("cqs: done\n");
  ConverseExit();
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
