/*
 * converse-rs/memory.h: struct reductions, isomalloc, quiescence detection
 * and handlers with a user pointer. Included by converse.h (after the types
 * it uses); over crates/converse-capi/src/reduce_struct.rs and memory.rs.
 *
 * What is here:
 *   struct reductions   CmiReduceStruct, CmiReduceStructID,
 *                       CmiListReduceStruct, CmiGroupReduceStruct,
 *                       CmiNodeReduceStruct, CmiNodeReduceStructID,
 *                       CmiReducePupFn, CmiReduceDeleteFn (the manual's)
 *   isomalloc           CmiIsomalloc, CmiIsomallocFree, CmiIsomallocLength,
 *                       CmiIsomallocInRange (the manual's)
 *   quiescence          CmiStartQD, CQdCreate, CQdProcess, CQdGetCreated,
 *                       CQdGetProcessed, CQdState, CpvAccess(cQdState)
 *                       (Charm++'s; the manual only has CcdQUIESCENCE)
 *   handlers            CmiRegisterHandlerEx, CmiNumberHandlerEx
 * Not here: CmiIsomallocPup (the runtime moves a block when it packs one, where
 * Charm++ copies it), CQdRegisterCallback (use
 * CcdCallOnCondition(CcdQUIESCENCE, ...)).
 *
 * Struct reductions, as in Charm++. On each PE, once its data and its
 * children's are in: a PE with children calls
 * mergeFn(&size, local, remote, count) with `local` its own data pointer
 * (unpacked; the merge owns it and returns the merged data, usually
 * `local` changed in place), remote[i] child i's data exactly as the pup
 * function packed it (16-aligned; unpack it yourself, e.g. with
 * pup_new_fromMem; the runtime frees it after the merge) and *size 0. A PE
 * that is not the root then packs the merged data with pupFn (sizing, then
 * packing; never unpacking), sends it up and calls deleteFn on it (unless
 * deleteFn is NULL); on a leaf this happens inside the call. The root calls
 * dest(merged) with the data itself, which dest then owns: dest is a
 * function, not a handler index, and runs as a handler on the root (PE 0,
 * pes[0] for a list, the group's first member for a group, a PE of node 0
 * for the node forms). A pup function that packs a different number of
 * bytes than it sized ends the job. In the node forms one PE of each node
 * calls, and the merge, pup and delete functions may run on another PE of
 * the node (the data is handed over, never shared).
 *
 * Isomalloc. CmiIsomalloc rounds up to whole pages and zeroes them; the
 * address is unique in the job. A failure (no address space left, freeing
 * what is no block or freeing it twice, the length of what is no block)
 * ends the job with a message naming the call.
 *
 * Quiescence. CmiStartQD(fn, arg) calls fn on the calling PE, as a
 * handler, once no message is in flight or queued anywhere, no
 * CcdCallFnAfter timer is pending and no handler runs; fn is a CcdVoidFn
 * (fn(arg, wall_time)) or, in C11 and C++, a CcdCondFn (fn(arg)). CQdCreate
 * and CQdProcess count work the runtime does not see, on the calling PE:
 * pass CpvAccess(cQdState) (any other PE's state ends the job).
 */
#ifndef CONVERSE_RS_CONVERSE_RS_MEMORY_H
#define CONVERSE_RS_CONVERSE_RS_MEMORY_H

#include <stdint.h>

#include "../pup_c.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- struct reductions -------------------------------------------------- */

typedef void (*CmiReducePupFn)(pup_er p, void *data);
typedef void (*CmiReduceDeleteFn)(void *ptr);

void CmiReduceStruct(void *data, CmiReducePupFn pupFn, CmiReduceMergeFn mergeFn,
                     CmiHandler dest, CmiReduceDeleteFn deleteFn);
void CmiReduceStructID(void *data, CmiReducePupFn pupFn, CmiReduceMergeFn mergeFn,
                       CmiHandler dest, CmiReduceDeleteFn deleteFn, CmiReductionID id);
void CmiListReduceStruct(int npes, int *pes, void *data, CmiReducePupFn pupFn,
                         CmiReduceMergeFn mergeFn, CmiHandler dest,
                         CmiReduceDeleteFn deleteFn, CmiReductionID id);
void CmiGroupReduceStruct(CmiGroup grp, void *data, CmiReducePupFn pupFn,
                          CmiReduceMergeFn mergeFn, CmiHandler dest,
                          CmiReduceDeleteFn deleteFn, CmiReductionID id);
void CmiNodeReduceStruct(void *data, CmiReducePupFn pupFn, CmiReduceMergeFn mergeFn,
                         CmiHandler dest, CmiReduceDeleteFn deleteFn);
void CmiNodeReduceStructID(void *data, CmiReducePupFn pupFn, CmiReduceMergeFn mergeFn,
                           CmiHandler dest, CmiReduceDeleteFn deleteFn,
                           CmiReductionID id);

/* ---- isomalloc ----------------------------------------------------------- */

void *CmiIsomalloc(int size);
void CmiIsomallocFree(void *doomedBlock);
int CmiIsomallocLength(void *block);
int CmiIsomallocInRange(void *address);

/* ---- quiescence detection ------------------------------------------------ */

struct ConvQdState;
typedef struct ConvQdState *CQdState;
typedef CcdVoidFn CQdVoidFn;
typedef CcdCondFn CQdCondFn;

void CQdCreate(CQdState state, int64_t n);
void CQdProcess(CQdState state, int64_t n);
int64_t CQdGetCreated(CQdState state);
int64_t CQdGetProcessed(CQdState state);
void CmiStartQD(CQdVoidFn fn, void *arg);

/* The calling PE's CQdState: what CpvAccess(cQdState) reads. */
CQdState CmiCQdState_(void);
/* CmiStartQD with a CQdCondFn (use the name above). */
void CmiStartQDCond_(CQdCondFn fn, void *arg);

/* ---- handlers with a user pointer --------------------------------------- */

/* As CmiRegisterHandler (the same order on every PE); the handler runs as
 * h(msg, userPtr), each PE with the pointer it registered. */
int CmiRegisterHandlerEx(CmiHandlerEx h, void *userPtr);
void CmiNumberHandlerEx(int n, CmiHandlerEx h, void *userPtr);

#ifdef __cplusplus
}
/* CpvAccess(cQdState) is CmiCQdState_(). */
struct CmiCQdStateSlot_ {
  CQdState get() const { return CmiCQdState_(); }
};
#define Cpv_cQdState_ CmiCQdStateSlot_()
inline void CmiStartQD(CQdCondFn fn, void *arg) { CmiStartQDCond_(fn, arg); }
#else
/* CpvAccess(cQdState) is CmiCQdState_(). */
#define Cpv_cQdState_ CmiCQdState_()
#if defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
/* C11: the entry point by the callback's type (any other type is a
 * CcdVoidFn, and the compiler checks it as such). */
#define CmiStartQD(fn, arg) \
  _Generic((fn), CcdCondFn: CmiStartQDCond_, default: CmiStartQD)((fn), (arg))
#endif
#endif

#endif /* CONVERSE_RS_CONVERSE_RS_MEMORY_H */
