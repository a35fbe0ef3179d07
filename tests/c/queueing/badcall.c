/* Wrong arguments end the job with a message naming the call and the
 * value: argv[1] picks the case. PE 0 makes the call (the other PEs wait in
 * their schedulers). */
#include <converse.h>
#include <queueing.h>

static void start(int argc, char **argv) {
  const char *which = argc > 1 ? argv[1] : "csd";
  if (CmiMyPe() != 0) return;
  if (strcmp(which, "csd") == 0) {
    CsdEnqueueGeneral(CmiAlloc(CmiMsgHeaderSizeBytes), 42, 0, NULL);
  } else if (strcmp(which, "node") == 0) {
    CsdNodeEnqueueGeneral(CmiAlloc(CmiMsgHeaderSizeBytes), 1, 0, NULL);
  } else if (strcmp(which, "cqs") == 0) {
    Queue q = CqsCreate();
    CqsEnqueueGeneral(q, q, -7, 0, NULL);
  } else if (strcmp(which, "bits") == 0) {
    unsigned int word = 0;
    CqsEnqueueGeneral(CqsCreate(), NULL, CQS_QUEUEING_BFIFO, -3, &word);
  } else if (strcmp(which, "noprio") == 0) {
    CsdEnqueueGeneral(CmiAlloc(CmiMsgHeaderSizeBytes), CQS_QUEUEING_IFIFO, 32, NULL);
  } else if (strcmp(which, "nullq") == 0) {
    (void)CqsLength(NULL);
  } else if (strcmp(which, "crntype") == 0) {
    CrnStream s;
    CrnInitStream(&s, 1, 3);
  } else if (strcmp(which, "crnzero") == 0) {
    CrnStream s;
    memset(&s, 0, sizeof s);
    (void)CrnDouble(&s);
  }
  CmiPrintf("badcall: %s returned\n", which);
  ConverseExit();
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
