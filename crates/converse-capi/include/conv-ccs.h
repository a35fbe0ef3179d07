/*
 * conv-ccs.h: the server side of the Converse Client-Server interface (CCS)
 * for C and C++ Converse programs, over converse-rs (crates/converse-capi,
 * module `ccs`). A job runs a CCS server with `++server` (any free port) or
 * `++server-port N`, and prints "ccs: Server IP = ..., Server port = N $".
 *
 * What is here (the Converse manual's and Charm++'s names, same meanings):
 *   handlers        CcsRegisterHandler, CcsRegisterHandlerFn, CcsUseHandler,
 *                   CcsSetMergeFn and the merges CcsMerge_*
 *   in a handler    CcsEnabled, CcsIsRemoteRequest, CcsCallerId,
 *                   CcsSendReply, CcsSendReplyNoError, CcsNoReply,
 *                   CcsDelayReply
 *   later           CcsSendDelayedReply, CcsNoDelayedReply (a PE of the
 *                   node that delayed the reply)
 *   types           skt_ip_t, ChMessageInt_t (ChMessageInt,
 *                   ChMessageInt_new), CcsSecAttr, CcsImplHeader,
 *                   CcsDelayedReply, CcsHandlerFn
 *
 * A CCS handler registered with CcsRegisterHandler is a Converse handler: it
 * receives the request as a message it owns (the data starts
 * CmiMsgHeaderSizeBytes into it) and frees it with CmiFree. Register CCS
 * handlers on every PE, in the same order, like any handler.
 *
 * A handler that returns without replying (or delaying its reply) answers
 * with an empty reply. CcsSendReply, CcsNoReply and CcsDelayReply answer the
 * request being handled once; a second answer ends the job naming the call.
 */
#ifndef CONVERSE_RS_CONV_CCS_H
#define CONVERSE_RS_CONV_CCS_H

#include <stdint.h>

#include "converse.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CMK_CCS_VERSION "2"
#ifndef CMK_CCS_AVAILABLE
#define CMK_CCS_AVAILABLE 1
#endif
/* The bytes before a message's data (Charm++'s name). */
#ifndef CmiReservedHeaderSize
#define CmiReservedHeaderSize CmiMsgHeaderSizeBytes
#endif

/* An IPv4 address, most significant byte first (Charm++'s sockRoutines.h). */
#ifndef CONVERSE_RS_SKT_IP_T
#define CONVERSE_RS_SKT_IP_T
typedef struct {
  unsigned char data[4];
} skt_ip_t;
#endif

/* A 4-byte big-endian (network order) integer, as the CCS wire carries it. */
#ifndef CONVERSE_RS_CHMESSAGEINT_T
#define CONVERSE_RS_CHMESSAGEINT_T
typedef struct {
  unsigned char data[4];
} ChMessageInt_t;

static inline ChMessageInt_t ChMessageInt_new(unsigned int src) {
  ChMessageInt_t r;
  r.data[0] = (unsigned char)(src >> 24);
  r.data[1] = (unsigned char)(src >> 16);
  r.data[2] = (unsigned char)(src >> 8);
  r.data[3] = (unsigned char)src;
  return r;
}

static inline unsigned int ChMessageInt(ChMessageInt_t src) {
  return ((unsigned int)src.data[0] << 24) | ((unsigned int)src.data[1] << 16) |
         ((unsigned int)src.data[2] << 8) | (unsigned int)src.data[3];
}
#endif

/* ---- merge functions' view of a reply ------------------------------------ */

/* The longest handler name, with its terminating NUL. */
#define CCS_MAXHANDLER 32

/* Charm++'s layout, kept so that merge functions written for Charm++ read
 * replies unchanged. Only `auth` and `level` of it are ever filled (zero). */
typedef struct {
  skt_ip_t ip;
  ChMessageInt_t port;
  ChMessageInt_t replySalt;
  unsigned char auth;
  unsigned char level;
} CcsSecAttr;

/* What a merge function finds CmiReservedHeaderSize bytes into each reply it
 * is given, followed by `len` bytes of reply data. Filled in: `handler` (the
 * name the merge was set for) and `len` (ChMessageInt); the rest is zero. */
typedef struct {
  CcsSecAttr attr;
  char handler[CCS_MAXHANDLER];
  ChMessageInt_t pe;
  ChMessageInt_t replyFd;
  ChMessageInt_t len;
} CcsImplHeader;

/* The runtime assumes this layout (58 bytes, no padding). */
typedef char CcsImplHeader_is_58_bytes_[(sizeof(CcsImplHeader) == 58) ? 1 : -1];

/* ---- registering handlers ------------------------------------------------ */

/* Registers `fn` as a Converse handler and makes it callable by CCS clients
 * as `id` (shorter than CCS_MAXHANDLER bytes). Returns its handler index. */
int CcsRegisterHandler(const char *id, CmiHandler fn);

