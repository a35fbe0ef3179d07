/* A one-sided operation on memory its process has not registered is
 * refused, and the job ends naming the call, the target PE and the size.
 * The last PE registers a buffer, unregisters it, and sends its address to
 * PE 0, which puts to it (CmiPut, polled with CmiWaitTest) or, built with
 * -DCALLBACK, gets from it (CmiGetCb). Neither may complete. */
#include <converse.h>

#define LEN 64

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  char *addr;
} AddrMsg;

CpvStaticDeclare(int, addr_h);
CpvStaticDeclare(char *, buf);

static void never(void *param) {
  (void)param;
  CmiAbort("the callback of a refused operation ran");
}

static void on_addr(void *msg) {
  char *remote = ((AddrMsg *)msg)->addr;
  unsigned int target = (unsigned int)(CmiNumPes() - 1);
  char data[LEN];
  CmiFree(msg);
  memset(data, 7, sizeof data);
#ifdef CALLBACK
  CmiGetCb(0, target, data, remote, LEN, never, NULL);
  CsdScheduleForever();
#else
  {
    void *h = CmiPut(0, target, data, remote, LEN);
    (void)never;
    while (!CmiWaitTest(h)) CsdSchedulePoll();
  }
#endif
  CmiAbort("the refused operation completed");
}

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CpvInitialize(int, addr_h);
  CpvInitialize(char *, buf);
  CpvAccess(addr_h) = CmiRegisterHandler(on_addr);
  if (CmiMyPe() == CmiNumPes() - 1 && CmiMyPe() != 0) {
    AddrMsg m;
    char *b = (char *)malloc(4096);
    CpvAccess(buf) = b;
    if (CmiRegisterMemory(b, 4096) != 1) CmiAbort("CmiRegisterMemory failed");
    if (CmiUnRegisterMemory(b, 4096) != 1) CmiAbort("CmiUnRegisterMemory failed");
    m.addr = b;
    CmiSetHandler(&m, CpvAccess(addr_h));
    CmiSyncSend(0, sizeof m, &m);
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
