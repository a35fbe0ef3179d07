/* The second file of the `multi` program (see multi_main.c). */
#include <converse.h>

#include "multi_other.cpm.h"

void other_init(void);
void *Cpm_main_count(CpmDestination dest, CpmStr from);

static CpmInvokable report(int n) {
  CmiPrintf("PE %d: other's report(%d)\n", CmiMyPe(), n);
  Cpm_main_count(CpmSend(0), "multi_other.c");
}

CpmInvokable other_hello(int n) {
  CmiPrintf("PE %d: other_hello(%d)\n", CmiMyPe(), n);
  Cpm_report(CpmSend(CmiMyPe()), 10 * n);
}

void other_init(void) { CpmInitializeThisModule(); }
