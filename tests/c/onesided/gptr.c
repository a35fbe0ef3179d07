/* Global pointers and runtime-allocated registered memory between PE 0 and
 * the last PE. The last PE makes a global pointer to a buffer of its own
 * (CmiGptrCreate) and allocates a registered buffer (CmiDMAAlloc), and
 * sends both to PE 0, which reads the first (CmiSyncGet), puts into the
 * second (CmiPut), and says so; the last PE checks the bytes that came.
 * PE 0 prints whether the pointer dereferences there (CmiGptrDref): only
 * in the last PE's process. */
#include <converse.h>
#include <stdint.h>

#define GLEN 3000
#define DLEN 5000

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  GlobalPtr g;
  void *dma;
} PtrMsg;

CpvStaticDeclare(int, ptr_h);
CpvStaticDeclare(int, put_h);
CpvStaticDeclare(int, exit_h);
CpvStaticDeclare(unsigned char *, lbuf);
CpvStaticDeclare(unsigned char *, dma);

static unsigned char pattern(int i, int salt) { return (unsigned char)(i * 11 + salt); }

static void on_ptr(void *msg) {
  PtrMsg *m = (PtrMsg *)msg;
  GlobalPtr g = m->g;
  unsigned char *got = (unsigned char *)malloc(GLEN);
  unsigned char *src = (unsigned char *)malloc(DLEN);
  void *d, *h;
  int i, last = CmiNumPes() - 1;
  if (g.pe != last || g.size != GLEN) CmiAbort("global pointer: pe %d size %u", g.pe, g.size);
  d = CmiGptrDref(&g);
  if (d != NULL && d != g.addr) CmiAbort("CmiGptrDref gave another address");
  CmiPrintf("gptr: dref on PE 0 %s\n", d ? "local" : "null");
  memset(got, 0, GLEN);
  if (CmiSyncGet(&g, got, GLEN) != 1) CmiAbort("CmiSyncGet failed");
  for (i = 0; i < GLEN; i++) {
    if (got[i] != pattern(i, 1)) CmiAbort("byte %d of CmiSyncGet is %d", i, got[i]);
  }
  for (i = 0; i < DLEN; i++) src[i] = pattern(i, 2);
  h = CmiPut(0, (unsigned int)last, src, m->dma, DLEN);
  while (!CmiWaitTest(h)) CsdSchedulePoll();
  free(src);
  free(got);
  CmiFree(msg);
  {
    void *n = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(n, CpvAccess(put_h));
    CmiSyncSendAndFree(last, CmiMsgHeaderSizeBytes, n);
  }
}

static void on_put(void *msg) {
  unsigned char *dma = CpvAccess(dma);
  int i;
  CmiFree(msg);
  for (i = 0; i < DLEN; i++) {
    if (dma[i] != pattern(i, 2)) CmiAbort("byte %d of the DMA buffer is %d", i, dma[i]);
  }
  if (CmiUnRegisterMemory(CpvAccess(lbuf), GLEN) != 1) CmiAbort("CmiUnRegisterMemory failed");
  free(CpvAccess(lbuf));
  CmiPrintf("gptr: CmiSyncGet of %d bytes and CmiPut of %d into CmiDMAAlloc memory checked\n",
            GLEN, DLEN);
  {
    void *n = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(n, CpvAccess(exit_h));
    CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, n);
  }
}

static void on_exit_msg(void *msg) {
  CmiFree(msg);
  CsdExitScheduler();
}

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CpvInitialize(int, ptr_h);
  CpvInitialize(int, put_h);
  CpvInitialize(int, exit_h);
  CpvInitialize(unsigned char *, lbuf);
  CpvInitialize(unsigned char *, dma);
  CpvAccess(ptr_h) = CmiRegisterHandler(on_ptr);
  CpvAccess(put_h) = CmiRegisterHandler(on_put);
  CpvAccess(exit_h) = CmiRegisterHandler(on_exit_msg);
  if (CmiNumPes() < 2) CmiAbort("gptr needs 2 PEs or more");
  if (CmiMyPe() == CmiNumPes() - 1) {
    PtrMsg m;
    GlobalPtr other;
    unsigned char *b = (unsigned char *)malloc(GLEN);
    unsigned char *d = (unsigned char *)CmiDMAAlloc(DLEN);
    int i;
    if (d == NULL || (uintptr_t)d % 8 != 0) CmiAbort("CmiDMAAlloc: %p", (void *)d);
    for (i = 0; i < DLEN; i++) {
      if (d[i] != 0) CmiAbort("CmiDMAAlloc memory is not zeroed");
    }
    for (i = 0; i < GLEN; i++) b[i] = pattern(i, 1);
    CpvAccess(lbuf) = b;
    CpvAccess(dma) = d;
    memset(&m.g, 0, sizeof m.g);
    if (CmiGptrCreate(&m.g, b, GLEN) != 1) CmiAbort("CmiGptrCreate failed");
    if (m.g.pe != CmiMyPe() || m.g.addr != b || m.g.size != GLEN) CmiAbort("CmiGptrCreate: fields");
    if (CmiGptrDref(&m.g) != b) CmiAbort("CmiGptrDref on the owner");
    if (CmiGptrCreate(&other, b + 8, 10) != 0) CmiAbort("an overlapping global pointer");
    m.dma = d;
    CmiSetHandler(&m, CpvAccess(ptr_h));
    CmiSyncSend(0, sizeof m, &m);
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
