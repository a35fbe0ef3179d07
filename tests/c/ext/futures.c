/* Futures: PE 0's thread creates futures and waits for them; the last PE
 * fills one with CfutureSet and another with a buffer of
 * CfutureCreateValue (both travel back to PE 0). Locally: a set before the
 * wait, a buffer stored without a copy, a waited value stored in another
 * future. */
#include <converse.h>

typedef struct {
  char header[CmiMsgHeaderSizeBytes];
  Cfuture f;
  int by_buffer;
} SetMsg;

CpvStaticDeclare(int, set_handler);

static void check(int ok, const char *what) {
  if (!ok) CmiAbort("futures: %s", what);
}

/* On the last PE: fills the future it was sent. */
static void on_set(void *m) {
  SetMsg *msg = (SetMsg *)m;
  int value = 1000 + CmiMyPe();
  check(CfuturePE(msg->f) == 0, "the future resides on PE 0");
  if (msg->by_buffer) {
    int *b = (int *)CfutureCreateValue(2 * sizeof(int));
    b[0] = value;
    b[1] = 77;
    CfutureStoreValue(msg->f, b);
  } else {
    CfutureSet(msg->f, &value, sizeof value);
  }
  CmiFree(msg);
}

static void ask(Cfuture f, int by_buffer) {
  SetMsg msg;
  memset(&msg, 0, sizeof msg);
  msg.f = f;
  msg.by_buffer = by_buffer;
  CmiSetHandler(&msg, CpvAccess(set_handler));
  CmiSyncSend(CmiNumPes() - 1, sizeof msg, &msg);
}

static void waiter(void *arg) {
  Cfuture remote = CfutureCreate(), buffered = CfutureCreate();
  Cfuture local = CfutureCreate(), stored = CfutureCreate(), again = CfutureCreate();
  int *v, *w, *b;
  char *s;
  (void)arg;

  ask(remote, 0);
  ask(buffered, 1);
  v = (int *)CfutureWait(remote); /* blocks this thread until the set */
  CmiPrintf("future set by PE %d: %d\n", CmiNumPes() - 1, *v);
  w = (int *)CfutureWait(buffered);
  CmiPrintf("future stored by PE %d: %d %d\n", CmiNumPes() - 1, w[0], w[1]);

  CfutureSet(local, "hello", 6);
  s = (char *)CfutureWait(local);
  CmiPrintf("local future: %s\n", s);

  b = (int *)CfutureCreateValue(4 * sizeof(int));
  b[0] = 1;
  b[1] = 2;
  b[2] = 3;
  b[3] = 4;
  CfutureStoreValue(stored, b);
  check(CfutureWait(stored) == (void *)b, "a stored buffer is not copied");
  check(CfutureWait(stored) == (void *)b, "waiting twice gives the same value");

  CfutureStoreValue(again, v); /* a value extracted from another future */
  check(CfutureWait(again) == (void *)v, "a waited value is stored without a copy");
  CmiPrintf("stored values: %d %d, shared %d\n", b[0] + b[1] + b[2] + b[3], *(int *)CfutureWait(again),
            CfutureWait(again) == CfutureWait(remote));

  b = (int *)CfutureCreateValue(16);
  CfutureDestroyBuffer(b);

  CfutureDestroy(remote);
  CfutureDestroy(buffered);
  CfutureDestroy(local);
  CfutureDestroy(stored);
  CfutureDestroy(again);
  CmiPrintf("futures: done on %d PEs\n", CmiNumPes());
  ConverseExit();
}

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CfutureModuleInit();
  CpvInitialize(int, set_handler);
  CpvAccess(set_handler) = CmiRegisterHandler(on_set);
  if (CmiMyPe() == 0) CthAwaken(CthCreate(waiter, NULL, 0));
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
