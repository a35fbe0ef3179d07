/* What the GAMMA test programs share: a check that names the node and the
 * line, and ends the program (failing the job) when it does not hold. */
#ifndef GAMMA_TEST_CHECK_H
#define GAMMA_TEST_CHECK_H

#include <stdio.h>
#include <stdlib.h>

#define CHECK(cond)                                                        \
  do {                                                                     \
    if (!(cond)) {                                                         \
      fprintf(stderr, "node %d: %s:%d: check failed: %s\n",              \
              gamma_my_node(), __FILE__, __LINE__, #cond);                 \
      fflush(stderr);                                                      \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

/* A call that must succeed (return 0). */
#define OK(call)                                                           \
  do {                                                                     \
    int rc_ = (call);                                                      \
    if (rc_ != 0) {                                                        \
      fprintf(stderr, "node %d: %s:%d: %s returned %d\n", gamma_my_node(), \
              __FILE__, __LINE__, #call, rc_);                             \
      fflush(stderr);                                                      \
      exit(1);                                                             \
    }                                                                      \
  } while (0)

#endif
