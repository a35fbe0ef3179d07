/* The last PE calls the C library's exit(3) in the middle of the job: the
 * job must end with code 3 and a report naming that PE. */
#include <converse.h>

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  if (CmiMyPe() == CmiNumPes() - 1) {
    exit(3);
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
