/* CPM used wrongly ends the job naming the call (argv[1] says how):
 *   noinit    a CpmEnqueue destination before CpmModuleInit
 *   nomodule  a launcher before its file's CpmInitializeThisModule
 *   badpe     CpmSend to a PE the job does not have
 *   negdim    a negative CpmDim
 * Every PE registers the same handlers; PE 0 errs. */
#include <converse.h>

#include "misuse.cpm.h"

CpmInvokable take(CpmDim n, int *xs) {
  (void)n;
  (void)xs;
}

static void start(int argc, char **argv) {
  const char *mode = argc > 1 ? argv[1] : "";
  int xs[2] = {1, 2};
  if (strcmp(mode, "noinit") != 0) CpmModuleInit();
  if (strcmp(mode, "nomodule") != 0) CpmInitializeThisModule();
  if (CmiMyPe() != 0) return;
  if (strcmp(mode, "noinit") == 0) {
    Cpm_take(CpmEnqueueFIFO(0), 2, xs);
  } else if (strcmp(mode, "nomodule") == 0) {
    Cpm_take(CpmSend(0), 2, xs);
  } else if (strcmp(mode, "badpe") == 0) {
    Cpm_take(CpmSend(CmiNumPes()), 2, xs);
  } else if (strcmp(mode, "negdim") == 0) {
    Cpm_take(CpmSend(0), -1, xs);
  }
  CmiPrintf("misuse: unknown mode `%s`\n", mode);
  ConverseExit(1);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
