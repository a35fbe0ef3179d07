/* Non-blocking sends and their handles (gamma_isend*, gamma_wsend,
 * gamma_tsend), flow control, two-piece sends. Node 0 sends through port
 * 3 to node 1, which checks each message in its 4-byte buffer and posts
 * another (what gives a flow-controlled sender its turn back). */
#include <gamma.h>
#include <string.h>

#include "check.h"

/* Node 1 receives into these in turn, re-posting the other one. */
static char slots[2][4];
static int cur, seen;

/* Node 1: the next message is `want`. Re-posts with gamma_post_recv and
 * gamma_attach_buffer (the length stays 4) in turn. */
static void expect(const char *want) {
  CHECK(gamma_wait(3, 1) == 0);
  if (memcmp(slots[cur], want, 4) != 0) {
    fprintf(stderr, "isend: got \"%.4s\", want \"%.4s\"\n", slots[cur], want);
    exit(1);
  }
  cur ^= 1;
  if (seen++ % 2 == 0)
    OK(gamma_post_recv(3, slots[cur], sizeof slots[cur]));
  else
    OK(gamma_attach_buffer(3, slots[cur]));
}

int main(int argc, char **argv) {
  int me, pid, k, h, hs[5];
  char first[21];

  OK(gamma_init(2, argc, argv));
  me = gamma_my_node();
  pid = gamma_my_par_pid();
  if (me == 0)
    OK(gamma_set_passive_port(3, 1, pid, 3, 0, GO_BACK, NULL, 0));
  else
    OK(gamma_set_passive_port(3, 0, pid, 3, 3, GO_BACK, slots[0], 4));
  OK(gamma_sync());

  /* A plain non-blocking send completes at once. */
  if (me == 0) {
    h = gamma_isend(3, "plai", 4);
    CHECK(h > 0);
    CHECK(gamma_tsend(h) == 1);
    CHECK(gamma_wsend(h) == 0);
  } else {
    expect("plai");
  }
  OK(gamma_sync());

  /* Flow control: one message in flight; the others wait their turn. */
  if (me == 0) {
    for (k = 0; k < 5; k++) {
      char m[4] = {'f', 'c', '0', (char)('0' + k)};
      hs[k] = gamma_isend_flowctl(3, m, sizeof m);
      CHECK(hs[k] > 0);
    }
    CHECK(gamma_tsend(hs[0]) == 1); /* it went at once */
    /* The fifth needs four re-posts by node 1 first. */
    CHECK(gamma_tsend(hs[4]) == 0);
    for (k = 0; k < 5; k++)
      CHECK(gamma_wsend(hs[k]) == 0);
    CHECK(gamma_tsend(hs[4]) == 1);
    OK(gamma_send_flowctl(3, "sflo", 4));
    OK(gamma_send_2p_flowctl(3, "2p", 2, "fc", 2));
    h = gamma_isend_2p_flowctl(3, "i2", 2, "pf", 2);
    CHECK(h > 0);
    CHECK(gamma_wsend(h) == 0);
    printf("isend: 5 queued flow-controlled sends completed in turn\n");
  } else {
    expect("fc00");
    expect("fc01");
    expect("fc02");
    expect("fc03");
    expect("fc04");
    expect("sflo");
    expect("2pfc");
    expect("i2pf");
  }
  OK(gamma_sync());

  /* Two pieces, and refusals. */
  if (me == 0) {
    h = gamma_isend_2p(3, "ab", 2, "cd", 2);
    CHECK(h > 0);
    CHECK(gamma_wsend(h) == 0);
  }
  OK(gamma_sync());
  if (me == 1)
    expect("abcd");
  OK(gamma_sync());
  if (me == 0) {
    OK(gamma_send_2p(3, "twop", 4, "", 0));
    memset(first, 'x', sizeof first);
    printf("isend: refusals: first piece of 21 bytes %d, unknown handle %d %d\n",
           gamma_send_2p(3, first, sizeof first, "", 0), gamma_wsend(999999),
           gamma_tsend(0));
  } else {
    expect("twop");
  }
  OK(gamma_sync());
  OK(gamma_exit());
  if (me == 0)
    printf("isend: done\n");
  return 0;
}
