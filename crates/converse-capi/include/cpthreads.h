/*
 * cpthreads.h: Converse-POSIX threads (the extensions manual's chapter 9),
 * the pthreads API over Converse threads, over
 * crates/converse-capi/src/ext_cpthreads.rs (the Rust crate converse-ext).
 *
 *   start-up            CpthreadModuleInit, Cpthreads_start_main
 *                       (Cpthread_start_main)
 *   threads             Cpthread_t, Cpthread_create, Cpthread_self,
 *                       Cpthread_equal, Cpthread_join, Cpthread_detach,
 *                       Cpthread_exit, Cpthread_yield,
 *                       Cpthread_cleanup_push, Cpthread_cleanup_pop
 *   attributes          Cpthread_attr_t, Cpthread_attr_init, _destroy,
 *                       _getstacksize, _setstacksize, _getdetachstate,
 *                       _setdetachstate
 *   mutexes             Cpthread_mutex_t, CPTHREAD_MUTEX_INITIALIZER,
 *                       Cpthread_mutex_init, _destroy, _lock, _trylock,
 *                       _unlock; Cpthread_mutexattr_t, _init, _destroy,
 *                       _getpshared, _setpshared, _gettype, _settype
 *   condition variables Cpthread_cond_t, CPTHREAD_COND_INITIALIZER,
 *                       Cpthread_cond_init, _destroy, _wait, _timedwait,
 *                       _signal, _broadcast; Cpthread_condattr_t, _init,
 *                       _destroy, _getpshared, _setpshared
 *   thread-specific     Cpthread_key_t, Cpthread_key_create, _delete,
 *   data, once          Cpthread_setspecific, Cpthread_getspecific,
 *                       Cpthread_once_t, CPTHREAD_ONCE_INIT, Cpthread_once
 *
 * Unless SUPPRESS_PTHREADS is defined before including this header, the
 * pthread_* and PTHREAD_* names are macros for these (the system's
 * <pthread.h>, which converse.h includes, is read before them). In C++,
 * include the standard library's headers before this one (they use the
 * system's pthreads), or define SUPPRESS_PTHREADS.
 *
 * The manual's rules: call CpthreadModuleInit on every PE first; pthread
 * functions are called in pthreads only (run main as one with
 * Cpthreads_start_main); threads switch only when they block or yield (no
 * time-slicing). Everything is per PE: a thread, mutex, condition variable,
 * key or once belongs to the PE that made it (a once object runs its
 * function once per PE); using one on another PE ends the job. Errors are
 * returned as <errno.h> codes. Cpthread_exit runs the cleanup handlers
 * then unwinds the thread's C frames. There is no cancellation.
 */
#ifndef CONVERSE_RS_CPTHREADS_H
#define CONVERSE_RS_CPTHREADS_H

#include <stddef.h>
#include <time.h>

#include "converse.h"

