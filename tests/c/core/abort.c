/* PE 1 (or PE 0 alone) aborts: the job must end with a non-zero code and
 * a message naming the PE and the reason. */
#include <converse.h>

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  if (CmiMyPe() == CmiNumPes() - 1) {
    CmiAbort("the C program gave up (%d)", 42);
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
