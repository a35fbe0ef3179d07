/* Isomalloc from C. Every PE allocates a block, checks its length (whole
 * pages, at least what it asked for), that it is zeroed and in range (and
 * that malloc'd and stack memory are not), fills it, allocates and frees a
 * second one, and sends its block's address to PE 0, which checks that the
 * PEs' blocks are all different and in range. PE 0 then has every PE check
 * its pattern and free its block.
 *
 * With the argument double-free, PE 0 frees a block twice: the job must
 * end naming the call. */
#include <converse.h>

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  uintptr_t addr;
  int len;
} AddrMsg;

CpvStaticDeclare(int, h_addr);
CpvStaticDeclare(int, h_check_free);
CpvStaticDeclare(int, h_freed);
CpvStaticDeclare(int, count);
CpvStaticDeclare(unsigned char *, block);
CpvStaticDeclare(uintptr_t *, addrs);

static void fill_byte(unsigned char *b, int len, int pe) {
  int i;
  for (i = 0; i < len; i++) b[i] = (unsigned char)(i * 7 + pe);
}

static void check_free(void *msg) {
  unsigned char *b = CpvAccess(block);
  int len = CmiIsomallocLength(b), i;
  CmiFree(msg);
  for (i = 0; i < len; i++)
    if (b[i] != (unsigned char)(i * 7 + CmiMyPe())) CmiAbort("PE %d: byte %d of its block changed", CmiMyPe(), i);
  CmiIsomallocFree(b);
  CmiIsomallocFree(NULL); /* does nothing */
  {
    char m[CmiMsgHeaderSizeBytes];
    CmiSetHandler(m, CpvAccess(h_freed));
    CmiSyncSend(0, sizeof m, m);
  }
}

static void freed(void *msg) {
  CmiFree(msg);
  if (++CpvAccess(count) == 2 * CmiNumPes()) {
    CmiPrintf("isomalloc: blocks checked and freed on %d PEs\n", CmiNumPes());
    free(CpvAccess(addrs));
    ConverseExit();
  }
}

static void got_addr(void *msg) {
  AddrMsg *m = (AddrMsg *)msg;
  int n = CpvAccess(count), i;
  if (!CmiIsomallocInRange((void *)m->addr)) CmiAbort("PE 0: block %p is not in range", (void *)m->addr);
  for (i = 0; i < n; i++) {
    uintptr_t other = CpvAccess(addrs)[i];
    if (m->addr < other + (uintptr_t)m->len && other < m->addr + (uintptr_t)m->len)
      CmiAbort("isomalloc: blocks at %p and %p overlap", (void *)m->addr, (void *)other);
  }
  CpvAccess(addrs)[n] = m->addr;
  CmiFree(msg);
  if (++CpvAccess(count) == CmiNumPes()) {
    int pe;
    CmiPrintf("isomalloc: %d PEs, %d distinct blocks in range\n", CmiNumPes(), CmiNumPes());
    for (pe = 0; pe < CmiNumPes(); pe++) {
      char m2[CmiMsgHeaderSizeBytes];
      CmiSetHandler(m2, CpvAccess(h_check_free));
      CmiSyncSend(pe, sizeof m2, m2);
    }
  }
}

static void start(int argc, char **argv) {
  unsigned char *b, *b2;
  int len, len2, i, on_stack = 0;
  void *heap;
  AddrMsg *m;
  CpvInitialize(int, h_addr);
  CpvInitialize(int, h_check_free);
  CpvInitialize(int, h_freed);
  CpvInitialize(int, count);
  CpvInitialize(unsigned char *, block);
  CpvInitialize(uintptr_t *, addrs);
  CpvAccess(h_addr) = CmiRegisterHandler(got_addr);
  CpvAccess(h_check_free) = CmiRegisterHandler(check_free);
  CpvAccess(h_freed) = CmiRegisterHandler(freed);

  if (argc > 1 && strcmp(argv[1], "double-free") == 0) {
    if (CmiMyPe() == 0) {
      static void *doomed;
      doomed = CmiIsomalloc(100);
      CmiIsomallocFree(doomed);
      CmiIsomallocFree(doomed);
      CmiAbort("isomalloc: the second free was not caught");
    }
    return;
  }

  if (CmiMyPe() == 0) CpvAccess(addrs) = (uintptr_t *)calloc(CmiNumPes(), sizeof(uintptr_t));
  b = (unsigned char *)CmiIsomalloc(1000);
  len = CmiIsomallocLength(b);
  if (len < 1000 || len % 4096 != 0) CmiAbort("isomalloc: a block of 1000 bytes has length %d", len);
  for (i = 0; i < len; i++)
    if (b[i] != 0) CmiAbort("isomalloc: byte %d of a new block is %d", i, b[i]);
  if (!CmiIsomallocInRange(b) || !CmiIsomallocInRange(b + len - 1)) CmiAbort("isomalloc: its block is not in range");
  heap = malloc(64);
  if (CmiIsomallocInRange(heap) || CmiIsomallocInRange(&on_stack)) CmiAbort("isomalloc: malloc or stack memory in range");
  free(heap);
  fill_byte(b, len, CmiMyPe());

  b2 = (unsigned char *)CmiIsomalloc(3 * len);
  len2 = CmiIsomallocLength(b2);
  if (len2 < 3 * len) CmiAbort("isomalloc: the second block has length %d", len2);
  if (b2 < b + len && b < b2 + len2) CmiAbort("isomalloc: two blocks of one PE overlap");
  b2[len2 - 1] = 1;
  CmiIsomallocFree(b2);
  CpvAccess(block) = b;

  m = (AddrMsg *)CmiAlloc(sizeof(AddrMsg));
  CmiSetHandler(m, CpvAccess(h_addr));
  m->addr = (uintptr_t)b;
  m->len = len;
  CmiSyncSendAndFree(0, sizeof(AddrMsg), m);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
