/* A message built on the stack goes round the ring of PEs LAPS times; each
 * PE counts it and passes the same buffer on. Then PE 0 broadcasts a stop
 * message, every PE leaves its scheduler, and the job ends. */
#include <converse.h>

#define LAPS 50

typedef struct {
  char head[CmiMsgHeaderSizeBytes]; /* file-scope struct, constant size */
  int hops;
  int laps_left;
} RingMsg;

CpvStaticDeclare(int, ring_handler);
CpvStaticDeclare(int, stop_handler);
CpvStaticDeclare(int, seen);

static void stop(void *msg) {
  CmiFree(msg);
  if (CpvAccess(seen) != LAPS) {
    CmiAbort("PE %d saw the ring message %d times, not %d", CmiMyPe(), CpvAccess(seen), LAPS);
  }
  CsdExitScheduler();
}

static void ring(void *m) {
  RingMsg *msg = (RingMsg *)m;
  int next = (CmiMyPe() + 1) % CmiNumPes();
  CpvAccess(seen)++;
  msg->hops++;
  if (CmiMyPe() == 0) {
    msg->laps_left--;
    if (msg->laps_left == 0) {
      void *s;
      if (msg->hops != LAPS * CmiNumPes()) {
        CmiAbort("ring: %d hops, expected %d", msg->hops, LAPS * CmiNumPes());
      }
      CmiPrintf("ring: %d laps of %d PEs, %d hops, size %d\n", LAPS, CmiNumPes(), msg->hops,
                CmiSize(msg));
      CmiFree(msg);
      s = CmiAlloc(CmiMsgHeaderSizeBytes);
      CmiSetHandler(s, CpvAccess(stop_handler));
      CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, s);
      return;
    }
  }
  CmiSyncSendAndFree(next, sizeof(RingMsg), msg);
}

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CpvInitialize(int, ring_handler);
  CpvInitialize(int, stop_handler);
  CpvInitialize(int, seen);
  CpvAccess(ring_handler) = CmiRegisterHandler(ring);
  CpvAccess(stop_handler) = CmiRegisterHandler(stop);
  if (CmiMyPe() == 0) {
    RingMsg first; /* on the stack, header not initialised */
    first.hops = -1; /* PE 0's first receipt counts as hop 0 */
    first.laps_left = LAPS + 1;
    CpvAccess(seen) = -1;
    CmiSetHandler(&first, CpvAccess(ring_handler));
    CmiSyncSend(0, sizeof first, &first);
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
