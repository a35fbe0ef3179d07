/*
 * queueing.h: Cqs, the Converse queue, as a data structure for programs
 * (converse-rs; the scheduler's own queue is reached through the Csd calls
 * of converse.h, not through a Queue).
 *
 * A Queue holds void pointers it never reads nor frees, each with a
 * priority and a strategy: CqsEnqueueGeneral takes the CQS_QUEUEING_*
 * strategies and (priobits, prioPtr) exactly as CsdEnqueueGeneral does
 * (see converse-rs/sched.h). CqsDequeue returns the most urgent item;
 * among equal priorities, LIFO items newest first, then FIFO items oldest
 * first. Priorities compare as numbers: FIFO, IFIFO 0, LFIFO 0 and the
 * bit-vector ".1" are one priority, the middle one. Priorities are copied.
 *
 * A Queue is not locked: one thread at a time may use it. A null Queue
 * ends the job naming the call.
 *
 * Works with or without converse.h, included before or after it.
 */
#ifndef CONVERSE_RS_QUEUEING_H
#define CONVERSE_RS_QUEUEING_H

#include "converse-rs/sched.h" /* the CQS_QUEUEING_* strategies */

#ifdef __cplusplus
extern "C" {
#endif

#ifndef CINTBITS
#define CINTBITS ((unsigned int)(sizeof(int) * 8))
#endif
#ifndef CLONGBITS
#define CLONGBITS ((unsigned int)(sizeof(long long) * 8))
#endif

/* Opaque: made by CqsCreate, freed by CqsDelete. */
typedef struct Queue_struct *Queue;

/* A priority as CqsGetPriority returns it and CqsPrioGT reads it: `bits`
 * significant bits in `ints` words, most significant first. */
typedef struct prio_struct {
  unsigned short bits;
  unsigned short ints;
  unsigned int data[1];
} *_prio;

Queue CqsCreate(void);
/* Frees the queue, not the items left in it. */
void CqsDelete(Queue q);

/* Middle priority, FIFO (CqsEnqueue, CqsEnqueueFifo) or LIFO. */
void CqsEnqueue(Queue q, void *data);
void CqsEnqueueFifo(Queue q, void *data);
void CqsEnqueueLifo(Queue q, void *data);
void CqsEnqueueGeneral(Queue q, void *data, int strategy, int priobits, unsigned int *prioPtr);

/* The most urgent item into *resp, or NULL if the queue is empty. */
void CqsDequeue(Queue q, void **resp);

unsigned int CqsLength(Queue q);
int CqsEmpty(Queue q);
/* The most items the queue ever held at once. */
unsigned int CqsMaxLength(Queue q);

/* The priority of the item CqsDequeue would return, held by the queue
 * until the next call on it: the number in whole words (bits = 32 * ints,
 * trailing zero words dropped), so the middle priority is
 * {32, 1, {0x80000000}}; an empty queue gives {32, 1, {0xFFFFFFFF}}. */
_prio CqsGetPriority(Queue q);
/* 1 if p1 is the greater number (the less urgent), else 0. */
int CqsPrioGT(_prio p1, _prio p2);
int CqsPrioGT_(unsigned int ints1, unsigned int *data1, unsigned int ints2, unsigned int *data2);

/* A new array (free it with CmiFree) of the CqsLength(q) items in the
 * order CqsDequeue would return them; the queue is unchanged. */
void CqsEnumerateQueue(Queue q, void ***resp);

/* Replaces the first item equal to data (in dequeue order) by NULL, in
 * place: the length is unchanged. */
void CqsRemoveSpecific(Queue q, const void *data);

#ifdef __cplusplus
}
#endif

#include "converse-rs/absent.h" /* Charm++'s names that are not here */

#endif /* CONVERSE_RS_QUEUEING_H */
