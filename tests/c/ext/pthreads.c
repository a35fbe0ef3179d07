/* Converse-POSIX threads: the manual's start-up (section 9.5: mymain runs
 * in the first pthread of each PE) around a POSIX program written with the
 * pthread_* names: producers and consumers sharing a bounded buffer under a
 * mutex and two condition variables, joins and results, pthread_exit with
 * a cleanup handler, a detached thread, thread-specific data with a
 * destructor, pthread_once, and the error codes. Each PE's mymain reports
 * to PE 0, which ends the job. */
#include <errno.h>
#include <converse.h>
#include <cpthreads.h>

#define PRODUCERS 3
#define CONSUMERS 2
#define ITEMS 40 /* per producer */
#define SLOTS 4

typedef struct {
  pthread_mutex_t lock;
  pthread_cond_t not_full, not_empty;
  int buf[SLOTS], head, count, produced_done, consumed;
  long sum;
} Buffer;

typedef struct {
  char header[CmiMsgHeaderSizeBytes];
  int pe;
  long sum;
  int ok;
} Report;

CpvStaticDeclare(int, report_handler);
CpvStaticDeclare(int, reports);
CpvStaticDeclare(int, once_runs);
CpvStaticDeclare(int, destructed);
CpvStaticDeclare(int, cleaned);
CpvStaticDeclare(pthread_key_t, key);

static pthread_once_t once = PTHREAD_ONCE_INIT; /* runs once per PE */

static void check(int ok, const char *what) {
  if (!ok) CmiAbort("pthreads on PE %d: %s", CmiMyPe(), what);
}

