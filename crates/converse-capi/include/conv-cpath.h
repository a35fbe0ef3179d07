/*
 * conv-cpath.h: parallel arrays of threads, CPath (the extensions manual's
 * chapter 10), over crates/converse-capi/src/ext_cpath.rs (the Rust crate
 * converse-ext).
 *
 *   arrays              CPath, CPathMakeArray, CPathMakeThread,
 *                       CPathArrayDimensions, CPathArrayDimension
 *   functions           CPathRegisterMapper, CPathRegisterThreadFn,
 *                       CPathRegisterReducer (CPathMapFn, CPathThreadFn,
 *                       CPathReduceFn), CPathModuleInit
 *   messages            CPathSend, CPathRecv, CPathMsgDecodeBytes,
 *                       CPathMsgFree
 *   reductions          CPathReduce, CPathMsgDecodeReduction
 *   clauses             CPATH_DEST, CPATH_OVER, CPATH_TAG, CPATH_TAGS,
 *                       CPATH_TAGVEC, CPATH_BYTES, CPATH_REDUCER,
 *                       CPATH_END; CPATH_ALL (any index), CPATH_WILD (any
 *                       tag, in CPathRecv)
 *
 * The clause lists follow the manual's grammar: CPATH_TAGS lists tags
 * ended by a 0 (so a tag 0 goes by CPATH_TAG or CPATH_TAGVEC); several tag
 * clauses append. CPathSend starts with its CPATH_DEST clause, CPathReduce
 * with its CPATH_OVER clause; the other clauses come in any order, then
 * CPATH_END. A malformed list ends the job naming the call.
 *
 * Register the same mappers, thread functions and reducers in the same
 * order on every PE (the first registration sets CPath up on the PE, as
 * CPathModuleInit does); mappers must give the same answer on every PE.
 * CPathRecv blocks the calling element's thread (only an element's thread
 * receives); messages to elements wait for them in their mailboxes.
 */
#ifndef CONVERSE_RS_CONV_CPATH_H
#define CONVERSE_RS_CONV_CPATH_H

#include <stdarg.h>

#include "converse.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CPATH_MAX_DIMS 13
#define CPATH_MAX_TAGS 256

/* An array descriptor: plain data, copied freely (into messages too). */
typedef struct CPath {
  int creator;                 /* the PE that made the array */
  int startfn;                 /* its thread function's number */
  int mapfn;                   /* its mapper's number */
  int nsizes;                  /* its number of dimensions */
  int sizes[CPATH_MAX_DIMS];   /* its dimensions */
  unsigned int desc_len_;      /* the runtime's */
  unsigned long long seqno;    /* its number on creator */
  unsigned char desc_[96];     /* the runtime's copy of the descriptor */
} CPath;

static inline int CPathArrayDimensions(const CPath *path) { return path->nsizes; }
static inline int CPathArrayDimension(const CPath *path, int n) { return path->sizes[n]; }

/* The processor of the element at indices. */
typedef unsigned int (*CPathMapFn)(CPath *path, int *indices);
/* What each element's thread runs: a copy of the descriptor, its indices. */
typedef void (*CPathThreadFn)(CPath *self, int *indices);
/* Combines the vecsize values of data2 into those of data1 (data2 is
 * read-only). */
typedef void (*CPathReduceFn)(int vecsize, void *data1, void *data2);

#define CPATH_ALL (-1)
#define CPATH_WILD (-1)
#define CPATH_END 0
#define CPATH_DEST 1
#define CPATH_TAG 3
#define CPATH_TAGS 4
#define CPATH_TAGVEC 5
#define CPATH_BYTES 6
#define CPATH_OVER 7
#define CPATH_REDUCER 8

void CPathModuleInit(void);
/* Each returns the function's number, for CPathMakeArray or CPathReduce.
 * The manual's prototypes take a void *: any function pointer goes. */
