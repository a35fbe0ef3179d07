/* Processes register their handlers in different orders: the runtime must
 * end the job naming the index and both functions (the check compares C
 * functions by image and offset, which address randomisation leaves
 * alone). */
#include <converse.h>

void first_handler(void *msg) { CmiFree(msg); }
void second_handler(void *msg) { CmiFree(msg); }

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  if (CmiMyNode() % 2 == 0) {
    CmiRegisterHandler(first_handler);
    CmiRegisterHandler(second_handler);
  } else {
    CmiRegisterHandler(second_handler);
    CmiRegisterHandler(first_handler);
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
