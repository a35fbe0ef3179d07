/* Prints the layout of the value types C copies into messages, for the
 * test to compare with the Rust definitions. */
#include <converse.h>
#include <stddef.h>

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  if (CmiMyPe() == 0) {
    CmiPrintf("PersistentReq %d pe %d maxBytes %d opaque %d\n", (int)sizeof(PersistentReq),
              (int)offsetof(PersistentReq, pe), (int)offsetof(PersistentReq, maxBytes),
              (int)offsetof(PersistentReq, opaque));
    CmiPrintf("GlobalPtr %d pe %d size %d addr %d\n", (int)sizeof(GlobalPtr),
              (int)offsetof(GlobalPtr, pe), (int)offsetof(GlobalPtr, size),
              (int)offsetof(GlobalPtr, addr));
  }
  CsdExitScheduler();
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
