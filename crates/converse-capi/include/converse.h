/*
 * converse.h: the Converse machine interface and scheduler for C and C++,
 * over converse-rs (crates/converse-capi). Build with `convcc` (it adds
 * this directory to the include path and links libconverse_capi.a).
 *
 * What is here (the Converse manual's names, same meanings):
 *   start-up and exit   ConverseInit, ConverseExit, CmiAbort
 *   who am I            CmiMyPe, CmiNumPes, CmiMyNode, CmiNumNodes,
 *                       CmiMyRank, CmiMyNodeSize, CmiNodeFirst,
 *                       CmiNodeSize, CmiNodeOf, CmiRankOf
 *   messages            CmiMsgHeaderSizeBytes, CmiSetHandler,
 *                       CmiGetHandler, CmiSetInfo, CmiGetInfo, CmiAlloc,
 *                       CmiFree, CmiSize, CmiReference
 *   handlers            CmiRegisterHandler(,Local,Global), CmiNumberHandler,
 *                       CmiHandlerToFunction, CmiGetHandlerFunction
 *   sends               CmiSyncSend(,AndFree), CmiAsyncSend,
 *                       CmiAsyncMsgSent, CmiReleaseCommHandle,
 *                       CmiSyncBroadcast(,AndFree,All,AllAndFree),
 *                       CmiAsyncBroadcast(,All)
 *   scheduler           CsdScheduler, CsdScheduleForever, CsdScheduleCount,
 *                       CsdSchedulePoll, CsdExitScheduler, CmiDeliverMsgs,
 *                       CmiDeliverSpecificMsg, CsdEnqueue(,Fifo,Lifo)
 *   per-PE variables    CpvDeclare, CpvStaticDeclare, CpvExtern,
 *                       CpvInitialize, CpvAccess, CpvInitialized
 *   timers, output      CmiWallTimer, CmiCpuTimer, CmiTimer, CmiPrintf,
 *                       CmiError
 *
 * A handler receives a message it owns, writable and its own (a broadcast
 * copy shared with other PEs is copied first): it frees it with CmiFree or
 * passes it on with an AndFree send.
 */
#ifndef CONVERSE_RS_CONVERSE_H
#define CONVERSE_RS_CONVERSE_H

