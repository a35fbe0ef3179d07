/*
 * conv-cpm.h: Converse parameter marshalling (CPM) for C and C++, over
 * converse-rs (crates/converse-capi/src/cpm.rs, and the `cpm` scanner:
 * crates/converse-capi/src/bin/cpm.rs). The Converse Extensions manual,
 * chapter 6, with Charm++'s conventions where the two differ.
 *
 *   invokables          CpmInvokable, and from `convcc -gen-cpm F.c`, in
 *                       F.cpm.h: Cpm_f, CpmIndex_f, CpmInitializeThisModule
 *   destinations        CpmSend, CpmEnqueue, CpmEnqueueFIFO, _LIFO, _IFIFO,
 *                       _ILIFO, _BFIFO, _BLIFO, _LFIFO, _LLIFO,
 *                       CpmMakeThread, CpmMakeThreadSize; CpmPE, CpmALL,
 *                       CpmOTHERS (CPM_ALL, CPM_OTHERS)
 *   start-up            CpmModuleInit (on every PE, before any destination
 *                       but CpmSend is used)
 *   types               CpmDeclareSimple, CpmDeclarePointer; built in:
 *                       char short int long float double CpmDim (simple),
 *                       CpmStr (pointer), Cfuture (simple)
 *   new destinations    struct CpmDestinationStruct, CpmSender, CpmEnv,
 *                       CpmAlign, struct CpmHeader
 *
 * How a program uses it (charmc's way): `convcc -gen-cpm F.c` writes
 * F.cpm.h beside F.c; F.c includes it after its own types and their pack
 * hooks, calls CpmModuleInit() and CpmInitializeThisModule() on every PE,
 * and calls the launcher Cpm_f(destination, args...) of each CpmInvokable f.
 *
 * Pack hooks are called as Charm++'s scanner calls them (the manual's `&v`
 * is not what real code defines):
 *   simple T:   CpmPack_T(v) and CpmUnpack_T(v), v an lvalue of type T, as
 *               statements (macros may convert v in place; functions
 *               taking T by value see a copy);
 *   pointer T:  CpmPtrSize_T(v) (bytes needed), CpmPtrPack_T(p, v) (p is
 *               the space in the message, cast to T), CpmPtrUnpack_T(p)
 *               (a statement; the value the function receives is p, the
 *               data in the message; what the hook returns is not used),
 *               and CpmPtrFree_T(v) after the function returns.
 * An array argument `T *a` follows a `CpmDim n` argument: n elements go.
 * Every argument lives in the message: the function may not keep a pointer
 * argument (or a CpmStr) past its return.
 *
 * A destination is valid until the next call of the same destination
 * function on the same PE (it lives in a per-PE slot, as in Charm++):
 * Cpm_f(CpmSend(3), x) is the usual form. A PE number that is neither a
 * PE of the job nor CpmALL/CpmOTHERS, a negative CpmDim, a message larger
 * than 2^31 - 1 bytes, or a destination used before CpmModuleInit ends
 * the job naming the call.
 */
#ifndef CONVERSE_RS_CONV_CPM_H
#define CONVERSE_RS_CONV_CPM_H

#include <limits.h>
#include <stddef.h>
#include <string.h>

#include "converse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* ---- destinations ------------------------------------------------------- */

/* The destination a launcher gets: any structure whose first two fields
 * are the send function and the envelope size (the manual's 6.3). The
 * launcher reserves `envsize` bytes of envelope in the message (CpmEnv),
 * sets the message's handler to the function's receive stub, and returns
 * what `sendfn(dest, msglen, msg)` returns. The send function owns the
 * message: it sends it (an AndFree send), or passes it on. */
typedef struct CpmDestinationStruct *CpmDestination;
typedef void *(*CpmSender)(CpmDestination dest, int msglen, void *msg);
struct CpmDestinationStruct {
  CpmSender sendfn;
  int envsize;
};

#define CpmPE(n) (n)
#define CpmALL (-1)    /* every PE */
#define CpmOTHERS (-2) /* every PE but the caller */
#define CPM_ALL CpmALL /* the manual's spelling */
#define CPM_OTHERS CpmOTHERS

/* Registers the built-in destinations' handlers: once on every PE, at the
 * same place of its handler registrations (calling it again does
 * nothing). */
void CpmModuleInit(void);

/* The message goes straight to its handler on `pe`. */
CpmDestination CpmSend(int pe);
/* On `pe`, the message goes through the scheduler's queue with strategy
 * `queueing` (a CQS_QUEUEING_* constant) and priority (priobits, prioptr)
 * as CsdEnqueueGeneral takes them; the priority is copied here. */
CpmDestination CpmEnqueue(int pe, int queueing, int priobits, unsigned int *prioptr);
CpmDestination CpmEnqueueFIFO(int pe);
CpmDestination CpmEnqueueLIFO(int pe);
CpmDestination CpmEnqueueIFIFO(int pe, int prio);
CpmDestination CpmEnqueueILIFO(int pe, int prio);
CpmDestination CpmEnqueueBFIFO(int pe, int priobits, unsigned int *prioptr);
CpmDestination CpmEnqueueBLIFO(int pe, int priobits, unsigned int *prioptr);
/* prioptr points at one 64-bit integer (priobits is kept, not read). */
CpmDestination CpmEnqueueLFIFO(int pe, int priobits, unsigned int *prioptr);
CpmDestination CpmEnqueueLLIFO(int pe, int priobits, unsigned int *prioptr);
/* On `pe`, a new thread (CthCreate, awakened FIFO) calls the function; it
 * ends when the function returns. Size: its stack in bytes (0: the
 * default). */
