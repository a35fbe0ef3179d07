/* A null callback given to CCS: the last PE registers a null handler
 * ("handler"), a null handler function ("handlerfn"), a null merge
 * function ("merge") or a handler under a null name ("name"), as the
 * first argument says. Each ends the job with a message naming the call;
 * the other PEs wait in their schedulers. Runs without ++server. */
#include <stdio.h>
#include <string.h>

#include <converse.h>
#include <conv-ccs.h>

static void handler(void *msg) { CmiFree(msg); }

static void start(int argc, char **argv) {
  const char *what = argc > 1 ? argv[1] : "";
  if (CmiMyPe() != CmiNumPes() - 1) return;
  if (strcmp(what, "handler") == 0) {
    CcsRegisterHandler("null_handler", (CmiHandler)NULL);
  } else if (strcmp(what, "handlerfn") == 0) {
    CcsRegisterHandlerFn("null_handlerfn", (CcsHandlerFn)NULL, NULL);
  } else if (strcmp(what, "merge") == 0) {
    CcsRegisterHandler("merged", handler);
    CcsSetMergeFn("merged", (CmiReduceMergeFn)NULL);
  } else if (strcmp(what, "name") == 0) {
    CcsRegisterHandler((const char *)NULL, handler);
  } else {
    CmiAbort("nullfn: unknown case '%s'", what);
  }
  /* Not reached: each case above ends the job. */
  CmiPrintf("nullfn: PE %d: %s accepted\n", CmiMyPe(), what);
  ConverseExit(0);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
