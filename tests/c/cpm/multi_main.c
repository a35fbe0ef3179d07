/* Three source files in one program, each with its own .cpm.h: this one
 * and multi_other.c both have a static invokable named `report` (each
 * file's launcher reaches its own), multi_other.c's `other_hello` is
 * launched from here through its extern launcher, and multi_none.c has no
 * invokable at all (its CpmInitializeThisModule is still there). */
#include <converse.h>

#include "multi_main.cpm.h"

void other_init(void);
void none_init(void);
const char *none_name(void);
void *Cpm_other_hello(CpmDestination dest, int n);

CpvStaticDeclare(int, reports);

CpmInvokable finish(void) { CsdExitScheduler(); }

/* The reports of both files end here. */
CpmInvokable main_count(CpmStr from) {
  CmiPrintf("PE 0: report from %s\n", from);
  if (++CpvAccess(reports) == 2) {
    CmiPrintf("PE 0: both files reported\n");
    Cpm_finish(CpmSend(CpmALL));
  }
}

static CpmInvokable report(int n) {
  CmiPrintf("PE %d: main's report(%d)\n", CmiMyPe(), n);
  Cpm_main_count(CpmSend(0), "multi_main.c");
}

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CpvInitialize(int, reports);
  CpmModuleInit();
  CpmInitializeThisModule();
  other_init();
  none_init();
  if (CmiMyPe() == 0) {
    int last = CmiNumPes() - 1;
    /* The index is the program's to read. */
    CmiPrintf("PE 0: CpmIndex_report names a handler: %s; %s\n",
              CmiHandlerToFunction(CpvAccess(CpmIndex_report)) != NULL ? "yes" : "no",
              none_name());
    Cpm_report(CpmSend(last), 1);
    Cpm_other_hello(CpmSend(last), 2);
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
