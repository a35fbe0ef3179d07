// A C++ ping-pong written as Charm++'s Converse benchmarks are
// (benchmarks/converse/pingpong): `CmiStartFn mymain(...)` passed to
// ConverseInit, Cpvs of C++ types, CPU affinity and topology set up at
// start, messages of growing size between PEs 0 and 1 with their headers
// readied by CmiInitMsgHeader, and the sizes checked on arrival.
#include <cstdio>
#include <cstring>
#include <vector>

#include "converse.h"

CpvStaticDeclare(int, pingHandler);
CpvStaticDeclare(int, exitHandler);
CpvStaticDeclare(int, msgSize);
CpvStaticDeclare(int, bounce);
CpvStaticDeclare(std::vector<int>, sizesSeen);

static const int kBounces = 10;
static const int kMaxSize = 1 << 16;

struct PingMsg {
  char core[CmiMsgHeaderSizeBytes];
  int size;
  int bounce;
};

static void sendPing(int to, int size, int bounce) {
  PingMsg *m = (PingMsg *)CmiAlloc(size);
  CmiInitMsgHeader(m, size);
  m->size = size;
  m->bounce = bounce;
  memset((char *)m + sizeof(PingMsg), bounce & 0xff, size - sizeof(PingMsg));
  CmiSetHandler(m, CpvAccess(pingHandler));
  CmiSyncSendAndFree(to, size, m);
}

static void exitHandlerFunc(void *msg) {
  CmiFree(msg);
  CsdExitScheduler();
}

static void pingHandlerFunc(void *msg) {
  PingMsg *m = (PingMsg *)msg;
  int size = m->size;
  if (CmiSize(msg) < size) CmiAbort("pingpong: %d bytes said, %d arrived", size, CmiSize(msg));
  for (int i = (int)sizeof(PingMsg); i < size; i++)
    if (((unsigned char *)msg)[i] != (m->bounce & 0xff)) CmiAbort("pingpong: byte %d wrong", i);
  int bounce = m->bounce;
  CmiFree(msg);
  if (CmiMyPe() == 1) {
    sendPing(0, size, bounce + 1);
    return;
  }
  if (bounce < 2 * kBounces) {
    sendPing(1, size, bounce + 1);
    return;
  }
  CpvAccess(sizesSeen).push_back(size);
  if (size < kMaxSize) {
    sendPing(1, size * 2, 1);
    return;
  }
  std::printf("pingpong: %d sizes from %d to %d bytes, %d round trips each\n",
              (int)CpvAccess(sizesSeen).size(), CpvAccess(sizesSeen).front(),
              CpvAccess(sizesSeen).back(), kBounces);
  std::fflush(stdout);
  void *bye = CmiAlloc(CmiMsgHeaderSizeBytes);
  CmiSetHandler(bye, CpvAccess(exitHandler));
  CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, bye);
}

CmiStartFn mymain(int argc, char *argv[]) {
  CmiInitCPUAffinity(argv);
  CmiInitCPUTopology(argv);
  CpvInitialize(int, pingHandler);
  CpvInitialize(int, exitHandler);
  CpvInitialize(int, msgSize);
  CpvInitialize(int, bounce);
  CpvInitialize(std::vector<int>, sizesSeen);
  CpvAccess(pingHandler) = CmiRegisterHandler(pingHandlerFunc);
  CpvAccess(exitHandler) = CmiRegisterHandler(exitHandlerFunc);
  if (CmiGetArgc(argv) != argc) CmiAbort("pingpong: argc %d, CmiGetArgc %d", argc, CmiGetArgc(argv));
  if (CmiNumPes() != 2) CmiAbort("pingpong: runs on 2 PEs, not %d", CmiNumPes());
  if (CmiMyPe() == 0) sendPing(1, (int)sizeof(PingMsg), 1);
  return 0;
}

int main(int argc, char *argv[]) {
  ConverseInit(argc, argv, (CmiStartFn)mymain, 0, 0);
  return 0;
}
