/* Errors. A message longer than the posted buffer is cut to fit: an
 * active port's error handler runs (gamma_errno GAMMA_ERR_MSGTOOLONG) and
 * signals an error with gamma_sigerr; a passive port counts it itself;
 * gamma_wait returns minus the count. And calls refused with a negative
 * value, printed for the test to compare with the Rust crate's codes:
 * among them a null buffer with a length and a length no buffer can have,
 * refused before anything is bound (the port keeps its buffer: node 1's
 * message to port 10 lands in node 0's first one). */
#include <gamma.h>
#include <limits.h>
#include <string.h>

#include "check.h"

static char shortb[9] = "....GGGG"; /* 4 posted, 4 guard bytes */
static char pb[4];
static char keep[5] = "....", other_buf[5] = "----"; /* node 0's port 10 */
static int errors, received, error_port, error_errno;

static void on_error(void) {
  errors++;
  error_port = gamma_active_port;
  error_errno = gamma_errno;
  /* Cut to the buffer, which the guard bytes follow untouched. */
  CHECK(memcmp(shortb, "abcdGGGG", 8) == 0);
  OK(gamma_sigerr(9));
}

static void on_receive(void) {
  received++;
  CHECK(gamma_errno == 0);
  CHECK(memcmp(shortb, "wxyzGGGG", 8) == 0);
}

int main(int argc, char **argv) {
  int me, other, pid, r1, r2;
  char buf[4];

  printf("errors: before gamma_init %d\n", gamma_my_node());
  OK(gamma_init(2, argc, argv));
  me = gamma_my_node();
  other = 1 - me;
  pid = gamma_my_par_pid();
  if (me == 1) {
    OK(gamma_set_active_port(1, 0, pid, 1, on_receive, on_error, 9, GO_BACK,
                             shortb, 4));
    OK(gamma_set_passive_port(2, 0, pid, 2, 8, GO_BACK, pb, sizeof pb));
    OK(gamma_set_passive_port(10, 0, pid, 10, 0, GO_BACK, NULL, 0));
  } else {
    OK(gamma_set_passive_port(1, 1, pid, 1, 0, GO_BACK, NULL, 0));
    OK(gamma_set_passive_port(2, 1, pid, 2, 0, GO_BACK, NULL, 0));
    printf("errors: refusals %d %d %d %d %d %d %d %d %d\n",
           gamma_set_passive_port(5, me, pid, 5, 0, GO_BACK, NULL, 0),
           gamma_set_passive_port(5, 7, pid, 5, 0, GO_BACK, NULL, 0),
           gamma_set_passive_port(5, other, 255, 5, 0, GO_BACK, NULL, 0),
           gamma_set_passive_port(5, other, pid, 5, 0, 7, NULL, 0),
           gamma_set_passive_port(6, other, pid, 6, 0, GO_BACK, NULL, 4),
           gamma_send(6, "x", 1), gamma_post_recv(7, buf, sizeof buf),
           gamma_attach_buffer(7, buf), gamma_wsend(12345));
    /* A length no buffer can have, before port 10 is set... */
    r1 = gamma_set_passive_port(10, other, pid, 10, 10, GO_BACK, other_buf, ULONG_MAX);
    r2 = gamma_set_active_port(10, other, pid, 10, NULL, NULL, 10, GO_BACK, other_buf,
                               (unsigned long)LONG_MAX + 1);
    OK(gamma_set_passive_port(10, other, pid, 10, 10, GO_BACK, keep, 4));
    /* ...and null buffers and impossible lengths once it is. */
    printf("errors: buffers %d %d %d %d %d %d %d %d %d %d %d\n", r1, r2,
           gamma_post_recv(10, NULL, 4), gamma_post_recv(10, other_buf, ULONG_MAX),
           gamma_post_recv(10, other_buf, (unsigned long)LONG_MAX + 1),
           gamma_attach_buffer(10, NULL), gamma_send(10, NULL, 4),
           gamma_send_2p(10, "ab", 2, NULL, 3), gamma_isend(10, NULL, 1),
           gamma_mlock(NULL, 4), gamma_munlock(NULL, 4));
  }
  OK(gamma_sync());
  if (me == 0) {
    OK(gamma_send(1, "abcdefgh", 8)); /* 8 bytes into 4: cut */
    OK(gamma_send(1, "wxyz", 4));     /* fits */
    OK(gamma_send(2, "123456", 6));   /* cut, on a passive port */
    OK(gamma_wait(10, 1));
    CHECK(memcmp(keep, "KEEP", 5) == 0 && memcmp(other_buf, "----", 5) == 0);
    printf("errors: port 10 kept its buffer: %s\n", keep);
  } else {
    OK(gamma_send(10, "KEEP", 4));
    r1 = gamma_wait(9, 2);
    r2 = gamma_wait(8, 1);
    CHECK(memcmp(pb, "1234", 4) == 0);
    CHECK(errors == 1 && received == 1);
    printf("errors: active port: gamma_wait %d, gamma_errno %d on port %d; "
           "passive port: gamma_wait %d\n",
           r1, error_errno, error_port, r2);
  }
  OK(gamma_sync());
  OK(gamma_exit());
  return 0;
}
