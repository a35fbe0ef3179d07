/* Misuses the runtime must refuse, each ending the job with a message that
 * names it; argv[1] picks one:
 *   source     CmiPut with a sourceId that is not the calling PE
 *   foreign    PE 1 tests a handle PE 0 made (CmiWaitTest)
 *   destroyed  CmiUsePersistentHandle names a destroyed handle
 *   request    CmiRegisterReceivePersistent of a changed PersistentReq */
#include <converse.h>

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  void *handle;
} HandleMsg;

CpvStaticDeclare(int, handle_h);
static const char *mode = "";

static void on_handle(void *msg) {
  void *h = ((HandleMsg *)msg)->handle;
  CmiFree(msg);
  CmiWaitTest(h);
  CmiAbort("CmiWaitTest took another PE's handle");
}

static void start(int argc, char **argv) {
  static char word[16];
  CpvInitialize(int, handle_h);
  CpvAccess(handle_h) = CmiRegisterHandler(on_handle);
  if (argc > 1) mode = argv[1];
  if (CmiMyPe() != 0) return;
  if (strcmp(mode, "source") == 0) {
    CmiPut(1, 0, word, word, sizeof word);
  } else if (strcmp(mode, "foreign") == 0) {
    static char region[64];
    HandleMsg m;
    if (CmiRegisterMemory(region, sizeof region) != 1) CmiAbort("CmiRegisterMemory failed");
    m.handle = CmiPut(0, 0, word, region, sizeof word);
    if (!CmiWaitTest(m.handle)) CmiAbort("a put in the process is not done at once");
    CmiSetHandler(&m, CpvAccess(handle_h));
    CmiSyncSend(1, sizeof m, &m);
    return;
  } else if (strcmp(mode, "destroyed") == 0) {
    PersistentHandle h = CmiCreatePersistent(1, 1024);
    CmiDestroyPersistent(h);
    CmiUsePersistentHandle(&h, 1);
  } else if (strcmp(mode, "request") == 0) {
    PersistentReq r = CmiCreateReceiverPersistent(1024);
    r.maxBytes = 1 << 20;
    CmiRegisterReceivePersistent(r);
  } else {
    CmiAbort("misuse: unknown mode `%s`", mode);
  }
  CmiAbort("misuse `%s` was not refused", mode);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
