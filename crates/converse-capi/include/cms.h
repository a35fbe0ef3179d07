/*
 * cms.h: Converse master-slave (the extensions manual's chapter 3), over
 * crates/converse-capi/src/ext_cms.rs (the Rust crate converse-ext).
 *
 *   CmsWorkerFn, CmsConsumerFn, CmsInit, CmsFireTask, CmsAwaitResponses,
 *   CmsGetResponse, CmsProcessResponses, CmsExit
 *
 * As in Converse, CmsInit is called from main and starts the job itself
 * (the command line's +p, ++ppn, ... apply): it returns on PE 0, the
 * manager, only; every other PE works on tasks until the manager's CmsExit,
 * which ends the job. Tasks are seeds of the job's balancer (+balancer);
 * PE 0 works on tasks too while it waits for the responses.
 *
 * Memory: the worker gets a copy of the task it may change; it allocates
 * its response with malloc (the library frees it after copying it) and
 * returns its size. CmsGetResponse and the consumer get malloc'ed copies of
 * responses, which the program owns (it may free them).
 */
#ifndef CONVERSE_RS_CMS_H
#define CONVERSE_RS_CMS_H

#include "converse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* int worker(void *task, void **response): sets *response, returns its
 * size in bytes. */
typedef int (*CmsWorkerFn)(void *, void *);
/* int consumer(void *response, int ref). */
typedef int (*CmsConsumerFn)(void *, int);

/* max: the largest number of tasks fired before the next
 * CmsAwaitResponses or CmsProcessResponses (task numbers are below it). */
void CmsInit(CmsWorkerFn worker, int max);
/* On PE 0: task number ref (below max, not in flight), a copy of the size
 * bytes at t. */
void CmsFireTask(int ref, const void *t, int size);
/* Works on tasks until every fired task has answered. */
void CmsAwaitResponses(void);
/* Task ref's response (0 if none came); the same pointer until ref is
 * fired again. */
void *CmsGetResponse(int ref);
/* As CmsAwaitResponses, calling consumer with each response as it comes. */
void CmsProcessResponses(CmsConsumerFn consumer);
/* On PE 0: ends the job (exit code 0). */
void CmsExit(void);

#ifdef __cplusplus
}
#endif

#endif /* CONVERSE_RS_CMS_H */