static void *producer(void *arg) {
  Buffer *b = (Buffer *)arg;
  int i;
  for (i = 1; i <= ITEMS; i++) {
    pthread_mutex_lock(&b->lock);
    while (b->count == SLOTS) pthread_cond_wait(&b->not_full, &b->lock);
    b->buf[(b->head + b->count) % SLOTS] = i;
    b->count++;
    pthread_cond_signal(&b->not_empty);
    pthread_mutex_unlock(&b->lock);
  }
  pthread_mutex_lock(&b->lock);
  b->produced_done++;
  pthread_cond_broadcast(&b->not_empty);
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

static void free_value(void *v) {
  CpvAccess(destructed) += *(int *)v;
  free(v);
}

static void *consumer(void *arg) {
  Buffer *b = (Buffer *)arg;
  int *mine = (int *)malloc(sizeof(int)), taken = 0;
  *mine = 0;
  pthread_setspecific(CpvAccess(key), mine);
  for (;;) {
    pthread_mutex_lock(&b->lock);
    while (b->count == 0 && b->produced_done < PRODUCERS) pthread_cond_wait(&b->not_empty, &b->lock);
    if (b->count == 0) {
      pthread_mutex_unlock(&b->lock);
      break;
    }
    b->sum += b->buf[b->head];
    b->head = (b->head + 1) % SLOTS;
    b->count--;
    b->consumed++;
    taken++;
    pthread_cond_signal(&b->not_full);
    pthread_mutex_unlock(&b->lock);
    ((int *)pthread_getspecific(CpvAccess(key)))[0]++;
    if (taken % 7 == 0) pthread_yield();
  }
  check(pthread_getspecific(CpvAccess(key)) == mine, "the thread's own value");
  return (void *)(long)taken;
}

static void cleanup(void *arg) { CpvAccess(cleaned) += *(int *)arg; }

static void *exiting(void *arg) {
  static int forty = 40;
  pthread_cleanup_push(cleanup, &forty);
  pthread_cleanup_push(cleanup, (int *)arg);
  pthread_exit((void *)42L);
  CmiAbort("pthread_exit returned");
  return NULL;
}

static void *detached(void *arg) {
  Buffer *b = (Buffer *)arg;
  pthread_mutex_lock(&b->lock);
  b->consumed = -1;
  pthread_cond_signal(&b->not_empty);
  pthread_mutex_unlock(&b->lock);
  return NULL;
}

static void *holder(void *arg) {
  pthread_mutex_t *m = (pthread_mutex_t *)arg;
  check(pthread_mutex_unlock(m) == EPERM, "unlocking another's mutex is EPERM");
  check(pthread_mutex_trylock(m) == EBUSY, "trylock of a held mutex is EBUSY");
  return NULL;
}

static void count_once(void) { CpvAccess(once_runs)++; }

static void on_report(void *m) {
  Report *r = (Report *)m;
  check(r->ok, "a PE's checks");
  CmiPrintf("PE %d: %d items consumed, sum %ld\n", r->pe, PRODUCERS * ITEMS, r->sum);
  CmiFree(r);
  if (++CpvAccess(reports) == CmiNumPes()) {
    CmiPrintf("pthreads: all %d PEs done\n", CmiNumPes());
    ConverseExit();
  }
}

int mymain(int argc, char **argv) {
  Buffer b;
  pthread_t producers[PRODUCERS], consumers[CONSUMERS], t;
  pthread_attr_t attr;
  pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutexattr_t ma;
  pthread_cond_t c = PTHREAD_COND_INITIALIZER;
  struct timespec soon;
  void *status;
  long taken = 0;
  int i, two = 2, detach_state;
  size_t stack;
  Report r;
  (void)argc;
  (void)argv;

  check(pthread_equal(pthread_self(), pthread_self()), "pthread_self is stable");
  pthread_once(&once, count_once);
  pthread_once(&once, count_once);
  check(CpvAccess(once_runs) == 1, "pthread_once runs once");
  check(pthread_key_create(&CpvAccess(key), free_value) == 0, "a key");

  memset(&b, 0, sizeof b);
  pthread_mutex_init(&b.lock, NULL);
  pthread_cond_init(&b.not_full, NULL);
  pthread_cond_init(&b.not_empty, NULL);
  for (i = 0; i < CONSUMERS; i++) pthread_create(&consumers[i], NULL, consumer, &b);
  for (i = 0; i < PRODUCERS; i++) pthread_create(&producers[i], NULL, producer, &b);
  for (i = 0; i < PRODUCERS; i++) check(pthread_join(producers[i], NULL) == 0, "join a producer");
  for (i = 0; i < CONSUMERS; i++) {
    check(pthread_join(consumers[i], &status) == 0, "join a consumer");
    taken += (long)status;
  }
  check(taken == PRODUCERS * ITEMS && b.consumed == PRODUCERS * ITEMS, "every item consumed once");
  check(b.sum == PRODUCERS * ITEMS * (ITEMS + 1) / 2, "the sum of the items");
  check(CpvAccess(destructed) == PRODUCERS * ITEMS, "the key's destructor got every value");

  /* pthread_exit: the cleanup handlers run, last pushed first; the joiner
   * gets the status. */
  pthread_create(&t, NULL, exiting, &two);
  check(pthread_join(t, &status) == 0 && status == (void *)42L, "pthread_exit's status");
  check(CpvAccess(cleaned) == 42, "both cleanup handlers ran");
  check(pthread_join(t, NULL) == ESRCH, "a joined thread is gone");

  /* A detached thread, with a stack size of its own. */
  pthread_attr_init(&attr);
  check(pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED) == 0, "detach state");
  check(pthread_attr_setstacksize(&attr, PTHREAD_STACK_MIN - 1) == EINVAL, "too small a stack");
  check(pthread_attr_setstacksize(&attr, 4 * PTHREAD_STACK_MIN) == 0, "a stack size");
  pthread_attr_getstacksize(&attr, &stack);
  pthread_attr_getdetachstate(&attr, &detach_state);
  check(stack == 4 * PTHREAD_STACK_MIN && detach_state == PTHREAD_CREATE_DETACHED, "attributes");
  pthread_mutex_lock(&b.lock);
  pthread_create(&t, &attr, detached, &b);
  while (b.consumed != -1) pthread_cond_wait(&b.not_empty, &b.lock);
  pthread_mutex_unlock(&b.lock);
  i = pthread_join(t, NULL);
  check(i == EINVAL || i == ESRCH, "a detached thread is not joined");
  pthread_attr_destroy(&attr);

  /* Error codes; statically initialized objects. */
  check(pthread_mutex_lock(&m) == 0, "lock a statically initialized mutex");
  check(pthread_mutex_lock(&m) == EDEADLK, "relocking a normal mutex is EDEADLK");
  pthread_create(&t, NULL, holder, &m);
  pthread_join(t, NULL);
  check(pthread_mutex_destroy(&m) == EBUSY, "destroying a held mutex is EBUSY");
  clock_gettime(CLOCK_REALTIME, &soon);
  soon.tv_nsec += 5 * 1000 * 1000;
  if (soon.tv_nsec >= 1000 * 1000 * 1000) {
    soon.tv_sec++;
    soon.tv_nsec -= 1000 * 1000 * 1000;
  }
  check(pthread_cond_timedwait(&c, &m, &soon) == ETIMEDOUT, "a timed wait with no signal");
  check(pthread_mutex_unlock(&m) == 0, "the timed wait relocked the mutex");
  check(pthread_mutex_destroy(&m) == 0 && pthread_cond_destroy(&c) == 0, "destroy");
  pthread_mutexattr_init(&ma);
  check(pthread_mutexattr_settype(&ma, PTHREAD_MUTEX_RECURSIVE) == 0, "a recursive mutex");
  pthread_mutex_init(&m, &ma);
  check(pthread_mutex_lock(&m) == 0 && pthread_mutex_lock(&m) == 0, "relock a recursive mutex");
  check(pthread_mutex_unlock(&m) == 0 && pthread_mutex_unlock(&m) == 0, "unlock it twice");
  pthread_mutex_destroy(&m);
  pthread_mutexattr_destroy(&ma);
  pthread_mutex_destroy(&b.lock);
  pthread_cond_destroy(&b.not_full);
  pthread_cond_destroy(&b.not_empty);
  pthread_key_delete(CpvAccess(key));

  memset(&r, 0, sizeof r);
  r.pe = CmiMyPe();
  r.sum = b.sum;
  r.ok = 1;
  CmiSetHandler(&r, CpvAccess(report_handler));
  CmiSyncSend(0, sizeof r, &r);
  return 0;
}

void mystartup(int argc, char **argv)
{
    CpvInitialize(int, report_handler);
    CpvInitialize(int, reports);
    CpvInitialize(int, once_runs);
    CpvInitialize(int, destructed);
    CpvInitialize(int, cleaned);
    CpvInitialize(pthread_key_t, key);
    CpvAccess(report_handler) = CmiRegisterHandler(on_report);
    CpthreadModuleInit();
    Cpthreads_start_main(mymain, argc, argv);
}

int main(int argc, char **argv)
{
    ConverseInit(argc, argv, mystartup, 0, 0);
    return 0;
}