#ifdef __cplusplus
extern "C" {
#endif

#define CPTHREAD_KEYS_MAX 1024
#define CPTHREAD_STACK_MIN 16384 /* bytes (0 is the job's default, +stacksize) */
#define CPTHREAD_CREATE_JOINABLE 0
#define CPTHREAD_CREATE_DETACHED 1
#define CPTHREAD_PROCESS_PRIVATE 0
#define CPTHREAD_PROCESS_SHARED 1 /* refused: ENOTSUP */
#define CPTHREAD_MUTEX_NORMAL 0
#define CPTHREAD_MUTEX_RECURSIVE 1
#define CPTHREAD_MUTEX_ERRORCHECK 2
#define CPTHREAD_MUTEX_DEFAULT CPTHREAD_MUTEX_NORMAL

typedef unsigned long Cpthread_t;
typedef unsigned int Cpthread_key_t;

/* Initialize these with their _init functions (plain data after). */
typedef struct Cpthread_attr_s {
  int magic;
  int detachstate;
  size_t stacksize;
} Cpthread_attr_t;
typedef struct Cpthread_mutexattr_s {
  int magic;
  int pshared;
  int type;
} Cpthread_mutexattr_t;
typedef struct Cpthread_condattr_s {
  int magic;
  int pshared;
} Cpthread_condattr_t;

/* The runtime's object lives behind impl (made by _init, or on the first
 * use of a statically initialized one; freed by _destroy). */
typedef struct Cpthread_mutex_s {
  int magic;
  int pe;
  void *impl;
} Cpthread_mutex_t;
typedef struct Cpthread_cond_s {
  int magic;
  int pe;
  void *impl;
} Cpthread_cond_t;
#define CPTHREAD_MUTEX_INITIALIZER {0, 0, 0}
#define CPTHREAD_COND_INITIALIZER {0, 0, 0}

/* Only its address counts. */
typedef struct Cpthread_once_s {
  int unused;
} Cpthread_once_t;
#define CPTHREAD_ONCE_INIT {0}

void CpthreadModuleInit(void);
/* Runs main(argc, argv) in a (detached) pthread of the calling PE; from the
 * start function, after CpthreadModuleInit. main's result is not read. */
void Cpthreads_start_main(CmiStartFn fn, int argc, char **argv);
#define Cpthreads_start_main(f, argc, argv)                                              \
  Cpthreads_start_main((CmiStartFn)(void (*)(void))(f), argc, argv)
#define Cpthread_start_main Cpthreads_start_main /* Charm++'s name */

int Cpthread_create(Cpthread_t *thread, const Cpthread_attr_t *attr, void *(*fn)(void *),
                    void *arg);
Cpthread_t Cpthread_self(void);
int Cpthread_equal(Cpthread_t t1, Cpthread_t t2);
int Cpthread_join(Cpthread_t thread, void **status);
int Cpthread_detach(Cpthread_t thread);
void Cpthread_exit(void *status) CMI_NORETURN;
int Cpthread_yield(void);
void Cpthread_cleanup_push(void (*routine)(void *), void *arg);
void Cpthread_cleanup_pop(int execute);

int Cpthread_attr_init(Cpthread_attr_t *attr);
int Cpthread_attr_destroy(Cpthread_attr_t *attr);
int Cpthread_attr_getstacksize(const Cpthread_attr_t *attr, size_t *size);
int Cpthread_attr_setstacksize(Cpthread_attr_t *attr, size_t size);
int Cpthread_attr_getdetachstate(const Cpthread_attr_t *attr, int *state);
int Cpthread_attr_setdetachstate(Cpthread_attr_t *attr, int state);

int Cpthread_mutexattr_init(Cpthread_mutexattr_t *mattr);
int Cpthread_mutexattr_destroy(Cpthread_mutexattr_t *mattr);
int Cpthread_mutexattr_getpshared(const Cpthread_mutexattr_t *mattr, int *pshared);
int Cpthread_mutexattr_setpshared(Cpthread_mutexattr_t *mattr, int pshared);
int Cpthread_mutexattr_gettype(const Cpthread_mutexattr_t *mattr, int *type);
int Cpthread_mutexattr_settype(Cpthread_mutexattr_t *mattr, int type);
int Cpthread_mutex_init(Cpthread_mutex_t *mutex, const Cpthread_mutexattr_t *mattr);
int Cpthread_mutex_destroy(Cpthread_mutex_t *mutex);
int Cpthread_mutex_lock(Cpthread_mutex_t *mutex);
int Cpthread_mutex_trylock(Cpthread_mutex_t *mutex);
int Cpthread_mutex_unlock(Cpthread_mutex_t *mutex);

int Cpthread_condattr_init(Cpthread_condattr_t *cattr);
int Cpthread_condattr_destroy(Cpthread_condattr_t *cattr);
int Cpthread_condattr_getpshared(const Cpthread_condattr_t *cattr, int *pshared);
int Cpthread_condattr_setpshared(Cpthread_condattr_t *cattr, int pshared);
int Cpthread_cond_init(Cpthread_cond_t *cond, const Cpthread_condattr_t *cattr);
int Cpthread_cond_destroy(Cpthread_cond_t *cond);
int Cpthread_cond_wait(Cpthread_cond_t *cond, Cpthread_mutex_t *mutex);
int Cpthread_cond_timedwait(Cpthread_cond_t *cond, Cpthread_mutex_t *mutex,
                            const struct timespec *abstime);
int Cpthread_cond_signal(Cpthread_cond_t *cond);
int Cpthread_cond_broadcast(Cpthread_cond_t *cond);

int Cpthread_key_create(Cpthread_key_t *key, void (*destructor)(void *));
int Cpthread_key_delete(Cpthread_key_t key);
int Cpthread_setspecific(Cpthread_key_t key, const void *value);
void *Cpthread_getspecific(Cpthread_key_t key);
int Cpthread_once(Cpthread_once_t *once, void (*fn)(void));

#ifdef __cplusplus
}
#endif

#ifndef SUPPRESS_PTHREADS

/* The system's names, taken over (its <pthread.h> was read before). */
#undef PTHREAD_KEYS_MAX
#undef PTHREAD_STACK_MIN
#undef PTHREAD_CREATE_JOINABLE
#undef PTHREAD_CREATE_DETACHED
#undef PTHREAD_PROCESS_PRIVATE
#undef PTHREAD_PROCESS_SHARED
#undef PTHREAD_MUTEX_NORMAL
#undef PTHREAD_MUTEX_RECURSIVE
#undef PTHREAD_MUTEX_ERRORCHECK
#undef PTHREAD_MUTEX_DEFAULT
#undef PTHREAD_MUTEX_INITIALIZER
#undef PTHREAD_COND_INITIALIZER
#undef PTHREAD_ONCE_INIT
#undef pthread_cleanup_push
#undef pthread_cleanup_pop

