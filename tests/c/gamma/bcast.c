/* A broadcast to every node, and gamma_sync barriers. Every node binds
 * port 4 to BROADCAST and sends its number: each gathers the others'
 * (GO_AHEAD). Then rounds of barriers: before barrier k each node leaves
 * a file saying it got there (the last node after a pause, on odd
 * rounds); after it, every node finds every node's file. */
#include <gamma.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "check.h"

#define ROUNDS 5

static void mark(char *name, size_t size, int pid, int k, int node) {
  snprintf(name, size, "gamma-sync-%d-%d-%d", pid, k, node);
}

static int cmp(const void *a, const void *b) {
  return *(const unsigned char *)a - *(const unsigned char *)b;
}

int main(int argc, char **argv) {
  static unsigned char got[16];
  char name[64];
  int me, n, pid, k, j;
  FILE *f;

  OK(gamma_init(3, argc, argv));
  me = gamma_my_node();
  n = gamma_how_many_nodes();
  pid = gamma_my_par_pid();
  CHECK(n >= 2 && n <= 16);
  OK(gamma_set_passive_port(4, BROADCAST, pid, 4, 4, GO_AHEAD, got, n - 1));
  /* Files an earlier group of this parallel pid may have left. */
  for (k = 1; k <= ROUNDS; k++) {
    mark(name, sizeof name, pid, k, me);
    unlink(name);
  }
  OK(gamma_sync());

  {
    unsigned char mine = (unsigned char)me;
    OK(gamma_send(4, &mine, 1));
  }
  CHECK(gamma_wait(4, n - 1) == 0);
  qsort(got, n - 1, 1, cmp);
  for (j = 0, k = 0; j < n; j++)
    if (j != me)
      CHECK(got[k++] == j);
  printf("bcast: node %d of %d got the %d others' numbers\n", me, n, n - 1);

  for (k = 1; k <= ROUNDS; k++) {
    if (me == n - 1 && k % 2 == 1)
      usleep(20000);
    mark(name, sizeof name, pid, k, me);
    f = fopen(name, "w");
    CHECK(f != NULL);
    fclose(f);
    OK(gamma_sync());
    for (j = 0; j < n; j++) {
      mark(name, sizeof name, pid, k, j);
      CHECK(access(name, F_OK) == 0);
    }
  }
  OK(gamma_sync());
  for (k = 1; k <= ROUNDS; k++) {
    mark(name, sizeof name, pid, k, me);
    unlink(name);
  }
  printf("bcast: node %d passed %d barriers\n", me, ROUNDS);
  OK(gamma_exit());
  return 0;
}
