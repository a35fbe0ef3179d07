/* The C structs the extensions' headers define, as the test compares them
 * with the Rust definitions (size, and the offsets of the fields the
 * runtime reads). No job is started. */
#include <stddef.h>
#include <stdio.h>

#include <cpthreads.h>
#include <conv-cpath.h>

int main(void) {
  printf("Cfuture %zu %zu %zu\n", sizeof(Cfuture), offsetof(Cfuture, pe), offsetof(Cfuture, id));
  printf("CPath %zu %zu %zu %zu %zu\n", sizeof(CPath), offsetof(CPath, nsizes),
         offsetof(CPath, sizes), offsetof(CPath, seqno), offsetof(CPath, desc_));
  printf("Cpthread_attr_t %zu\n", sizeof(Cpthread_attr_t));
  printf("Cpthread_mutexattr_t %zu\n", sizeof(Cpthread_mutexattr_t));
  printf("Cpthread_condattr_t %zu\n", sizeof(Cpthread_condattr_t));
  printf("Cpthread_mutex_t %zu %zu\n", sizeof(Cpthread_mutex_t), offsetof(Cpthread_mutex_t, impl));
  printf("Cpthread_cond_t %zu %zu\n", sizeof(Cpthread_cond_t), offsetof(Cpthread_cond_t, impl));
  printf("Cpthread_t %zu\n", sizeof(Cpthread_t));
  printf("Cpthread_key_t %zu\n", sizeof(Cpthread_key_t));
  return 0;
}
