/*
 * converse-rs/threads.h: user-level threads (Cth), thread-private variables
 * (Ctv), and conditions and timers (Ccd). Included by converse.h; over
 * crates/converse-capi/src/threads.rs and conds.rs.
 *
 * What is here (the Converse manual's names, same meanings):
 *   threads             CthImplemented, CthSelf, CthCreate,
 *                       CthCreateMigratable, CthPup, CthResume, CthSuspend,
 *                       CthAwaken, CthAwakenPrio, CthYield, CthYieldPrio,
 *                       CthFree, CthSetNext, CthGetNext, CthIsMainThread,
 *                       CthSetStrategy, CthSetStrategyDefault
 *   thread-private      CtvDeclare, CtvStaticDeclare, CtvExtern,
 *   variables           CtvInitialize, CtvAccess, CtvAccessOther,
 *                       CtvInitialized
 *   conditions, timers  CcdCallOnCondition(,Keep),
 *                       CcdCancelCallOnCondition(,Keep), CcdRaiseCondition,
 *                       CcdCallFnAfter, CcdSetResolution,
 *                       CcdResetResolution, CcdIncreaseResolution, and the
 *                       condition numbers (recent Charm++'s)
 *
 * A CthThread is valid from CthCreate (or CthSelf) until its thread ends,
 * on its own PE. A thread ends when its function returns, or after
 * `CthFree(CthSelf()); CthSuspend();`. Passing the CthThread of an ended
 * thread, or of another PE, ends the job with a message naming the call.
 */
#ifndef CONVERSE_RS_CONVERSE_RS_THREADS_H
#define CONVERSE_RS_CONVERSE_RS_THREADS_H

#include <stddef.h>

#include "../pup_c.h"

