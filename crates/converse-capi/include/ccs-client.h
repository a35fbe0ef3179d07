/*
 * ccs-client.h: the C client library of the Converse Client-Server
 * interface (CCS), over converse-rs's Rust client (crates/converse-capi,
 * module `ccs_client`, over crate `converse-ccs`). For any C or C++
 * program, Converse job or not: build it with `convcc` (no ConverseInit
 * needed).
 *
 * Every request is a TCP connection of its own; its reply is read with
 * CcsRecvResponse or CcsRecvResponseMsg. A new request drops the unread
 * reply of the one before. All routines returning int return -1 on failure
 * (a PE out of range, a connection refused or closed, a reply that did not
 * come within the timeout, a server that closed without replying).
 *
 * One CcsServer is used by one thread at a time.
 */
#ifndef CONVERSE_RS_CCS_CLIENT_H
#define CONVERSE_RS_CCS_CLIENT_H

#ifdef __cplusplus
extern "C" {
#endif

/* An IPv4 address, most significant byte first (Charm++'s sockRoutines.h). */
#ifndef CONVERSE_RS_SKT_IP_T
#define CONVERSE_RS_SKT_IP_T
typedef struct {
  unsigned char data[4];
} skt_ip_t;
#endif

#ifdef __cplusplus
}
#endif

/* CcsSec_secretKey and CCS_AUTH_makeSecretKey, as Charm++'s client
 * header brings them. */
#include "ccs-auth.h"

#ifdef __cplusplus
extern "C" {
#endif

/* A connection to one CCS server. Declare it anywhere (the stack is fine);
 * CcsConnect fills every field; CcsFinalize releases what it holds. The
 * fields are for reading. */
typedef struct CcsServer {
  char hostAddr[128];     /* the host as given to CcsConnect (cut to fit) */
  skt_ip_t hostIP;        /* the IPv4 address connected to (zero for IPv6) */
  unsigned int hostPort;  /* its port */
  int isAuth;             /* 1: requests are authenticated with a key */
  int level;              /* the security level (0, as in Charm++) */
  int numNodes;           /* the job's nodes */
  int numPes;             /* the job's PEs */
  int *numProcs;          /* each node's PE count (numNodes of them) */
  void *client_;          /* the Rust client; null when not connected */
} CcsServer;

/* Connects to the server at `host` (a name or dotted IPv4) and `port`, and
 * learns the job's layout. With a key, authenticates at security level 0
 * with it. Waits up to 120 s (WithTimeout: `timeout` seconds; 0 or less:
 * the system's limit) to connect and for the layout. Returns 0, or -1 after
 * a message on stderr. */
int CcsConnect(CcsServer *svr, const char *host, int port, const CcsSec_secretKey *key);
int CcsConnectWithTimeout(CcsServer *svr, const char *host, int port,
                          const CcsSec_secretKey *key, int timeout);
int CcsConnectIp(CcsServer *svr, skt_ip_t ip, int port, const CcsSec_secretKey *key);
int CcsConnectIpWithTimeout(CcsServer *svr, skt_ip_t ip, int port,
                            const CcsSec_secretKey *key, int timeout);

/* The job's layout, as CmiNumNodes, CmiNumPes, CmiNodeFirst and
 * CmiNodeSize tell it; -1 for a node out of range or a server not
 * connected. */
int CcsNumNodes(CcsServer *svr);
int CcsNumPes(CcsServer *svr);
int CcsNodeFirst(CcsServer *svr, int node);
int CcsNodeSize(CcsServer *svr, int node);

/* Asks PE `pe` (all PEs; the `npes` PEs at `pes`) to run the handler
 * registered as `hdlrID` on the `size` bytes at `msg`. Broadcast and
 * multicast replies come back merged into one. Returns 0 or -1. Each
 * request connects within 120 s (WithTimeout: `timeout` seconds; 0 or
 * less: the system's limit). */
int CcsSendRequest(CcsServer *svr, const char *hdlrID, int pe, int size, const void *msg);
int CcsSendRequestWithTimeout(CcsServer *svr, const char *hdlrID, int pe, int size,
                              const void *msg, int timeout);
int CcsSendBroadcastRequest(CcsServer *svr, const char *hdlrID, int size, const void *msg);
int CcsSendBroadcastRequestWithTimeout(CcsServer *svr, const char *hdlrID, int size,
                                       const void *msg, int timeout);
int CcsSendMulticastRequest(CcsServer *svr, const char *hdlrID, int npes, int *pes, int size,
                            const void *msg);
int CcsSendMulticastRequestWithTimeout(CcsServer *svr, const char *hdlrID, int npes, int *pes,
                                       int size, const void *msg, int timeout);

/* Waits up to `timeout` seconds (negative: as long as it takes) for the
 * reply to the latest request and returns its length, or -1. In place:
 * into the `maxsize` bytes at `recvBuffer` (a longer reply is -1, and stays
 * unread). Msg: into a buffer of its own at *newBuf (length at *retSize),
 * which the caller frees with free(). After a -1 for a timeout the reply
 * may still be received by a later call. */
int CcsRecvResponse(CcsServer *svr, int maxsize, void *recvBuffer, int timeout);
int CcsRecvResponseMsg(CcsServer *svr, int *retSize, void **newBuf, int timeout);

/* 1 if the reply to the latest request has begun to arrive (or the server
 * closed without one), 0 if not yet, -1 with no request waiting. */
int CcsProbe(CcsServer *svr);
/* As CcsProbe, waiting up to timeoutMs milliseconds for the reply to begin
 * to arrive (a negative timeoutMs: as long as it takes). */
int CcsProbeTimeout(CcsServer *svr, int timeoutMs);
/* The latest request's reply is not wanted: closes its connection (the
 * server's reply, if it sends one, is dropped). Returns 0. */
int CcsNoResponse(CcsServer *svr);

/* Closes any connection and releases what CcsConnect allocated; `svr` may
 * then be connected again. */
void CcsFinalize(CcsServer *svr);

#ifdef __cplusplus
}
#endif

#include "converse-rs/absent.h" /* Charm++'s names that are not here */

#endif