#include <pthread.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#ifdef __cplusplus
extern "C" {
#endif

/* ---- sized types (Charm++'s conv-config.h) ----------------------------- */

typedef int8_t CmiInt1;
typedef int16_t CmiInt2;
typedef int32_t CmiInt4;
typedef int64_t CmiInt8;
typedef uint8_t CmiUInt1;
typedef uint16_t CmiUInt2;
typedef uint32_t CmiUInt4;
typedef uint64_t CmiUInt8;
typedef float CmiFloat4;
typedef double CmiFloat8;
typedef intptr_t CmiIntPtr;
typedef uintptr_t CmiUIntPtr;

#if defined(__GNUC__) || defined(__clang__)
#define CMI_NORETURN __attribute__((noreturn))
#define CMI_PRINTF_LIKE(f, a) __attribute__((format(printf, f, a)))
#else
#define CMI_NORETURN
#define CMI_PRINTF_LIKE(f, a)
#endif

/* Defined below; the inline functions above their section use them. */
void CmiPrintString_(int to_stderr, const char *text);
void CmiAbortString_(const char *text) CMI_NORETURN;

/* ---- messages ---------------------------------------------------------- */

/* The header at the start of every message: the core's MsgHeader, field for
 * field (a test checks sizeof and offsetof against the Rust definition).
 * Programs set the handler (and, for layers above, the info slot); the
 * runtime owns and overwrites the rest on every send. */
typedef struct CmiMsgHeaderBasic {
  unsigned int handler;    /* index of the handler that runs the message */
  /* The core's 32-bit info slot, in two halves as in Charm++: a handler
   * set aside (CmiSetXHandler, CldSwitchHandler) and a 16-bit value for
   * layers above (CmiSetInfo: the seed balancer's info function). */
  unsigned short xhdl;
  unsigned short info;
  unsigned int total_size; /* header plus payload, in bytes (runtime's)  */
  unsigned int src_pe;     /* runtime's */
  unsigned int dest;       /* runtime's */
  unsigned int root;       /* runtime's */
  unsigned int flags;      /* runtime's */
  unsigned int coll;       /* runtime's */
} CmiMsgHeaderBasic;

/* An integer constant expression: `char head[CmiMsgHeaderSizeBytes];` at
 * file scope works. */
#define CmiMsgHeaderSizeBytes 32

#define CmiSetHandler(m, h) (((CmiMsgHeaderBasic *)(void *)(m))->handler = (unsigned int)(h))
/* An lvalue, as in Converse. */
#define CmiGetHandler(m) (((CmiMsgHeaderBasic *)(void *)(m))->handler)
#define CmiSetInfo(m, v) (((CmiMsgHeaderBasic *)(void *)(m))->info = (unsigned short)(v))
#define CmiGetInfo(m) (((CmiMsgHeaderBasic *)(void *)(m))->info)
#define CmiSetXHandler(m, h) (((CmiMsgHeaderBasic *)(void *)(m))->xhdl = (unsigned short)(h))
#define CmiGetXHandler(m) (((CmiMsgHeaderBasic *)(void *)(m))->xhdl)

/* Any size (one shorter than a header is plain memory); 16-aligned, zeroed.
 * CmiFree, CmiSize and CmiReference take it on any PE. */
void *CmiAlloc(int size);
void CmiFree(void *msg);
int CmiSize(void *msg);
void CmiReference(void *msg);
/* Readies the header of a message the program made itself (on its stack,
 * say): clears the fields the runtime owns; handler, xhdl, info and the
 * size are kept. Never needed here (a send rewrites those fields), always
 * harmless; a size below CmiMsgHeaderSizeBytes touches nothing. */
void CmiInitMsgHeader(void *msg, int size);

/* ---- handlers ---------------------------------------------------------- */

typedef void (*CmiHandler)(void *msg);
typedef void (*CmiHandlerEx)(void *msg, void *userPtr);

/* Register the same handlers in the same order on every PE: they get the
 * same indices everywhere. The runtime checks it, across processes too,
 * and ends the job naming the first index and the functions that differ. */
int CmiRegisterHandler(CmiHandler h);
int CmiRegisterHandlerLocal(CmiHandler h);
int CmiRegisterHandlerGlobal(CmiHandler h);
void CmiNumberHandler(int n, CmiHandler h);
CmiHandler CmiHandlerToFunction(int n);
#define CmiGetHandlerFunction(m) CmiHandlerToFunction((int)CmiGetHandler(m))
/* Old Converse: a handler took its buffer over with it. Here a handler's
 * buffer is its own already (keep it, or CmiFree it): nothing to do. */
#define CmiGrabBuffer(pmsg) ((void)(pmsg))

/* ---- who am I ---------------------------------------------------------- */

int CmiMyPe(void);
int CmiNumPes(void);
int CmiMyNode(void);
int CmiNumNodes(void);
int CmiMyRank(void);
int CmiMyNodeSize(void);
int CmiNodeFirst(int node);
int CmiNodeSize(int node);
int CmiNodeOf(int pe);
int CmiRankOf(int pe);
#define CmiNumPe() CmiNumPes()

/* ---- physical nodes and CPU affinity (also via cputopology.h) ----------- */

/* A physical node is a host (the launcher tells hosts apart by name, or
 * by ++virtual-hosts); a one-process job runs on one. Numbered from 0 by
 * first appearance: physical node 0 holds PE 0. Known from start-up:
 * CmiInitCPUTopology does nothing and CmiCpuTopologyEnabled is 1. */
int CmiNumCores(void); /* processors online on this host */
int CmiCpuTopologyEnabled(void);
void CmiInitCPUTopology(char **argv);
int CmiNumPhysicalNodes(void);
int CmiPhysicalNodeID(int pe);
int CmiNumPesOnPhysicalNode(int node);
/* The PEs of host `node`, in increasing order; the list is the runtime's
 * (do not free it). */
void CmiGetPesOnPhysicalNode(int node, int **pelist, int *num);
int CmiGetFirstPeOnPhysicalNode(int node);
int CmiPhysicalRank(int pe); /* the PE's position among its host's PEs */
int CmiPeOnSamePhysicalNode(int pe1, int pe2);
/* converse-rs does not pin PEs (no +setcpuaffinity): PE 0 says so once.
 * CmiSetCPUAffinity pins the calling thread (0, or -1 if refused);
 * CmiPrintCPUAffinity prints where the calling PE may run. */
void CmiInitCPUAffinity(char **argv);
int CmiSetCPUAffinity(int core);
int CmiPrintCPUAffinity(void);

/* ---- the program's command-line arguments ------------------------------- */

/* On a NULL-terminated argv (the start function's). A found flag and its
 * value are removed from argv and the call returns 1; else 0 and *dest is
 * unchanged. Numbers may follow as `-n 5`, `-n=5` or `-n5`; a missing or
 * bad number ends the job naming the flag. No usage listing is kept: the
 * Desc forms' descriptions are not used, CmiArgGivingUsage is 0. */
int CmiGetArgc(char **argv);
char **CmiCopyArgs(char **argv); /* malloc'd: free() it */
void CmiDeleteArgs(char **argv, int k);
int CmiGetArgInt(char **argv, const char *arg, int *optDest);
int CmiGetArgIntDesc(char **argv, const char *arg, int *optDest, const char *desc);
int CmiGetArgLong(char **argv, const char *arg, CmiInt8 *optDest);
int CmiGetArgLongDesc(char **argv, const char *arg, CmiInt8 *optDest, const char *desc);
int CmiGetArgDouble(char **argv, const char *arg, double *optDest);
int CmiGetArgDoubleDesc(char **argv, const char *arg, double *optDest, const char *desc);
int CmiGetArgString(char **argv, const char *arg, char **optDest);
int CmiGetArgStringDesc(char **argv, const char *arg, char **optDest, const char *desc);
int CmiGetArgFlag(char **argv, const char *arg);
int CmiGetArgFlagDesc(char **argv, const char *arg, const char *desc);
void CmiDeprecateArgInt(char **argv, const char *arg, const char *desc, const char *warning);
int CmiArgGivingUsage(void);
void CmiArgGroup(const char *parentName, const char *groupName);

/* ---- sends ------------------------------------------------------------- */

typedef void *CmiCommHandle;

/* Copying sends read `size` bytes from any memory (a message on the
 * caller's stack, its header partly written); AndFree sends take a buffer
 * from CmiAlloc or a handler. */
void CmiSyncSend(int destPE, int size, void *msg);
void CmiSyncSendAndFree(int destPE, int size, void *msg);
CmiCommHandle CmiAsyncSend(int destPE, int size, void *msg);
int CmiAsyncMsgSent(CmiCommHandle handle);
void CmiReleaseCommHandle(CmiCommHandle handle);

void CmiSyncBroadcast(int size, void *msg);
void CmiSyncBroadcastAndFree(int size, void *msg);
void CmiSyncBroadcastAll(int size, void *msg);
void CmiSyncBroadcastAllAndFree(int size, void *msg);
CmiCommHandle CmiAsyncBroadcast(int size, void *msg);
CmiCommHandle CmiAsyncBroadcastAll(int size, void *msg);

void CmiSyncNodeSend(int destNode, int size, void *msg);
void CmiSyncNodeSendAndFree(int destNode, int size, void *msg);
CmiCommHandle CmiAsyncNodeSend(int destNode, int size, void *msg);
void CmiSyncNodeBroadcast(int size, void *msg);
void CmiSyncNodeBroadcastAndFree(int size, void *msg);
void CmiSyncNodeBroadcastAll(int size, void *msg);
void CmiSyncNodeBroadcastAllAndFree(int size, void *msg);
CmiCommHandle CmiAsyncNodeBroadcast(int size, void *msg);
CmiCommHandle CmiAsyncNodeBroadcastAll(int size, void *msg);

/* One message made of `len` pieces (the first starts with the header).
 * AndFree: each piece and both arrays come from CmiAlloc and are freed. */
void CmiSyncVectorSend(int destPE, int len, int sizes[], char *msgComps[]);
void CmiSyncVectorSendAndFree(int destPE, int len, int sizes[], char *msgComps[]);
CmiCommHandle CmiAsyncVectorSend(int destPE, int len, int sizes[], char *msgComps[]);
/* `len` whole messages, each with its handler, delivered in order. */
void CmiMultipleSend(int destPE, int len, int sizes[], char *msgComps[]);
void CmiInitMultipleSendRoutine(void);

/* ---- groups, multicast, list sends -------------------------------------- */

typedef struct CmiGroup {
  unsigned int pe; /* the PE that made it */
  unsigned int id;
} CmiGroup;

CmiGroup CmiEstablishGroup(int npes, int *pes);
void CmiSyncMulticast(CmiGroup grp, int size, void *msg);
void CmiSyncMulticastAndFree(CmiGroup grp, int size, void *msg);
CmiCommHandle CmiAsyncMulticast(CmiGroup grp, int size, void *msg);
void CmiSyncListSend(int npes, int *pes, int size, void *msg);
void CmiSyncListSendAndFree(int npes, int *pes, int size, void *msg);
CmiCommHandle CmiAsyncListSend(int npes, int *pes, int size, void *msg);
/* The members, if this PE has the group's definition (always on the PE that
 * made it; elsewhere once the definition has arrived); else *npes = 0 and
 * *pes = NULL. The list is the runtime's and stays valid for the job. */
void CmiLookupGroup(CmiGroup grp, int *npes, int **pes);

/* ---- reductions --------------------------------------------------------- */

/* Merges the children's contributions into `local` (or another buffer it
 * returns), setting *size. The runtime frees the children's buffers after
 * it returns; the merged message runs the handler set in it on the root. */
typedef void *(*CmiReduceMergeFn)(int *size, void *local, void **remote, int count);
typedef unsigned int CmiReductionID;

void CmiReduce(void *msg, int size, CmiReduceMergeFn mergeFn);
void CmiReduceID(void *msg, int size, CmiReduceMergeFn mergeFn, CmiReductionID id);
void CmiListReduce(int npes, int *pes, void *msg, int size, CmiReduceMergeFn mergeFn,
                   CmiReductionID id);
void CmiGroupReduce(CmiGroup grp, void *msg, int size, CmiReduceMergeFn mergeFn,
                    CmiReductionID id);
CmiReductionID CmiGetGlobalReduction(void);
CmiReductionID CmiGetDynamicReduction(void);
/* PE 0 sends the ID to `handlerIdx` on `pe` (every PE if -1): the header,
 * the ID (4 bytes), dataSize (4 bytes), the data. */
void CmiGetDynamicReductionRemote(int handlerIdx, int pe, int dataSize, void *data);

/* Node reductions: one PE of every node contributes (the node's part); the
 * result runs on a PE of node 0. The merge function may run on another PE
 * of the node than the one that called. IDs are node IDs (from the calls
 * below); one PE per node calls CmiGetGlobalNodeReduction, in the same
 * order on every node. */
void CmiNodeReduce(void *msg, int size, CmiReduceMergeFn mergeFn);
void CmiNodeReduceID(void *msg, int size, CmiReduceMergeFn mergeFn, CmiReductionID id);
CmiReductionID CmiGetGlobalNodeReduction(void);
CmiReductionID CmiGetDynamicNodeReduction(void);
void CmiGetDynamicNodeReductionRemote(int handlerIdx, int node, int dataSize, void *data);

/* ---- spanning trees ----------------------------------------------------- */

int CmiSpanTreeRoot(void);
int CmiSpanTreeParent(int pe); /* -1 for the root */
int CmiNumSpanTreeChildren(int pe);
void CmiSpanTreeChildren(int pe, int *children);
int CmiNodeSpanTreeParent(int node);
int CmiNumNodeSpanTreeChildren(int node);
void CmiNodeSpanTreeChildren(int node, int *children);

/* ---- the node: barrier, locks ------------------------------------------- */

void CmiNodeBarrier(void);
#define CmiNodeAllBarrier() CmiNodeBarrier()

/* Every PE is a thread of its process: a node lock is a pthread mutex, as
 * in Charm++'s SMP builds. CmiTryLock returns 0 when it took the lock. */
typedef pthread_mutex_t *CmiNodeLock;
static inline CmiNodeLock CmiCreateLock(void) {
  CmiNodeLock lock = (CmiNodeLock)malloc(sizeof(pthread_mutex_t));
  if (lock == NULL || pthread_mutex_init(lock, NULL) != 0) {
    CmiAbortString_("CmiCreateLock: cannot create a lock");
  }
  return lock;
}
static inline void CmiLock(CmiNodeLock lock) { pthread_mutex_lock(lock); }
static inline void CmiUnlock(CmiNodeLock lock) { pthread_mutex_unlock(lock); }
static inline int CmiTryLock(CmiNodeLock lock) { return pthread_mutex_trylock(lock); }
static inline void CmiDestroyLock(CmiNodeLock lock) {
  pthread_mutex_destroy(lock);
  free(lock);
}

/* ---- memory fences and atomics; network progress ----------------------- */

/* Charm++'s names over the compiler's atomic builtins, on plain integer
 * lvalues (CmiMemoryAtomicType(int) is int, in C and C++ alike). Every
 * operation is sequentially consistent: a memory order given as the
 * last argument (Charm++'s C11 forms) is accepted and strengthened. */
#define CmiMemoryReadFence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define CmiMemoryWriteFence() __atomic_thread_fence(__ATOMIC_SEQ_CST)
#define CmiMemoryAtomicType(type) type
typedef int CmiMemoryAtomicInt;
typedef unsigned int CmiMemoryAtomicUInt;
#define CmiAtomicPick2_(a, b, name, ...) name
#define CmiAtomicPick3_(a, b, c, name, ...) name
#define CmiMemoryAtomicIncrement(...)                                                    \
  CmiAtomicPick2_(__VA_ARGS__, CmiAtomicIncOrder_, CmiAtomicInc_, )(__VA_ARGS__)
#define CmiMemoryAtomicDecrement(...)                                                    \
  CmiAtomicPick2_(__VA_ARGS__, CmiAtomicDecOrder_, CmiAtomicDec_, )(__VA_ARGS__)
#define CmiMemoryAtomicFetchAndInc(...)                                                  \
  CmiAtomicPick3_(__VA_ARGS__, CmiAtomicFetchIncOrder_, CmiAtomicFetchInc_, )(__VA_ARGS__)
#define CmiAtomicInc_(x) ((void)__atomic_fetch_add(&(x), 1, __ATOMIC_SEQ_CST))
#define CmiAtomicIncOrder_(x, order) CmiAtomicInc_(x)
#define CmiAtomicDec_(x) ((void)__atomic_fetch_sub(&(x), 1, __ATOMIC_SEQ_CST))
#define CmiAtomicDecOrder_(x, order) CmiAtomicDec_(x)
#define CmiAtomicFetchInc_(x, out) ((out) = __atomic_fetch_add(&(x), 1, __ATOMIC_SEQ_CST))
#define CmiAtomicFetchIncOrder_(x, out, order) CmiAtomicFetchInc_(x, out)

/* Messages between processes move without the program's help (each
 * network module has a progress thread that takes over whenever no PE
 * polls): a call that asks for progress has nothing to do. */
#define CmiNetworkProgress() ((void)0)
#define CmiNetworkProgressAfter(p) ((void)(p))

/* ---- the scheduler ----------------------------------------------------- */

int CsdScheduler(int maxmsgs);
void CsdScheduleForever(void);
int CsdScheduleCount(int maxmsgs);
void CsdSchedulePoll(void);
void CsdExitScheduler(void);
int CmiDeliverMsgs(int maxmsgs);
void CmiDeliverSpecificMsg(int handler);
void CsdEnqueue(void *msg);
void CsdEnqueueFifo(void *msg);
void CsdEnqueueLifo(void *msg);

/* ---- start-up and exit ------------------------------------------------- */

typedef void (*CmiStartFn)(int argc, char **argv);

/* Never returns unless initret is nonzero: the process exits with the
 * job's code once every PE has left its scheduler. */
void ConverseInit(int argc, char **argv, CmiStartFn fn, int usched, int initret);
void CmiConverseExit_(int code) CMI_NORETURN;
/* ConverseExit() or ConverseExit(code): ends the job, from any PE. */
#define ConverseExit(...) CmiConverseExit_((__VA_ARGS__ + 0))

/* ---- timers ------------------------------------------------------------ */

double CmiWallTimer(void);
double CmiCpuTimer(void);
double CmiTimer(void);

/* ---- output and aborting ----------------------------------------------- */

/* The text formatted here, then written in one piece by the runtime (lines
 * of different PEs never interleave). */
static inline char *CmiFormat_(const char *fmt, va_list args, char *small, size_t small_len) {
  va_list again;
  int n;
  char *big;
  va_copy(again, args);
  small[0] = '\0'; /* what is printed if formatting fails */
  n = vsnprintf(small, small_len, fmt, args);
  if (n < 0 || (size_t)n < small_len) {
    va_end(again);
    return small;
  }
  big = (char *)malloc((size_t)n + 1);
  if (big == NULL) {
    va_end(again);
    return small; /* cut short rather than lost */
  }
  vsnprintf(big, (size_t)n + 1, fmt, again);
  va_end(again);
  return big;
}

static inline void CmiPrintf(const char *fmt, ...) CMI_PRINTF_LIKE(1, 2);
static inline void CmiPrintf(const char *fmt, ...) {
  char small[256];
  char *text;
  va_list args;
  va_start(args, fmt);
  text = CmiFormat_(fmt, args, small, sizeof small);
  va_end(args);
  CmiPrintString_(0, text);
  if (text != small) free(text);
}

static inline void CmiError(const char *fmt, ...) CMI_PRINTF_LIKE(1, 2);
static inline void CmiError(const char *fmt, ...) {
  char small[256];
  char *text;
  va_list args;
  va_start(args, fmt);
  text = CmiFormat_(fmt, args, small, sizeof small);
  va_end(args);
  CmiPrintString_(1, text);
  if (text != small) free(text);
}

/* Ends the whole job with a non-zero exit code; the message, with the PE,
 * goes to standard error. */
static inline void CmiAbort(const char *fmt, ...) CMI_PRINTF_LIKE(1, 2) CMI_NORETURN;
static inline void CmiAbort(const char *fmt, ...) {
  char small[256];
  char *text;
  va_list args;
  va_start(args, fmt);
  text = CmiFormat_(fmt, args, small, sizeof small);
  va_end(args);
  CmiAbortString_(text);
}

/* Compiled out when CMK_OPTIMIZE is defined to a nonzero value (the
 * manual). */
#if defined(CMK_OPTIMIZE) && CMK_OPTIMIZE
#define CmiAssert(expr) ((void)0)
#else
#define CmiAssert(expr)                                                                  \
  ((expr) ? (void)0                                                                      \
          : CmiAbort("assertion `%s` failed at %s:%d", #expr, __FILE__, __LINE__))
#endif

/* ---- per-PE variables (Cpv) -------------------------------------------- */

/* One value per PE. Every PE is a thread of its process, so a Cpv is a
 * thread-local: CpvAccess is a plain access. CpvInitialize zeroes it in C
 * and constructs it (T()) in C++. */
#ifdef __cplusplus
}
#include <new>
/* The same storage as C's (a T-sized, T-aligned thread-local and an int
 * flag, under the same names), so a Cpv declared in a C file can be
 * CpvExtern'd in a C++ one and the other way round. Plain `__thread`, no
 * constructor or destructor of its own: CpvInitialize constructs the value
 * in place, and, as in Charm++, nothing destroys it. */
template <typename T>
struct CmiCpvBox_ {
  alignas(T) unsigned char bytes[sizeof(T)];
  T &get() { return *reinterpret_cast<T *>(bytes); }
};
#define CpvDeclare(t, v) __thread CmiCpvBox_<t> Cpv_##v##_; __thread int Cpv_##v##_init_
#define CpvStaticDeclare(t, v)                                                           \
  static __thread CmiCpvBox_<t> Cpv_##v##_;                                              \
  static __thread int Cpv_##v##_init_
#define CpvExtern(t, v)                                                                  \
  extern __thread CmiCpvBox_<t> Cpv_##v##_;                                              \
  extern __thread int Cpv_##v##_init_
#define CpvInitialize(t, v)                                                              \
  do {                                                                                   \
    if (!Cpv_##v##_init_) {                                                              \
      new (Cpv_##v##_.bytes) t();                                                        \
      Cpv_##v##_init_ = 1;                                                               \
    }                                                                                    \
  } while (0)
#define CpvAccess(v) (Cpv_##v##_.get())
#define CpvInitialized(v) (Cpv_##v##_init_)
extern "C" {
#else
#define CpvDeclare(t, v) __thread t Cpv_##v##_; __thread int Cpv_##v##_init_
#define CpvStaticDeclare(t, v) static __thread t Cpv_##v##_; static __thread int Cpv_##v##_init_
#define CpvExtern(t, v) extern __thread t Cpv_##v##_; extern __thread int Cpv_##v##_init_
#define CpvInitialize(t, v)                                                              \
  do {                                                                                   \
    if (!Cpv_##v##_init_) {                                                              \
      memset(&Cpv_##v##_, 0, sizeof(t));                                                 \
      Cpv_##v##_init_ = 1;                                                               \
    }                                                                                    \
  } while (0)
#define CpvAccess(v) (Cpv_##v##_)
#define CpvInitialized(v) (Cpv_##v##_init_)
#endif

/* ---- per-node variables (Csv) ------------------------------------------ */

/* One value per node: an array with an element per logical node of the
 * process (two logical nodes of one process never share a value); a PE
 * uses its node's. Zeroed in C; in C++ each element is constructed with the
 * program's static objects. CsvInitialize has nothing left to do. */
#define CMK_CSV_MAX_LOCAL_NODES 64
int CmiCsvIndex_(void);
/* The calling thread's element, asked of the runtime once per thread (and
 * per translation unit: the cache is a static thread-local here, so the
 * header defines no symbol) and kept: a PE's thread serves one PE, of one
 * node, for its life, and a user-level thread that moves to another PE
 * runs on that PE's thread, with that thread's cache. So CsvAccess costs a
 * thread-local load and an index, as CpvAccess does, not a call. */
static __thread int CmiCsvIndexOfThread_ = -1;
static inline int CmiCsvIndexCached_(void) {
  int index = CmiCsvIndexOfThread_;
  if (__builtin_expect(index < 0, 0)) index = CmiCsvIndexOfThread_ = CmiCsvIndex_();
  return index;
}
#define CsvDeclare(t, v) t Csv_##v##_[CMK_CSV_MAX_LOCAL_NODES]
#define CsvStaticDeclare(t, v) static t Csv_##v##_[CMK_CSV_MAX_LOCAL_NODES]
#define CsvExtern(t, v) extern t Csv_##v##_[CMK_CSV_MAX_LOCAL_NODES]
#define CsvInitialize(t, v) ((void)0)
#define CsvInitialized(v) 1
#define CsvAccess(v) (Csv_##v##_[CmiCsvIndexCached_()])

#ifdef __cplusplus
}
#endif

/* The rest of converse.h, by subject (each has its own extern "C"). */
#include "converse-rs/threads.h" /* Cth, Ctv, Ccd */
#include "converse-rs/sched.h"   /* CsdEnqueueGeneral and the node queue */
#include "conv-random.h"         /* Crn */
#include "converse-rs/memory.h"  /* isomalloc, struct reductions, QD, CmiRegisterHandlerEx */
#include "converse-rs/onesided.h" /* one-sided and persistent communication */
#include "converse-rs/ext.h"     /* the extensions' tag matching (Cmm) and futures */
#include "conv-cpm.h"            /* CPM's types and destinations, as Charm++'s converse.h has them */
#include "converse-rs/absent.h"  /* Charm++'s names that are not here: a use is a compile error */

#endif /* CONVERSE_RS_CONVERSE_H */