#ifdef __cplusplus
#include <new>
#include <type_traits>
extern "C" {
#endif

/* ---- threads (Cth) ----------------------------------------------------- */

typedef struct CthThreadStruct *CthThread;
typedef void (*CthVoidFn)(void *arg);
/* A strategy's awaken function: CthAwaken passes CQS_QUEUEING_FIFO, 0 and
 * NULL; CthAwakenPrio and CthYieldPrio their own strategy, priobits and
 * prio; an awakening by the runtime (CthYield) values rebuilt from its
 * queueing, prio then valid during the call only. prio is read-only. */
typedef void (*CthAwkFn)(CthThread t, int strategy, int priobits, int *prio);
typedef CthThread (*CthThFn)(void);

int CthImplemented(void);
CthThread CthSelf(void);
/* size: the stack in bytes, 0 for the default (+stacksize). */
CthThread CthCreate(CthVoidFn fn, void *arg, int size);
CthThread CthCreateMigratable(CthVoidFn fn, void *arg, int size);
/* Sizes, packs or unpacks a migratable thread suspended by its own
 * CthSuspend (not awakened, no Ctv values, no strategy): an 8-byte length,
 * then the thread's coroutine, the used part of its stack and its heap.
 * Sizing leaves the thread alone and returns t. Packing moves it out of
 * this PE: t is no thread any more, and CthPup returns NULL. Unpacking
 * returns the thread made again on the calling PE, suspended: CthAwaken
 * it. Across processes the code must be at one address (convrun
 * ++no-aslr). What cannot move ends the job, naming the reason. */
CthThread CthPup(pup_er p, CthThread t);
void CthResume(CthThread t);
void CthSuspend(void);
/* A thread may be in the scheduler queue once: awakening it again before it
 * runs ends the job. */
void CthAwaken(CthThread t);
/* strategy is a CQS_QUEUEING_* constant; the priority is read at once (the
 * runtime keeps a copy). */
void CthAwakenPrio(CthThread t, int strategy, int priobits, unsigned int *prio);
void CthYield(void);
void CthYieldPrio(int strategy, int priobits, unsigned int *prio);
/* Only the running thread may be freed; it ends when it next suspends. */
void CthFree(CthThread t);
void CthSetNext(CthThread t, CthThread next);
CthThread CthGetNext(CthThread t);
int CthIsMainThread(CthThread t);
void CthSetStrategy(CthThread t, CthAwkFn awakenfn, CthThFn choosefn);
void CthSetStrategyDefault(CthThread t);

/* ---- thread-private variables (Ctv) ------------------------------------ */

/* One value per user-level thread (the PE's main flow counts as one), made
 * on the thread's first CtvAccess after CtvInitialize: zeroed in C,
 * constructed (T()) in C++, and freed (destroyed in C++) when the thread
 * ends. Its address stays the same for the thread's life. The type must
 * be a single word (typedef others), as in Converse. CtvInitialize is
 * needed once per process, before the first CtvAccess; calling it on every
 * PE, as for Cpv, is fine. */
typedef struct CmiCtvDesc_ {
  int slot; /* the runtime's: 0 until CtvInitialize */
  size_t size;
  size_t align;
  const char *name;
  void (*construct)(void *); /* C++ only */
  void (*destruct)(void *);  /* C++ only */
} CmiCtvDesc_;

void CmiCtvInitialize_(const CmiCtvDesc_ *desc, size_t size);
int CmiCtvInitialized_(const CmiCtvDesc_ *desc);
void *CmiCtvAccess_(const CmiCtvDesc_ *desc);
void *CmiCtvAccessOther_(CthThread t, const CmiCtvDesc_ *desc);

#ifdef __cplusplus
}
template <typename T>
void CmiCtvConstruct_(void *p) {
  ::new (p) T();
}
template <typename T>
void CmiCtvDestruct_(void *p) {
  static_cast<T *>(p)->~T();
}
/* Trivial types need no call: their zeroed block is their T(). */
template <typename T>
constexpr void (*CmiCtvConstructor_())(void *) {
  return std::is_trivially_default_constructible<T>::value ? nullptr : &CmiCtvConstruct_<T>;
}
template <typename T>
constexpr void (*CmiCtvDestructor_())(void *) {
  return std::is_trivially_destructible<T>::value ? nullptr : &CmiCtvDestruct_<T>;
}
#define CMI_CTV_DESC_(t, v) \
  {0, sizeof(t), alignof(t), #v, CmiCtvConstructor_<t>(), CmiCtvDestructor_<t>()}
extern "C" {
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
#define CMI_CTV_DESC_(t, v) {0, sizeof(t), _Alignof(t), #v, 0, 0}
#else
#define CMI_CTV_DESC_(t, v) {0, sizeof(t), 16, #v, 0, 0}
#endif

/* The variable's type travels as the type of a pointer that is declared,
 * never defined and never used but in typeof/decltype (a declaration may
 * be repeated, so CtvExtern and CtvDeclare may meet in one file). */
#ifdef __cplusplus
#define CMI_CTV_TYPEOF_(x) decltype(x)
#else
#define CMI_CTV_TYPEOF_(x) __typeof__(x)
#endif
#define CtvDeclare(t, v) \
  CmiCtvDesc_ Ctv_##v##_ = CMI_CTV_DESC_(t, v); \
  extern t *CtvTypeOf_##v##_
#define CtvStaticDeclare(t, v) \
  static CmiCtvDesc_ Ctv_##v##_ = CMI_CTV_DESC_(t, v); \
  extern t *CtvTypeOf_##v##_
#define CtvExtern(t, v) \
  extern CmiCtvDesc_ Ctv_##v##_; \
  extern t *CtvTypeOf_##v##_
#define CtvInitialize(t, v) CmiCtvInitialize_(&Ctv_##v##_, sizeof(t))
/* An lvalue, as in Converse. */
#define CtvAccess(v) (*(CMI_CTV_TYPEOF_(CtvTypeOf_##v##_))CmiCtvAccess_(&Ctv_##v##_))
#define CtvInitialized(v) CmiCtvInitialized_(&Ctv_##v##_)
/* Thread t's value of v (a thread of the calling PE), made on first access
 * as CtvAccess makes it; an lvalue. */
#define CtvAccessOther(t, v) \
  (*(CMI_CTV_TYPEOF_(CtvTypeOf_##v##_))CmiCtvAccessOther_((t), &Ctv_##v##_))

/* ---- conditions and timers (Ccd) --------------------------------------- */

/* The manual's callback: the argument given at registration and the wall
 * time (CmiWallTimer) of the call. */
typedef void (*CcdVoidFn)(void *userParam, double curWallTime);
/* Recent Charm++'s condition callback, without the time: the functions
 * below take either type (chosen by the callback's type in C11 and C++). */
#define CCD_COND_FN_EXISTS 1
typedef void (*CcdCondFn)(void *userParam);

/* Charm++'s numbers. Not raised by converse-rs, so not defined here:
 * CcdSCHEDLOOP (0), CcdPROCESSOR_LONG_IDLE (4), CcdPERIODIC_5s (9),
 * CcdPERIODIC_2minute (12), CcdPERIODIC_5minute (13), CcdTOPOLOGY_AVAIL
 * (19); registering for them ends the job with a message. */
#define CcdPROCESSOR_BEGIN_BUSY 1
#define CcdPROCESSOR_END_IDLE 1 /* synonym */
#define CcdPROCESSOR_BEGIN_IDLE 2
#define CcdPROCESSOR_END_BUSY 2 /* synonym */
#define CcdPROCESSOR_STILL_IDLE 3
#define CcdPERIODIC 5 /* every millisecond, as closely as the scheduler can */
#define CcdPERIODIC_10ms 6
#define CcdPERIODIC_100ms 7
#define CcdPERIODIC_1second 8
#define CcdPERIODIC_1s 8
#define CcdPERIODIC_10second 10
#define CcdPERIODIC_10seconds 10
#define CcdPERIODIC_10s 10
#define CcdPERIODIC_1minute 11
#define CcdPERIODIC_10minute 14
#define CcdPERIODIC_1hour 15
#define CcdPERIODIC_12hour 16
#define CcdPERIODIC_1day 17
#define CcdQUIESCENCE 18
#define CcdSIGUSR1 20
#define CcdSIGUSR2 21
/* The runtime never raises CcdUSER .. CcdUSERMAX (inclusive). A program may
 * define a larger CcdUSERMAX before including converse.h, up to 517. */
#define CcdUSER 22
#ifndef CcdUSERMAX
#define CcdUSERMAX 127
#endif
#if CcdUSERMAX > 517
#error "CcdUSERMAX: converse-rs has user conditions up to 517"
#endif

void CcdCallFnAfter(CcdVoidFn fnp, void *arg, double msecs);
int CcdCallOnCondition(int condnum, CcdVoidFn fnp, void *arg);
int CcdCallOnConditionKeep(int condnum, CcdVoidFn fnp, void *arg);
void CcdCancelCallOnCondition(int condnum, int idx);
void CcdCancelCallOnConditionKeep(int condnum, int idx);
void CcdRaiseCondition(int condnum);
/* Seconds; the resolution is at most (and by default) 5 ms. Each returns
 * the resolution before the call. */
double CcdSetResolution(double newResolution);
double CcdResetResolution(void);
double CcdIncreaseResolution(double newResolution);

/* The same with a CcdCondFn callback (use the names above). */
void CmiCcdCallFnAfterCond_(CcdCondFn fnp, void *arg, double msecs);
int CmiCcdCallOnConditionCond_(int condnum, CcdCondFn fnp, void *arg);
int CmiCcdCallOnConditionKeepCond_(int condnum, CcdCondFn fnp, void *arg);

#ifdef __cplusplus
}
inline void CcdCallFnAfter(CcdCondFn fnp, void *arg, double msecs) {
  CmiCcdCallFnAfterCond_(fnp, arg, msecs);
}
inline int CcdCallOnCondition(int condnum, CcdCondFn fnp, void *arg) {
  return CmiCcdCallOnConditionCond_(condnum, fnp, arg);
}
inline int CcdCallOnConditionKeep(int condnum, CcdCondFn fnp, void *arg) {
  return CmiCcdCallOnConditionKeepCond_(condnum, fnp, arg);
}
#elif defined(__STDC_VERSION__) && __STDC_VERSION__ >= 201112L
/* C11: the entry point by the callback's type (any other type is the
 * manual's CcdVoidFn, and the compiler checks it as such). */
#define CcdCallFnAfter(fnp, arg, msecs) \
  _Generic((fnp), CcdCondFn: CmiCcdCallFnAfterCond_, default: CcdCallFnAfter)((fnp), (arg), (msecs))
#define CcdCallOnCondition(condnum, fnp, arg)                                        \
  _Generic((fnp), CcdCondFn: CmiCcdCallOnConditionCond_, default: CcdCallOnCondition)( \
      (condnum), (fnp), (arg))
#define CcdCallOnConditionKeep(condnum, fnp, arg)                                  \
  _Generic((fnp), CcdCondFn: CmiCcdCallOnConditionKeepCond_,                       \
           default: CcdCallOnConditionKeep)((condnum), (fnp), (arg))
#endif

#endif /* CONVERSE_RS_CONVERSE_RS_THREADS_H */
