/* A CthThread used after its thread ended (mode "ended"), or on another PE
 * than its own (mode "otherpe", PE 0's main thread sent to PE 1): the job
 * ends with a message naming the call, instead of touching freed memory. */
#include <converse.h>

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  CthThread t;
} ThreadMsg;

CpvStaticDeclare(int, awaken_handler);

static void awaken(void *m) {
  CthThread t = ((ThreadMsg *)m)->t;
  CmiFree(m);
  CthAwaken(t);
  CmiAbort("not reached");
}

static void send_thread(int pe, CthThread t) {
  ThreadMsg *m = (ThreadMsg *)CmiAlloc(sizeof(ThreadMsg));
  m->t = t;
  CmiSetHandler(m, CpvAccess(awaken_handler));
  CmiSyncSendAndFree(pe, sizeof(ThreadMsg), m);
}

static void body(void *arg) {
  (void)arg;
  /* Handled after this thread has ended (its function returned). */
  send_thread(CmiMyPe(), CthSelf());
}

static void start(int argc, char **argv) {
  CpvInitialize(int, awaken_handler);
  CpvAccess(awaken_handler) = CmiRegisterHandler(awaken);
  if (CmiMyPe() != 0) return;
  if (argc > 1 && strcmp(argv[1], "otherpe") == 0) {
    send_thread(1, CthSelf());
  } else {
    CthAwaken(CthCreate(body, NULL, 0));
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
