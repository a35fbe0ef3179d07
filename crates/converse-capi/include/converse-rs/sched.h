/*
 * converse-rs/sched.h: the scheduler's general enqueue and the node queue
 * (part of converse.h, which includes it; queueing.h includes it too, for
 * the strategies).
 *
 *   strategies          CQS_QUEUEING_FIFO, _LIFO, _IFIFO, _ILIFO, _BFIFO,
 *                       _BLIFO, _LFIFO, _LLIFO (Charm++'s numbers)
 *   the PE's queue      CsdEnqueueGeneral, CsdEmpty, CsdLength
 *                       (CsdEnqueue, CsdEnqueueFifo, CsdEnqueueLifo are in
 *                       converse.h)
 *   the node's queue    CsdNodeEnqueueGeneral, CsdNodeEnqueue,
 *                       CsdNodeEnqueueFifo, CsdNodeEnqueueLifo,
 *                       CsdNodeEmpty, CsdNodeLength
 *
 * A priority is a binary fraction in [0, 1); smaller runs first. For
 * CQS_QUEUEING_IFIFO/ILIFO, prioptr points at one int p, the fraction
 * (p + 2^31) / 2^32; for LFIFO/LLIFO at one 64-bit integer, likewise; for
 * BFIFO/BLIFO at ceil(priobits / 32) words, most significant bit first.
 * FIFO and LIFO (prioptr unread) have the middle priority ".1", the same
 * as integer 0. A FIFO item goes behind every item of its priority, a LIFO
 * one in front of all of them. The priority is copied: it may be reused
 * as soon as the call returns. An unknown strategy, a negative priobits or
 * a null prioptr where one is read ends the job naming the call.
 *
 * The buffer enqueued is taken, as an AndFree send takes it: it comes from
 * CmiAlloc or a handler, and the handler that runs it owns it.
 */
#ifndef CONVERSE_RS_CONVERSE_RS_SCHED_H
#define CONVERSE_RS_CONVERSE_RS_SCHED_H

#ifndef CQS_QUEUEING_FIFO
#define CQS_QUEUEING_FIFO 2
#define CQS_QUEUEING_LIFO 3
#define CQS_QUEUEING_IFIFO 4
#define CQS_QUEUEING_ILIFO 5
#define CQS_QUEUEING_BFIFO 6
#define CQS_QUEUEING_BLIFO 7
#define CQS_QUEUEING_LFIFO 8
#define CQS_QUEUEING_LLIFO 9
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* The calling PE's queue: it runs after every message that arrived. */
void CsdEnqueueGeneral(void *msg, int strategy, int priobits, unsigned int *prioptr);

/* The calling PE's node queue: whichever PE of the node reaches it first
 * runs it. A PE takes from its own queue or the node's, whichever front is
 * more urgent (its own on ties). */
void CsdNodeEnqueueGeneral(void *msg, int strategy, int priobits, unsigned int *prioptr);
void CsdNodeEnqueue(void *msg);
void CsdNodeEnqueueFifo(void *msg);
void CsdNodeEnqueueLifo(void *msg);

/* Nonzero when the calling PE's queue (what CsdEnqueue* put there, and
 * awakened threads; not messages that arrived and wait to run) is empty. */
int CsdEmpty(void);
/* Nonzero when the calling PE's node queue is empty. */
int CsdNodeEmpty(void);
/* The number of entries in the calling PE's queue (the one CsdEmpty
 * looks at). */
int CsdLength(void);
/* The number of entries in the calling PE's node queue. */
int CsdNodeLength(void);

#ifdef __cplusplus
}
#endif

#endif /* CONVERSE_RS_CONVERSE_RS_SCHED_H */
