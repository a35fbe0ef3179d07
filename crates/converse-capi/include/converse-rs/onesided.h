/*
 * converse-rs/onesided.h: one-sided communication (RDMA get and put, global
 * pointers) and persistent communication. Included by converse.h; over
 * crates/converse-capi/src/rdma.rs and persistent.rs.
 *
 * What is here (the Converse manual's names, same meanings):
 *   registration        CmiRegisterMemory, CmiUnRegisterMemory, CmiDMAAlloc
 *   get and put         CmiPut, CmiGet, CmiWaitTest, CmiPutCb, CmiGetCb,
 *                       CmiRdmaCallbackFn
 *   global pointers     GlobalPtr, CmiGptrCreate, CmiGptrDref, CmiSyncGet
 *                       (the CMI chapter's; its CmiGet and CmiPut on a
 *                       GlobalPtr are not here: C cannot have two CmiPut)
 *   persistent          PersistentHandle, PersistentReq,
 *                       CmiCreatePersistent, CmiCreateReceiverPersistent,
 *                       CmiRegisterReceivePersistent,
 *                       CmiUsePersistentHandle, CmiDestroyPersistent,
 *                       CmiDestroyAllPersistent
 *
 * One-sided operations. The calling PE is sourceId (any other ends the
 * job); Saddr is its memory. Taddr is an address in PE targetId's process,
 * sent by that process in a message as a plain pointer value; the bytes
 * must lie inside one range registered there (CmiRegisterMemory,
 * CmiDMAAlloc, CmiGptrCreate). The target refuses any other, and the job
 * ends naming the call, the target PE, the address and the size: the calls
 * have no error return.
 *
 * Completion. A target in this process is copied at once: the operation is
 * complete when the call returns. Otherwise the answer comes as a message:
 * the PE must schedule (CsdSchedulePoll) between CmiWaitTest calls, and for
 * a callback to run. CmiPut copies Saddr before it returns; CmiGet writes
 * Saddr when the operation is seen complete (in the call, or in the
 * CmiWaitTest that first returns 1); CmiGetCb before its callback runs.
 *
 * Handles. CmiPut and CmiGet return a handle of the calling PE; there is
 * nothing to free. CmiWaitTest returns 1 once the operation is complete,
 * and 1 again if asked again; a handle of another PE ends the job.
 *
 * Persistent. A PersistentHandle belongs to the PE that made it and lives
 * until CmiDestroyPersistent of it or CmiDestroyAllPersistent; nothing to
 * free. After CmiUsePersistentHandle(&h, 1), the PE's sends to h's PE of at
 * most maxBytes bytes (header included) take h's channel; longer ones, and
 * sends to PEs of this process, go the ordinary way (a channel saves the
 * receiving process its allocation: in one process there is none).
 * CmiUsePersistentHandle(NULL, 0) ends that. A PersistentReq is plain data:
 * copy it into a message for the sender.
 */
#ifndef CONVERSE_RS_CONVERSE_RS_ONESIDED_H
#define CONVERSE_RS_CONVERSE_RS_ONESIDED_H

#ifdef __cplusplus
extern "C" {
#endif

/* ---- registration ------------------------------------------------------ */

/* 1 on success; 0 if addr is null or the range overlaps a registered one.
 * The memory stays allocated until it is unregistered. */
int CmiRegisterMemory(void *addr, unsigned int size);
/* size must be the registered length. Copies under way end first. 1 on
 * success; 0 if no range of that length is registered at addr. */
int CmiUnRegisterMemory(void *addr, unsigned int size);
/* size zeroed bytes, 8-aligned, registered until the process ends. */
void *CmiDMAAlloc(int size);

/* ---- get and put ------------------------------------------------------- */

typedef void (*CmiRdmaCallbackFn)(void *param);

void *CmiPut(unsigned int sourceId, unsigned int targetId, void *Saddr, void *Taddr,
             unsigned int size);
void *CmiGet(unsigned int sourceId, unsigned int targetId, void *Saddr, void *Taddr,
             unsigned int size);
/* 1 once the operation of a CmiPut or CmiGet handle is complete, else 0. */
int CmiWaitTest(void *obj);
/* fn(param) runs as a message on the calling PE once the operation is
 * complete (fn may be NULL). */
void CmiPutCb(unsigned int sourceId, unsigned int targetId, void *Saddr, void *Taddr,
              unsigned int size, CmiRdmaCallbackFn fn, void *param);
void CmiGetCb(unsigned int sourceId, unsigned int targetId, void *Saddr, void *Taddr,
              unsigned int size, CmiRdmaCallbackFn fn, void *param);

/* ---- global pointers (the CMI chapter) --------------------------------- */

/* size bytes at addr in PE pe's process, registered. Plain data. */
typedef struct GlobalPtr {
  int pe;
  unsigned int size;
  void *addr;
} GlobalPtr;

/* Registers size bytes at lptr (unregister with CmiUnRegisterMemory) and
 * fills *gptr. 1 on success; 0 if the range cannot be registered. */
int CmiGptrCreate(GlobalPtr *gptr, void *lptr, unsigned int size);
/* The address, on a PE of the pointer's process; NULL elsewhere. */
void *CmiGptrDref(GlobalPtr *gptr);
/* Copies the first size bytes to lptr, scheduling until they are there.
 * 1; a refused get, or size beyond the pointer's, ends the job. */
int CmiSyncGet(GlobalPtr *gptr, void *lptr, unsigned int size);

/* ---- persistent communication ------------------------------------------ */

typedef void *PersistentHandle; /* a plain void *, as in Charm++ */

/* What the receiver sends the sender. pe and maxBytes (header included)
 * may be read; opaque is the runtime's and must travel unchanged. */
typedef struct PersistentReq {
  int pe;
  int maxBytes;
  unsigned char opaque[24];
} PersistentReq;

PersistentHandle CmiCreatePersistent(int destPE, int maxBytes);
PersistentReq CmiCreateReceiverPersistent(int maxBytes);
PersistentHandle CmiRegisterReceivePersistent(PersistentReq req);
/* n handles at p, one per destination PE (NULL entries skipped); p NULL or
 * n 0 ends persistent sends. Naming a destroyed handle ends the job. */
void CmiUsePersistentHandle(PersistentHandle *p, int n);
/* Destroying a handle again, or NULL, does nothing. */
void CmiDestroyPersistent(PersistentHandle h);
void CmiDestroyAllPersistent(void);

#ifdef __cplusplus
}
#endif

#endif /* CONVERSE_RS_CONVERSE_RS_ONESIDED_H */
