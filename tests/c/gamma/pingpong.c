/* Two nodes ping-pong through active ports: each node's receiver handler
 * reads the value in its own buffer (the data is there when the handler
 * runs), checks that the bytes of the buffer beyond the message still
 * hold what the program wrote, and signals semaphore 5, which the main
 * code waits on. */
#include <gamma.h>
#include <string.h>

#include "check.h"

#define ROUNDS 200UL
#define MAGIC 0xabcdefUL

/* [0]: the value, [1]: MAGIC (the message: 2 words); [2]: the program's. */
static unsigned long inbox[3];
static unsigned long expect, last, round_no;
static int received;

static void on_receive(void) {
  CHECK(gamma_active_port == 1);
  CHECK(gamma_errno == 0);
  CHECK(inbox[0] == expect);
  CHECK(inbox[1] == MAGIC);
  /* Not part of the message: what the main code last wrote. */
  CHECK(inbox[2] == round_no);
  last = inbox[0];
  received++;
  OK(gamma_signal(5));
}

static void on_error(void) {
  fprintf(stderr, "pingpong: error handler, gamma_errno %d\n", gamma_errno);
  exit(1);
}

int main(int argc, char **argv) {
  int me, other, pid, r;
  unsigned long i;

  OK(gamma_init(2, argc, argv));
  me = gamma_my_node();
  CHECK(gamma_how_many_nodes() == 2);
  other = 1 - me;
  pid = gamma_my_par_pid();
  CHECK(pid > 0);
  OK(gamma_set_active_port(1, other, pid, 1, on_receive, on_error, 4, GO_BACK,
                           inbox, sizeof inbox));
  OK(gamma_sync());
  for (i = 0; i < ROUNDS; i++) {
    unsigned long msg[2] = {0, MAGIC};
    round_no = i;
    if (me == 0) {
      msg[0] = 2 * i + 1;
      expect = 2 * i + 2;
      OK(gamma_send(1, msg, sizeof msg));
      /* Scribble over the buffer: the reply must replace the message's
       * words whole and leave the third alone. */
      memset(inbox, 0x5a, sizeof inbox);
      inbox[2] = i;
      CHECK(gamma_wait(5, 1) == 0);
    } else {
      expect = 2 * i + 1;
      inbox[2] = i;
      CHECK(gamma_wait(5, 1) == 0);
      msg[0] = last + 1;
      OK(gamma_send(1, msg, sizeof msg));
    }
  }
  CHECK(received == (int)ROUNDS);
  /* Every arrival also counted on the port's semaphore 4. */
  CHECK(gamma_test(4) == (int)ROUNDS);
  r = gamma_exit();
  printf("pingpong: node %d of 2: %d messages, last value %lu, gamma_exit %d\n",
         me, received, last, r);
  return r;
}
