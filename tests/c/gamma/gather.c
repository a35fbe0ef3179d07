/* GO_AHEAD buffers. Node 1 sends; node 0 receives:
 *  - on active port 2, six 4-byte messages gathered two by two into three
 *    8-byte buffers, the receiver handler posting the next buffer
 *    (gamma_post_recv) each time one is full;
 *  - on passive port 3, messages gathered into 12 bytes of a 16-byte
 *    array, while the program writes into the part not yet filled and
 *    beyond the posted length: those bytes are kept; a message longer
 *    than the room left is cut (an error for gamma_wait) and the next
 *    one starts over at the beginning. */
#include <gamma.h>
#include <string.h>

#include "check.h"

static char posts[3][8];
static int gathered;

static void on_gather(void) {
  CHECK(gamma_active_port == 2);
  gathered++;
  if (gathered % 2 == 0 && gathered / 2 < 3)
    OK(gamma_post_recv(2, posts[gathered / 2], sizeof posts[0]));
}

static void on_error(void) {
  fprintf(stderr, "gather: error handler, gamma_errno %d\n", gamma_errno);
  exit(1);
}

/* Node 1 sends message `s` (if any) through port 3; node 0 then waits for
 * it and checks what gamma_wait returned and its buffer. */
static char g[17];

static void step(int me, const char *s, int want_wait, const char *want) {
  if (me == 1)
    OK(gamma_send(3, (void *)s, strlen(s)));
  OK(gamma_sync());
  if (me == 0) {
    int r = gamma_wait(3, 1);
    if (r != want_wait || memcmp(g, want, 16) != 0) {
      fprintf(stderr, "gather: after \"%s\": wait %d, buffer \"%.16s\"; want %d, \"%s\"\n",
              s, r, g, want_wait, want);
      exit(1);
    }
    printf("gather: \"%s\" -> \"%.16s\"\n", s, g);
  }
  OK(gamma_sync());
}

int main(int argc, char **argv) {
  int me, pid, k;

  OK(gamma_init(2, argc, argv));
  me = gamma_my_node();
  pid = gamma_my_par_pid();
  if (me == 0) {
    OK(gamma_set_active_port(2, 1, pid, 2, on_gather, on_error, 2, GO_AHEAD,
                             posts[0], sizeof posts[0]));
    memcpy(g, "............ZZZZ", 16);
    OK(gamma_set_passive_port(3, 1, pid, 3, 3, GO_AHEAD, g, 12));
  } else {
    OK(gamma_set_passive_port(2, 0, pid, 2, 0, GO_BACK, NULL, 0));
    OK(gamma_set_passive_port(3, 0, pid, 3, 0, GO_BACK, NULL, 0));
  }
  OK(gamma_sync());

  if (me == 1) {
    for (k = 0; k < 6; k++) {
      char m[4];
      memset(m, 'A' + k, sizeof m);
      OK(gamma_send(2, m, sizeof m));
    }
  } else {
    CHECK(gamma_wait(2, 6) == 0);
    CHECK(gathered == 6);
    CHECK(memcmp(posts[0], "AAAABBBB", 8) == 0);
    CHECK(memcmp(posts[1], "CCCCDDDD", 8) == 0);
    CHECK(memcmp(posts[2], "EEEEFFFF", 8) == 0);
    printf("gather: 6 messages filled 3 posts: %.8s %.8s %.8s\n", posts[0],
           posts[1], posts[2]);
  }
  OK(gamma_sync());

  step(me, "abcd", 0, "abcd........ZZZZ");
  if (me == 0)
    memcpy(g + 8, "XXXX", 4); /* not filled yet: the program's */
  step(me, "efgh", 0, "abcdefghXXXXZZZZ");
  step(me, "ijklmn", -1, "abcdefghijklZZZZ"); /* 4 bytes of room: cut */
  step(me, "op", 0, "opcdefghijklZZZZ");     /* starts over */
  OK(gamma_exit());
  if (me == 0)
    printf("gather: done\n");
  return 0;
}
