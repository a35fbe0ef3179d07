/*
 * converse-rs/ext.h: the parts of the Converse extensions library that
 * Charm++'s converse.h declares itself: tag matching (Cmm), futures
 * (Cfuture) and the seed load balancer's interface (Cld). Included by
 * converse.h; over crates/converse-capi/src/ext_cmm.rs, ext_futures.rs and
 * ext_cld.rs (the Rust crate converse-ext). The library's other headers:
 * cms.h, cldb.h, cpthreads.h, conv-cpath.h.
 *
 * What is here (the extensions manual's names, same meanings):
 *   tag matching        CmmTable, CmmWildcard (CmmWildCard), CmmNew,
 *                       CmmPut, CmmGet, CmmProbe, CmmFind, CmmEntries,
 *                       CmmFree
 *   futures             Cfuture, CfuturePE, CfutureModuleInit
 *                       (CfutureInit), CfutureCreate, CfutureSet,
 *                       CfutureWait, CfutureDestroy, CfutureCreateValue,
 *                       CfutureStoreValue (CfutureCreateBuffer,
 *                       CfutureStoreBuffer), CfutureDestroyBuffer
 *   seed balancing      CLD_ANYWHERE, CLD_BROADCAST, CLD_BROADCAST_ALL,
 *                       CldInfoFn, CldPackFn, CldModuleInit,
 *                       CldRegisterInfoFn, CldRegisterPackFn, CldEnqueue,
 *                       CldEnqueueMulti, CldNodeEnqueue, CldGetStrategy,
 *                       CmiExtHeaderSizeBytes
 */
#ifndef CONVERSE_RS_CONVERSE_RS_EXT_H
#define CONVERSE_RS_CONVERSE_RS_EXT_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- tag matching (Cmm) ------------------------------------------------ */

/* A table of pointers stored under arrays of int tags. A pattern matches
 * stored tags of the same number where each pair is equal or either one is
 * CmmWildcard; the oldest match comes first. A table is plain data: one
 * thread at a time uses it. */
typedef struct CmmTableStruct *CmmTable;

#define CmmWildcard (-1)
#define CmmWildCard CmmWildcard /* Charm++'s spelling */

CmmTable CmmNew(void);
void CmmPut(CmmTable t, int ntags, const int *tags, void *msg);
/* The oldest match (0 if none), its stored tags copied to ret_tags (room
 * for ntags ints; may be NULL). CmmGet removes it, CmmProbe leaves it;
 * CmmFind removes it if del is nonzero. */
void *CmmGet(CmmTable t, int ntags, const int *tags, int *ret_tags);
void *CmmProbe(CmmTable t, int ntags, const int *tags, int *ret_tags);
void *CmmFind(CmmTable t, int ntags, const int *tags, int *ret_tags, int del);
/* How many pointers the table holds. */
int CmmEntries(CmmTable t);
/* Frees the table and, with CmiFree, every pointer still in it. */
void CmmFree(CmmTable t);

/* ---- futures (Cfuture) ------------------------------------------------- */

/* A handle: plain data, copied to any PE. A future resides on the PE that
 * created it; only there may it be waited for or destroyed. */
typedef struct Cfuture_s {
  int pe;                /* the PE it resides on */
  unsigned long long id; /* its number there */
} Cfuture;

#define CfuturePE(f) ((f).pe)

/* On every PE, where handlers are registered (the start function). */
void CfutureModuleInit(void);
#define CfutureInit CfutureModuleInit /* Charm++'s name */

Cfuture CfutureCreate(void);
/* A copy of nbytes at value, from any PE. A future is filled once. */
void CfutureSet(Cfuture f, const void *value, int nbytes);
/* Blocks the calling thread (only threads may block) until f is filled;
 * returns its value (read-only), valid until f is destroyed. */
void *CfutureWait(Cfuture f);
/* Frees the future and its value. */
void CfutureDestroy(Cfuture f);
/* A zeroed buffer to fill, then store without a copy with
 * CfutureStoreValue (or free with CfutureDestroyBuffer). */
void *CfutureCreateValue(int nbytes);
/* Stores a buffer of CfutureCreateValue (it becomes the future's), or a
 * value CfutureWait returned on this PE (shared, not copied). */
void CfutureStoreValue(Cfuture f, void *value);
#define CfutureCreateBuffer CfutureCreateValue /* Charm++'s names */
#define CfutureStoreBuffer CfutureStoreValue
void CfutureDestroyBuffer(void *value);

/* ---- seed load balancing (Cld) ----------------------------------------- */

/* A message's header holds its handler and the info slot the balancer
 * uses: no extension is needed. */
#ifndef CmiExtHeaderSizeBytes
#define CmiExtHeaderSizeBytes CmiMsgHeaderSizeBytes
#endif

#define CLD_ANYWHERE (-1)
#define CLD_BROADCAST (-2)
#define CLD_BROADCAST_ALL (-3)

/* Called with the address of the message pointer (a void **): it may
 * change the message in place, or replace it (CmiFree-ing the old one). It
 * runs only when the seed is about to leave its process. */
typedef void (*CldPackFn)(void *msg);
/* Fills in the message's pack function (0 for none), length, queueing
 * strategy (CQS_QUEUEING_*) and priority (priobits, *prioptr: pointing into
 * the message). It only reads the message. */
typedef void (*CldInfoFn)(void *msg, CldPackFn *pfn, int *len, int *queueing, int *priobits,
                          unsigned int **prioptr);

/* Sets the balancer up on the calling PE (the job's strategy, chosen with
 * +balancer NAME); the first CldRegisterInfoFn or CldRegisterPackFn there
 * does it too. Register info and pack functions on every PE in the same
 * order: their indices are handler indices (CmiHandlerToFunction gives the
 * function back). */
void CldModuleInit(void);
int CldRegisterInfoFn(CldInfoFn fn);
int CldRegisterPackFn(CldPackFn fn);

/* Takes msg (from CmiAlloc or a handler, its handler set): CLD_ANYWHERE
 * gives it to the balancer, a PE number (or CLD_BROADCAST,
 * CLD_BROADCAST_ALL) sends it there and enqueues it with its priority. */
void CldEnqueue(int pe, void *msg, int infofn);
void CldEnqueueMulti(int npes, const int *pes, void *msg, int infofn);
/* As CldEnqueue, with nodes and their node queues. */
void CldNodeEnqueue(int node, void *msg, int infofn);
/* The job's strategy's name. */
const char *CldGetStrategy(void);

#ifdef __cplusplus
}
#endif

#endif /* CONVERSE_RS_CONVERSE_RS_EXT_H */
