/* The manual's first CPM example (6.1, myprog.c): PE 0 orders each other
 * PE to print an integer with Cpm_print_integer(CpmSend(i), ...). Made to
 * end: each PE acknowledges to PE 0, which then stops every PE's
 * scheduler, through CPM too. */
#include <converse.h>

#include "myprog.cpm.h"

CpvStaticDeclare(int, acks);

CpmInvokable finish(void) { CsdExitScheduler(); }

CpmInvokable ack(int pe) {
  CpvAccess(acks)++;
  CmiPrintf("PE 0: PE %d printed\n", pe);
  if (CpvAccess(acks) == CmiNumPes() - 1) {
    CmiPrintf("PE 0: all %d other PEs printed\n", CpvAccess(acks));
    Cpm_finish(CpmSend(CpmALL));
  }
}

CpmInvokable print_integer(int n) {
  CmiPrintf("PE %d: %d\n", CmiMyPe(), n);
  Cpm_ack(CpmSend(0), CmiMyPe());
}

static void user_main(int argc, char **argv) {
  int i;
  (void)argc;
  (void)argv;
  CpmModuleInit();
  CpmInitializeThisModule();
  CpvInitialize(int, acks);
  if (CmiMyPe() == 0) {
    for (i = 1; i < CmiNumPes(); i++) Cpm_print_integer(CpmSend(i), 1000 + i);
    if (CmiNumPes() == 1) {
      CmiPrintf("PE 0: all 0 other PEs printed\n");
      Cpm_finish(CpmSend(CpmALL));
    }
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, user_main, 0, 0);
  return 0;
}