CpmDestination CpmMakeThread(int pe);
CpmDestination CpmMakeThreadSize(int pe, int size);

/* ---- the messages ------------------------------------------------------- */

/* Every CPM message starts so: the Converse header, then where the
 * envelope is (bytes from the message's start). */
struct CpmHeader {
  char convcore[CmiMsgHeaderSizeBytes];
  int envpos;
};
/* The envelope of a CPM message: the destination's `envsize` bytes,
 * 16-aligned, for its send function and handlers. */
#define CpmEnv(msg) \
  ((void *)(((char *)(void *)(msg)) + ((struct CpmHeader *)(void *)(msg))->envpos))
#define CpmAlign(val, type) (((val) + sizeof(type) - 1) & ~(sizeof(type) - 1))

/* ---- declarations the scanner reads ------------------------------------- */

/* Each expands to C with no effect that the scanner recognises after the
 * preprocessor: `CpmInvokable f(...)` is `void f(...)`. */
typedef void CpmInvokable;
typedef int CpmDeclareSimple1;
typedef int CpmDeclarePointer1;
#define CpmDeclareSimple(c) typedef CpmDeclareSimple1 CpmType_##c
#define CpmDeclarePointer(c) typedef CpmDeclarePointer1 CpmType_##c

/* ---- the built-in types ------------------------------------------------- */

/* Every PE of a job runs the same program on the same kind of machine: the
 * built-in conversions do nothing. They are expressions (usable where a
 * statement or a comma expression is). */
CpmDeclareSimple(char);
#define CpmPack_char(v) ((void)(v))
#define CpmUnpack_char(v) ((void)(v))
CpmDeclareSimple(short);
#define CpmPack_short(v) ((void)(v))
#define CpmUnpack_short(v) ((void)(v))
CpmDeclareSimple(int);
#define CpmPack_int(v) ((void)(v))
#define CpmUnpack_int(v) ((void)(v))
CpmDeclareSimple(long);
#define CpmPack_long(v) ((void)(v))
#define CpmUnpack_long(v) ((void)(v))
CpmDeclareSimple(float);
#define CpmPack_float(v) ((void)(v))
#define CpmUnpack_float(v) ((void)(v))
CpmDeclareSimple(double);
#define CpmPack_double(v) ((void)(v))
#define CpmUnpack_double(v) ((void)(v))

/* An array's length: the argument after it is `T *`. */
typedef int CpmDim;
CpmDeclareSimple(CpmDim);
#define CpmPack_CpmDim(v) ((void)(v))
#define CpmUnpack_CpmDim(v) ((void)(v))

/* A future's handle (Charm++ declares it simple: it names its PE). */
CpmDeclareSimple(Cfuture);
#define CpmPack_Cfuture(v) ((void)(v))
#define CpmUnpack_Cfuture(v) ((void)(v))

/* A NUL-terminated string (not NULL). */
typedef char *CpmStr;
CpmDeclarePointer(CpmStr);
#define CpmPtrSize_CpmStr(v) (strlen(v) + 1)
#define CpmPtrPack_CpmStr(p, v) (strcpy((p), (v)))
#define CpmPtrUnpack_CpmStr(v) ((void)(v))
#define CpmPtrFree_CpmStr(v) ((void)(v))

/* ---- what generated code uses (not for programs) ------------------------ */

#if defined(__GNUC__) || defined(__clang__)
#define CPM_UNUSED_ __attribute__((unused))
#else
#define CPM_UNUSED_
#endif

/* Offsets and sizes in a message: multiples of 16. */
#define CpmRound_(n) (((size_t)(n) + (size_t)15) & ~(size_t)15)

/* The envelope size of `dest`, checked. */
static inline size_t CpmEnvSize_(CpmDestination dest, const char *launcher) {
  if (dest == NULL) CmiAbort("%s: the destination is NULL", launcher);
  if (dest->sendfn == NULL) CmiAbort("%s: the destination has no send function", launcher);
  if (dest->envsize < 0) {
    CmiAbort("%s: the destination's envelope size %d is negative", launcher, dest->envsize);
  }
  return (size_t)dest->envsize;
}

/* The length of array argument `arg` (the CpmDim before it), checked. */
static inline size_t CpmCount_(int n, const char *launcher, int arg) {
  if (n < 0) {
    CmiAbort("%s: argument %d (the CpmDim of argument %d) is %d", launcher, arg - 1, arg, n);
  }
  return (size_t)n;
}

/* A message of `size` bytes, zeroed. */
static inline char *CpmNewMsg_(size_t size, const char *launcher) {
  if (size > (size_t)INT_MAX) {
    CmiAbort("%s: a message of %lu bytes is larger than a message can be", launcher,
             (unsigned long)size);
  }
  return (char *)CmiAlloc((int)size);
}

/* A launcher called on a PE that did not register the stubs. */
static inline void CpmNotInitialized_(const char *launcher) {
  CmiAbort("%s: CpmInitializeThisModule() of its file was not called on PE %d", launcher,
           CmiMyPe());
}

#ifdef __cplusplus
}
#endif

#endif /* CONVERSE_RS_CONV_CPM_H */