int CPathRegisterMapper(CPathMapFn mapfn);
int CPathRegisterThreadFn(CPathThreadFn threadfn);
int CPathRegisterReducer(CPathReduceFn fn);
#define CPathRegisterMapper(f) CPathRegisterMapper((CPathMapFn)(void (*)(void))(f))
#define CPathRegisterThreadFn(f) CPathRegisterThreadFn((CPathThreadFn)(void (*)(void))(f))
#define CPathRegisterReducer(f) CPathRegisterReducer((CPathReduceFn)(void (*)(void))(f))

/* A single thread on PE pe (no dimensions). */
void CPathMakeThread(CPath *path, int startfn, int pe);

/* The message functions (a CPath message is opaque). */
void CPathMsgDecodeBytes(void *msg, int *len, void *bytes);
void CPathMsgDecodeReduction(void *msg, int *vecsize, int *eltsize, void *bytes);
void CPathMsgFree(void *msg);

/* What the inline functions below call with their clauses read. */
void CPathMakeArray_(CPath *path, int startfn, int mapfn, int ndims, const int *dims);
void CPathSend_(const CPath *path, const int *indices, int ntags, const int *tags, int nbytes,
                const void *bytes);
void *CPathRecv_(int ntags, const int *tags);
void CPathReduce_(const CPath *over, const int *overidx, int ntags, const int *tags, int reducer,
                  int vecsize, int eltsize, const void *data, const CPath *dest,
                  const int *destidx);

typedef struct CPathTags_ {
  int n;
  int tags[CPATH_MAX_TAGS];
} CPathTags_;

static inline void CPathAddTag_(const char *call, CPathTags_ *t, int tag) {
  if (t->n == CPATH_MAX_TAGS) CmiAbort("%s: more than %d tags", call, CPATH_MAX_TAGS);
  t->tags[t->n++] = tag;
}

/* Reads the rest of a tag clause that starts with key. */
static inline void CPathTagClause_(const char *call, int key, va_list *ap, CPathTags_ *t) {
  int tag, n, i;
  const int *v;
  if (key == CPATH_TAG) {
    CPathAddTag_(call, t, va_arg(*ap, int));
  } else if (key == CPATH_TAGS) {
    while ((tag = va_arg(*ap, int)) != 0) CPathAddTag_(call, t, tag);
  } else {
    n = va_arg(*ap, int);
    v = va_arg(*ap, const int *);
    for (i = 0; i < n; i++) CPathAddTag_(call, t, v[i]);
  }
}

/* Reads a descriptor and its indices (one per dimension). */
static inline CPath *CPathPattern_(const char *call, va_list *ap, int *indices) {
  CPath *path = va_arg(*ap, CPath *);
  int i;
  if (path == NULL) CmiAbort("%s: a null CPath", call);
  if (path->nsizes < 0 || path->nsizes > CPATH_MAX_DIMS)
    CmiAbort("%s: a CPath of %d dimensions (not made by CPathMakeArray?)", call, path->nsizes);
  for (i = 0; i < path->nsizes; i++) indices[i] = va_arg(*ap, int);
  return path;
}

/* CPathMakeArray(&path, threadfn, mapfn, dim, dim, ..., 0): initiates the
 * creation of an array of threads; fills in *path. */
static inline void CPathMakeArray(CPath *path, int threadfn, int mapfn, ...) {
  int dims[CPATH_MAX_DIMS], n = 0, d;
  va_list ap;
  va_start(ap, mapfn);
  while ((d = va_arg(ap, int)) != 0) {
    if (n == CPATH_MAX_DIMS) CmiAbort("CPathMakeArray: more than %d dimensions", CPATH_MAX_DIMS);
    dims[n++] = d;
  }
  va_end(ap);
  CPathMakeArray_(path, threadfn, mapfn, n, dims);
}

/* CPathSend(CPATH_DEST, &path, i, j, ..., tag-clause, CPATH_BYTES, n, buf,
 *           CPATH_END): an index may be CPATH_ALL (a multicast). */
