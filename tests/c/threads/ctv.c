/* Thread-private variables in C: each thread (and the PE's main flow) has
 * its own value, zeroed in a new thread, kept across yields at one address.
 * Three threads per PE interleave; a handler on the main flow then checks
 * the main flow's value and prints a summary. */
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

static int ids[THREADS] = {1, 2, 3};

static void check(int ok, const char *what) {
  if (!ok) CmiAbort("PE %d: %s", CmiMyPe(), what);
}

static void check_main(void *msg) {
  CmiFree(msg);
  check(CtvAccess(depth) == 100, "the main flow kept its own value");
  check(CtvAccess(pt).x == -1, "the main flow kept its own struct");
  CmiPrintf("ctv: PE %d: %d threads, sum %d, main flow kept %d\n", CmiMyPe(), CpvAccess(done),
            CpvAccess(sum), CtvAccess(depth));
  CsdExitScheduler();
}

static void worker(void *arg) {
  int id = *(int *)arg;
  int *addr = &CtvAccess(depth);
  int i;
  check(CtvAccess(depth) == 0, "a new thread's int is zero");
  check(CtvAccess(pt).x == 0 && CtvAccess(pt).y == 0 && CtvAccess(pt).z == 0.0,
        "a new thread's struct is zero");
  CtvAccess(depth) = id * 10;
  CtvAccess(pt).x = id;
  for (i = 0; i < 3; i++) {
    CthYield(); /* the others run and set their own values */
    check(CtvAccess(depth) == id * 10, "a thread keeps its value across yields");
    check(CtvAccess(pt).x == id, "a thread keeps its struct across yields");
    check(&CtvAccess(depth) == addr, "a thread's value stays at one address");
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
  (void)argc;
  (void)argv;
  CpvInitialize(int, done);
  CpvInitialize(int, sum);
  CpvInitialize(int, check_handler);
  CpvAccess(check_handler) = CmiRegisterHandler(check_main);
  CtvInitialize(int, depth);
  CtvInitialize(Point, pt);
  check(CtvInitialized(depth) && CtvInitialized(pt), "CtvInitialized after CtvInitialize");
  CtvAccess(depth) = 100;
  CtvAccess(pt).x = -1;
  for (i = 0; i < THREADS; i++) CthAwaken(CthCreate(worker, &ids[i], 0));
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
