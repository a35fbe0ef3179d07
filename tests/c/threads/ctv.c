/* Thread-private variables in C: each thread (and the PE's main flow) has
 * its own value, zeroed in a new thread, kept across yields at one address.
 * Three threads per PE interleave; a handler on the main flow then checks
 * the main flow's value and prints a summary. The values differ from PE to
 * PE, and each PE checks its main flow's once every PE has set its own (it
 * waits for a message from each): PEs of one process (++ppn) sharing a
 * value would show. After their first yield, each thread reads the others'
 * values with CtvAccessOther, and the main flow its own. */
#include <converse.h>

#define THREADS 3

typedef struct {
  int x, y;
  double z;
} Point;

CtvExtern(int, depth); /* as a header would declare it */
CtvDeclare(int, depth);
CtvStaticDeclare(Point, pt);

CpvStaticDeclare(int, done);
CpvStaticDeclare(int, sum);
CpvStaticDeclare(int, check_handler);
CpvStaticDeclare(int, set_handler);
CpvStaticDeclare(int, threads_done); /* the last thread's message came */
CpvStaticDeclare(int, heard);        /* the PEs whose main flow set its value */

static int ids[THREADS] = {1, 2, 3};
CpvStaticDeclare(CthThread *, threads);

static void check(int ok, const char *what) {
  if (!ok) CmiAbort("PE %d: %s", CmiMyPe(), what);
}

/* The main flow's own value on this PE. */
static int main_value(void) { return 100 + CmiMyPe(); }

/* Once this PE's threads are done and every PE's main flow has set its
 * value. */
static void check_main(void) {
  if (!CpvAccess(threads_done) || CpvAccess(heard) != CmiNumPes()) return;
  check(CtvAccess(depth) == main_value(), "the main flow kept its own value");
  check(CtvAccess(pt).x == -1 - CmiMyPe(), "the main flow kept its own struct");
  CmiPrintf("ctv: PE %d: %d threads, sum %d, main flow kept %d\n", CmiMyPe(), CpvAccess(done),
            CpvAccess(sum), CtvAccess(depth));
  free(CpvAccess(threads));
  CsdExitScheduler();
}

static void last_thread_done(void *msg) {
  CmiFree(msg);
  CpvAccess(threads_done) = 1;
  check_main();
}

static void main_set(void *msg) {
  CmiFree(msg);
  CpvAccess(heard)++;
  check_main();
}

static void worker(void *arg) {
  int id = *(int *)arg;
  int value = 1000 * CmiMyPe() + id * 10;
  int *addr = &CtvAccess(depth);
  int i;
  check(CtvAccess(depth) == 0, "a new thread's int is zero");
  check(CtvAccess(pt).x == 0 && CtvAccess(pt).y == 0 && CtvAccess(pt).z == 0.0,
        "a new thread's struct is zero");
  CtvAccess(depth) = value;
  CtvAccess(pt).x = id;
  for (i = 0; i < 3; i++) {
    CthYield(); /* the others run and set their own values */
    check(CtvAccess(depth) == value, "a thread keeps its value across yields");
    check(CtvAccess(pt).x == id, "a thread keeps its struct across yields");
    check(&CtvAccess(depth) == addr, "a thread's value stays at one address");
    if (i == 0) { /* every thread has set its value and none has ended */
      int j;
      for (j = 0; j < THREADS; j++) {
        check(CtvAccessOther(CpvAccess(threads)[j], depth) == 1000 * CmiMyPe() + ids[j] * 10,
              "CtvAccessOther reads another thread's value");
        check(CtvAccessOther(CpvAccess(threads)[j], pt).x == ids[j],
              "CtvAccessOther reads another thread's struct");
      }
      check(&CtvAccessOther(CthSelf(), depth) == addr, "CtvAccessOther of oneself is CtvAccess");
    }
  }
  CpvAccess(sum) += CtvAccess(depth);
  if (++CpvAccess(done) == THREADS) {
    void *m = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiSetHandler(m, CpvAccess(check_handler));
    CmiSyncSendAndFree(CmiMyPe(), CmiMsgHeaderSizeBytes, m);
  }
}

static void start(int argc, char **argv) {
  int i;
  char set[CmiMsgHeaderSizeBytes];
  (void)argc;
  (void)argv;
  CpvInitialize(int, done);
  CpvInitialize(int, sum);
  CpvInitialize(int, check_handler);
  CpvInitialize(int, set_handler);
  CpvInitialize(int, threads_done);
  CpvInitialize(int, heard);
  CpvInitialize(CthThread *, threads);
  CpvAccess(threads) = (CthThread *)malloc(THREADS * sizeof(CthThread));
  CpvAccess(check_handler) = CmiRegisterHandler(last_thread_done);
  CpvAccess(set_handler) = CmiRegisterHandler(main_set);
  CtvInitialize(int, depth);
  CtvInitialize(Point, pt);
  check(CtvInitialized(depth) && CtvInitialized(pt), "CtvInitialized after CtvInitialize");
  CtvAccess(depth) = main_value();
  CtvAccess(pt).x = -1 - CmiMyPe();
  CmiSetHandler(set, CpvAccess(set_handler));
  CmiSyncBroadcastAll((int)sizeof set, set);
  check(&CtvAccessOther(CthSelf(), depth) == &CtvAccess(depth), "the main flow's CtvAccessOther");
  for (i = 0; i < THREADS; i++) CpvAccess(threads)[i] = CthCreate(worker, &ids[i], 0);
  for (i = 0; i < THREADS; i++) CthAwaken(CpvAccess(threads)[i]);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