/* A handler called with the request data as a read-only buffer of `reqLen`
 * bytes (valid during the call), and `userPtr`. */
typedef void (*CcsHandlerFn)(void *userPtr, int reqLen, const void *reqData);
/* Registers `fn` for CCS requests to `id`, called with `userPtr`. Returns
 * its handler index. */
int CcsRegisterHandlerFn(const char *id, CcsHandlerFn fn, void *userPtr);

/* Makes the existing Converse handler `hdlr` callable as `id`. */
void CcsUseHandler(const char *id, int hdlr);

/* How the replies of a broadcast or multicast request to `name` (registered
 * first) become the one reply its client gets. The merge function runs in
 * the process of PE 0 on the CCS server's thread, not on a PE: it may use
 * CmiAlloc, CmiFree, CmiSize and plain C, not CmiMyPe or sends. It is
 * called once per request answered by two PEs or more, with every reply as
 * a message laid out as [CmiReservedHeaderSize][CcsImplHeader][data]:
 * `local` is the first PE's (in the order of the request's PE list),
 * `remote` the `count` others in order, `*size` the size of `local`. It
 * returns the merged message (whose CcsImplHeader `len` says its data
 * length): `local`, one of `remote`, or a CmiAlloc'd buffer (then it frees
 * `local`, as Charm++'s merges do). The runtime frees the remote buffers
 * and the result. */
void CcsSetMergeFn(const char *name, CmiReduceMergeFn newMerge);

/* Charm++'s merges. concat: the replies' data one after another. The others
 * combine replies of equal length element by element, as native-endian
 * numbers of the type named (logical_* and bitvec_* over int). */
void *CcsMerge_concat(int *size, void *local, void **remote, int n);
void *CcsMerge_logical_and(int *size, void *local, void **remote, int n);
void *CcsMerge_logical_or(int *size, void *local, void **remote, int n);
void *CcsMerge_bitvec_and(int *size, void *local, void **remote, int n);
void *CcsMerge_bitvec_or(int *size, void *local, void **remote, int n);
void *CcsMerge_sum_int(int *size, void *local, void **remote, int n);
void *CcsMerge_sum_float(int *size, void *local, void **remote, int n);
void *CcsMerge_sum_double(int *size, void *local, void **remote, int n);
void *CcsMerge_product_int(int *size, void *local, void **remote, int n);
void *CcsMerge_product_float(int *size, void *local, void **remote, int n);
void *CcsMerge_product_double(int *size, void *local, void **remote, int n);
void *CcsMerge_max_int(int *size, void *local, void **remote, int n);
void *CcsMerge_max_float(int *size, void *local, void **remote, int n);
void *CcsMerge_max_double(int *size, void *local, void **remote, int n);
void *CcsMerge_min_int(int *size, void *local, void **remote, int n);
void *CcsMerge_min_float(int *size, void *local, void **remote, int n);
void *CcsMerge_min_double(int *size, void *local, void **remote, int n);

/* ---- in a handler ---------------------------------------------------------- */

/* 1: this build has the CCS server (whether this job runs one is
 * `++server`'s business). */
int CcsEnabled(void);
/* 1 while a handler runs for a CCS request, 0 for an ordinary message. */
int CcsIsRemoteRequest(void);
/* The client's IPv4 address and TCP port; in a CCS handler only (elsewhere
 * the job ends naming the call). */
void CcsCallerId(skt_ip_t *pip, unsigned int *pport);
/* Sends `size` bytes at `reply` to the client. For a broadcast or multicast
 * request every PE's handler replies and the replies are merged. */
void CcsSendReply(int size, const void *reply);
/* As CcsSendReply where a reply is owed (a CCS handler whose request is not
 * answered yet); elsewhere nothing. */
void CcsSendReplyNoError(int size, const void *reply);
/* Closes the client's connection without a reply; where no reply is owed
 * (outside a CCS handler, or once answered) it does nothing. */
void CcsNoReply(void);

/* A reply owed to a client, to be sent later by any PE of the node (the
 * process) that delayed it, as with Charm++ (whose CcsDelayedReply points
 * into that process's memory). A value: copy it into messages to those PEs
 * freely. Each one is answered once, with CcsSendDelayedReply or
 * CcsNoDelayedReply, which consume it (the runtime keeps the reply in a
 * table under `id` until then; answering it again, or from another node,
 * ends the job naming the call). One never answered leaves its client
 * waiting until the server's reply timeout (`++server-reply-timeout`). */
typedef struct CcsDelayedReply_struct {
  uint64_t id;
} CcsDelayedReply;

CcsDelayedReply CcsDelayReply(void);
void CcsSendDelayedReply(CcsDelayedReply d, int size, const void *reply);
void CcsNoDelayedReply(CcsDelayedReply d);

#ifdef __cplusplus
}
#endif

#endif
