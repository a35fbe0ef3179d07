/* A message goes round the ring of PEs ROUNDS times; every hop checks the
 * hop count and the sender. Sends alternate between a copy from the
 * stack (CmiInitMsgHeader, CmiSyncSend) and the buffer itself
 * (CmiSyncSendAndFree). */
#include "suite.h"

#define ROUNDS 5

typedef struct {
  char core[CmiMsgHeaderSizeBytes];
  int hops;
  int from;
} RingMsg;

CpvStaticDeclare(int, ring_handler);

static void ring_handler(void *msg) {
  RingMsg *m = (RingMsg *)msg;
  int me = CmiMyPe(), n = CmiNumPes();
  if (m->from != (me + n - 1) % n) CmiAbort("ring: PE %d got the message from PE %d", me, m->from);
  if (m->hops % n != me) CmiAbort("ring: hop %d reached PE %d", m->hops, me);
  if (me == 0 && m->hops == ROUNDS * n) {
    CmiFree(m);
    suite_done("ring");
    return;
  }
  m->hops++;
  m->from = me;
  CmiNetworkProgress(); /* nothing to do here, as Charm++ programs call it */
  if (m->hops % 2) {
    RingMsg copy = *m;
    CmiFree(m);
    CmiInitMsgHeader(&copy, sizeof copy);
    CmiSetHandler(&copy, CpvAccess(ring_handler));
    CmiSyncSend((me + 1) % n, sizeof copy, &copy);
  } else {
    CmiSyncSendAndFree((me + 1) % n, sizeof *m, m);
  }
}

void ring_moduleinit(void) {
  CpvInitialize(int, ring_handler);
  CpvAccess(ring_handler) = CmiRegisterHandler(ring_handler);
}

void ring_init(void) {
  RingMsg *m = (RingMsg *)CmiAlloc(sizeof(RingMsg));
  CmiInitMsgHeader(m, sizeof(RingMsg));
  m->hops = 1;
  m->from = 0;
  CmiSetHandler(m, CpvAccess(ring_handler));
  CmiSyncSendAndFree(1 % CmiNumPes(), sizeof(RingMsg), m);
}
