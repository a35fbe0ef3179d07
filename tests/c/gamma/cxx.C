// gamma.h from C++: one node, a port with a handler set from C++.
#include <gamma.h>

#include <cstdio>
#include <cstdlib>

static int calls = 0;
static void on_receive() { calls++; }

int main(int argc, char **argv) {
  static char buf[8];
  if (gamma_init(1, argc, argv) != 0)
    return 1;
  if (gamma_set_active_port(1, 0, 0, 0, on_receive, nullptr, 1, GO_AHEAD, buf,
                            sizeof buf) != 0)
    return 1;
  time_586 t;
  gamma_time(t);
  if (gamma_time_diff(t, t) != 0.0)
    return 1;
  int r = gamma_exit();
  std::printf("cxx: gamma_exit returned %d, %d handler calls\n", r, calls);
  return r;
}
