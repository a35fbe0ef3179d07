/* The manual's second CPM example (6.2, example2.c): the program's
 * arguments travel as `CpmDim argc, CpmStr *argv` from PE 0 to PE 1 (PE 0
 * itself when alone), which prints them; then a single CpmStr, an array
 * of doubles and an empty array of strings go the same way. */
#include <converse.h>

#include "example2.cpm.h"

CpmInvokable finish(void) { CsdExitScheduler(); }

CpmInvokable stats(CpmStr name, CpmDim n, double *values, CpmDim none, CpmStr *nothing) {
  int i;
  double sum = 0;
  for (i = 0; i < n; i++) sum += values[i];
  CmiPrintf("PE %d: %s: %d values, sum %.2f, %d strings%s\n", CmiMyPe(), name, n, sum, none,
            nothing != NULL ? "" : " (null)");
  Cpm_finish(CpmSend(CpmALL));
}

CpmInvokable printed(int pe) {
  double values[4] = {0.5, 1.25, 2.0, 4.0};
  Cpm_stats(CpmSend(pe), "measurements", 4, values, 0, NULL);
}

CpmInvokable print_program_arguments(CpmDim argc, CpmStr *argv) {
  int i;
  const char *slash = strrchr(argv[0], '/');
  char line[512];
  size_t used;
  used = (size_t)snprintf(line, sizeof line, "PE %d: The program's arguments are: %s", CmiMyPe(),
                          slash ? slash + 1 : argv[0]);
  for (i = 1; i < argc && used < sizeof line; i++) {
    used += (size_t)snprintf(line + used, sizeof line - used, " [%s]", argv[i]);
  }
  CmiPrintf("%s\n", line);
  Cpm_printed(CpmSend(0), CmiMyPe());
}

static void user_main(int argc, char **argv) {
  CpmModuleInit();
  CpmInitializeThisModule();
  if (CmiMyPe() == 0) Cpm_print_program_arguments(CpmSend(1 % CmiNumPes()), argc, argv);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, user_main, 0, 0);
  return 0;
}