#define PTHREAD_KEYS_MAX CPTHREAD_KEYS_MAX
#define PTHREAD_STACK_MIN CPTHREAD_STACK_MIN
#define PTHREAD_CREATE_JOINABLE CPTHREAD_CREATE_JOINABLE
#define PTHREAD_CREATE_DETACHED CPTHREAD_CREATE_DETACHED
#define PTHREAD_PROCESS_PRIVATE CPTHREAD_PROCESS_PRIVATE
#define PTHREAD_PROCESS_SHARED CPTHREAD_PROCESS_SHARED
#define PTHREAD_MUTEX_NORMAL CPTHREAD_MUTEX_NORMAL
#define PTHREAD_MUTEX_RECURSIVE CPTHREAD_MUTEX_RECURSIVE
#define PTHREAD_MUTEX_ERRORCHECK CPTHREAD_MUTEX_ERRORCHECK
#define PTHREAD_MUTEX_DEFAULT CPTHREAD_MUTEX_DEFAULT
#define PTHREAD_MUTEX_INITIALIZER CPTHREAD_MUTEX_INITIALIZER
#define PTHREAD_COND_INITIALIZER CPTHREAD_COND_INITIALIZER
#define PTHREAD_ONCE_INIT CPTHREAD_ONCE_INIT

#define pthread_t Cpthread_t
#define pthread_attr_t Cpthread_attr_t
#define pthread_mutexattr_t Cpthread_mutexattr_t
#define pthread_condattr_t Cpthread_condattr_t
#define pthread_mutex_t Cpthread_mutex_t
#define pthread_cond_t Cpthread_cond_t
#define pthread_key_t Cpthread_key_t
#define pthread_once_t Cpthread_once_t

#define pthread_create Cpthread_create
#define pthread_self Cpthread_self
#define pthread_equal Cpthread_equal
#define pthread_join Cpthread_join
#define pthread_detach Cpthread_detach
#define pthread_exit Cpthread_exit
#define pthread_yield Cpthread_yield
#define pthread_cleanup_push Cpthread_cleanup_push
#define pthread_cleanup_pop Cpthread_cleanup_pop
#define pthread_attr_init Cpthread_attr_init
#define pthread_attr_destroy Cpthread_attr_destroy
#define pthread_attr_getstacksize Cpthread_attr_getstacksize
#define pthread_attr_setstacksize Cpthread_attr_setstacksize
#define pthread_attr_getdetachstate Cpthread_attr_getdetachstate
#define pthread_attr_setdetachstate Cpthread_attr_setdetachstate
#define pthread_mutexattr_init Cpthread_mutexattr_init
#define pthread_mutexattr_destroy Cpthread_mutexattr_destroy
#define pthread_mutexattr_getpshared Cpthread_mutexattr_getpshared
#define pthread_mutexattr_setpshared Cpthread_mutexattr_setpshared
#define pthread_mutexattr_gettype Cpthread_mutexattr_gettype
#define pthread_mutexattr_settype Cpthread_mutexattr_settype
#define pthread_mutex_init Cpthread_mutex_init
#define pthread_mutex_destroy Cpthread_mutex_destroy
#define pthread_mutex_lock Cpthread_mutex_lock
#define pthread_mutex_trylock Cpthread_mutex_trylock
#define pthread_mutex_unlock Cpthread_mutex_unlock
#define pthread_condattr_init Cpthread_condattr_init
#define pthread_condattr_destroy Cpthread_condattr_destroy
#define pthread_condattr_getpshared Cpthread_condattr_getpshared
#define pthread_condattr_setpshared Cpthread_condattr_setpshared
#define pthread_cond_init Cpthread_cond_init
#define pthread_cond_destroy Cpthread_cond_destroy
#define pthread_cond_wait Cpthread_cond_wait
#define pthread_cond_timedwait Cpthread_cond_timedwait
#define pthread_cond_signal Cpthread_cond_signal
#define pthread_cond_broadcast Cpthread_cond_broadcast
#define pthread_key_create Cpthread_key_create
#define pthread_key_delete Cpthread_key_delete
#define pthread_setspecific Cpthread_setspecific
#define pthread_getspecific Cpthread_getspecific
#define pthread_once Cpthread_once

#endif /* SUPPRESS_PTHREADS */

#endif /* CONVERSE_RS_CPTHREADS_H */
