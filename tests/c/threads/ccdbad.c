/* A condition converse-rs does not have (Charm++'s CcdPROCESSOR_LONG_IDLE,
 * 4) or one past the user conditions: the job ends naming the call and the
 * number, rather than never calling the callback. */
#include <converse.h>

static void cb(void *arg) { (void)arg; }

static void start(int argc, char **argv) {
  if (CmiMyPe() == 0) {
    if (argc > 1 && strcmp(argv[1], "raise") == 0) {
      CcdRaiseCondition(600);
    } else {
      CcdCallOnCondition(4, cb, NULL);
    }
    CmiAbort("not reached");
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