static inline void CPathSend(int key, ...) {
  CPath *path;
  int indices[CPATH_MAX_DIMS], nbytes = 0;
  const void *bytes = NULL;
  CPathTags_ t;
  va_list ap;
  t.n = 0;
  if (key != CPATH_DEST) CmiAbort("CPathSend: the arguments start with CPATH_DEST, not %d", key);
  va_start(ap, key);
  path = CPathPattern_("CPathSend", &ap, indices);
  while ((key = va_arg(ap, int)) != CPATH_END) {
    switch (key) {
    case CPATH_TAG:
    case CPATH_TAGS:
    case CPATH_TAGVEC:
      CPathTagClause_("CPathSend", key, &ap, &t);
      break;
    case CPATH_BYTES:
      nbytes = va_arg(ap, int);
      bytes = va_arg(ap, const void *);
      break;
    default:
      CmiAbort("CPathSend: clause %d is none of CPATH_TAG, _TAGS, _TAGVEC, _BYTES, _END", key);
    }
  }
  va_end(ap);
  CPathSend_(path, indices, t.n, t.tags, nbytes, bytes);
}

/* CPathRecv(tag-clause, CPATH_END): waits for the oldest message whose tags
 * match (CPATH_WILD matches any tag); free it with CPathMsgFree. */
static inline void *CPathRecv(int key, ...) {
  CPathTags_ t;
  va_list ap;
  t.n = 0;
  va_start(ap, key);
  for (; key != CPATH_END; key = va_arg(ap, int)) {
    if (key != CPATH_TAG && key != CPATH_TAGS && key != CPATH_TAGVEC)
      CmiAbort("CPathRecv: clause %d is none of CPATH_TAG, _TAGS, _TAGVEC, _END", key);
    CPathTagClause_("CPathRecv", key, &ap, &t);
  }
  va_end(ap);
  return CPathRecv_(t.n, t.tags);
}

/* CPathReduce(CPATH_OVER, &path, i, CPATH_ALL, ..., tag-clause,
 *             CPATH_REDUCER, fn, CPATH_BYTES, vecsize, eltsize, data,
 *             CPATH_DEST, &path, i, j, ..., CPATH_END): the calling
 * element's contribution; the result goes to the destination as a message
 * with the same tags. */
static inline void CPathReduce(int key, ...) {
  CPath *over = NULL, *dest = NULL;
  int overidx[CPATH_MAX_DIMS], destidx[CPATH_MAX_DIMS];
  int reducer = -1, vecsize = -1, eltsize = 0;
  const void *data = NULL;
  CPathTags_ t;
  va_list ap;
  t.n = 0;
  if (key != CPATH_OVER) CmiAbort("CPathReduce: the arguments start with CPATH_OVER, not %d", key);
  va_start(ap, key);
  over = CPathPattern_("CPathReduce", &ap, overidx);
  while ((key = va_arg(ap, int)) != CPATH_END) {
    switch (key) {
    case CPATH_TAG:
    case CPATH_TAGS:
    case CPATH_TAGVEC:
      CPathTagClause_("CPathReduce", key, &ap, &t);
      break;
    case CPATH_REDUCER:
      reducer = va_arg(ap, int);
      break;
    case CPATH_BYTES:
      vecsize = va_arg(ap, int);
      eltsize = va_arg(ap, int);
      data = va_arg(ap, const void *);
      break;
    case CPATH_DEST:
      dest = CPathPattern_("CPathReduce", &ap, destidx);
      break;
    default:
      CmiAbort("CPathReduce: clause %d is none of CPATH_TAG, _TAGS, _TAGVEC, _REDUCER, "
               "_BYTES, _DEST, _END",
               key);
    }
  }
  va_end(ap);
  if (reducer < 0) CmiAbort("CPathReduce: no CPATH_REDUCER clause");
  if (vecsize < 0) CmiAbort("CPathReduce: no CPATH_BYTES clause");
  if (dest == NULL) CmiAbort("CPathReduce: no CPATH_DEST clause");
  CPathReduce_(over, overidx, t.n, t.tags, reducer, vecsize, eltsize, data, dest, destidx);
}

#ifdef __cplusplus
}
#endif

#endif /* CONVERSE_RS_CONV_CPATH_H */
