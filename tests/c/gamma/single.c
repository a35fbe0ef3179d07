/* One node in one process (gamma_init(1, ...)): the group calls, an
 * input-only port, semaphores, gamma_atomic, a wait that can never end,
 * gamma_mlock, gamma_time. */
#include <gamma.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

static void signal_three(void) { OK(gamma_signal(3)); }

int main(int argc, char **argv) {
  static char buf[4096];
  time_586 t0, t1;
  int pid, r;

  /* Not a member yet. */
  printf("single: before gamma_init, gamma_my_node() = %d\n", gamma_my_node());
  OK(gamma_init(1, argc, argv));
  pid = gamma_my_par_pid();
  CHECK(pid > 0 && pid < 255);
  CHECK(gamma_my_node() == 0);
  CHECK(gamma_how_many_nodes() == 1);
  OK(gamma_sync());

  /* dest_par_pid 0: input only. */
  OK(gamma_set_passive_port(1, 0, 0, 0, 1, GO_BACK, buf, 8));

  /* Semaphores. */
  OK(gamma_signal(2));
  OK(gamma_signal(2));
  CHECK(gamma_test(2) == 2);
  CHECK(gamma_wait(2, 2) == 0);
  CHECK(gamma_test(2) == 0);
  OK(gamma_sigerr(2));
  OK(gamma_signal(2));
  CHECK(gamma_wait(2, 1) == -1);
  /* The error count was reset by that wait. */
  OK(gamma_signal(2));
  CHECK(gamma_wait(2, 1) == 0);

  OK(gamma_atomic(signal_three));
  CHECK(gamma_test(3) == 1);

  /* Alone, nothing can arrive: an error, not a hang. */
  r = gamma_wait(1, 1);
  printf("single: a wait that can never end returned %d\n", r);

  /* Locked memory: allowed, or refused by the system's limit. */
  r = gamma_mlock(buf, sizeof buf);
  printf("single: gamma_mlock returned %d\n", r);
  if (r == 0)
    OK(gamma_munlock(buf, sizeof buf));
  OK(gamma_munlockall());

  /* The cycle counter goes forward. */
  gamma_time(t0);
  usleep(2000);
  gamma_time(t1);
  CHECK(t0.hi <= 0xffffffffUL && t0.lo <= 0xffffffffUL);
  CHECK(gamma_time_diff(t1, t0) > 0.0);
  CHECK(gamma_time_diff(t0, t1) < 0.0);
  CHECK(gamma_time_diff(t0, t0) == 0.0);
  printf("single: gamma_time goes forward\n");

  OK(gamma_exit());
  CHECK(gamma_my_node() < 0);
  printf("single: done, parallel pid %s\n", pid > 0 ? "positive" : "not positive");
  return 0;
}
