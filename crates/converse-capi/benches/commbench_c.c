/* The C side of `cargo bench -p converse-capi --bench commbench_c`: the
 * operations of the side-by-side table with Charm++ (docs/benchmarks.md),
 * each written the way Charm++'s benchmarks/converse programs write it
 * (commbench's overhead, ctxt and smputil, pingpong), so that a
 * regression of the C path shows in CI's quick benchmark step. Run with
 * +p 2; PE 0 prints one line per figure, `<name> <value>`:
 *   send_free_self_<size>_ns  CmiSyncSendAndFree to its own PE + dispatch
 *   enqueue_self_ns           CsdEnqueue + dispatch
 *   yield_ns                  CthYield of the main thread, nothing else to run
 *   node_barrier_ns           CmiNodeBarrier of both PEs
 *   forward_<size>_us         one way of a ping-pong whose handlers forward
 *                             the message they received (CmiSyncSendAndFree)
 * Each figure is the best of RUNS timed loops after an untimed tenth; each
 * PE thread is pinned to the CPU of its number. Arguments after +p 2: the
 * operations per loop, and the round trips per forwarding loop. */
#define _GNU_SOURCE
#include <converse.h>
#include <sched.h>

#define RUNS 3

static long ops = 1000000;
static long round_trips = 2000;

CpvStaticDeclare(int, h_self);
CpvStaticDeclare(int, h_enqueue);
CpvStaticDeclare(int, h_forward);
CpvStaticDeclare(long, left);
CpvStaticDeclare(int, msg_size);

/* Seconds of `f(n)` at its best of RUNS, after one untimed tenth. */
static double best_of(double (*f)(long), long n) {
  double best = 1e30, t;
  int run;
  f(n / 10 + 1);
  for (run = 0; run < RUNS; run++) {
    t = f(n);
    if (t < best) best = t;
  }
  return best;
}

/* overhead.c's free_handler: send the message on to this PE until done. */
static void self_handler(void *msg) {
  if (--CpvAccess(left) <= 0) {
    CmiFree(msg);
    CsdExitScheduler();
    return;
  }
  CmiSyncSendAndFree(CmiMyPe(), CpvAccess(msg_size), msg);
}

/* overhead.c's enqueue_handler. */
static void enqueue_handler(void *msg) {
  if (--CpvAccess(left) <= 0) {
    CmiFree(msg);
    CsdExitScheduler();
    return;
  }
  CsdEnqueue(msg);
}

/* One loop of `n` messages of the current size through `handler`, the
 * first sent with CmiSyncSendAndFree or, if `enqueue`, CsdEnqueue. */
static double self_loop(long n, int handler, int enqueue) {
  double t0;
  void *m = CmiAlloc(CpvAccess(msg_size));
  CmiSetHandler(m, handler);
  CpvAccess(left) = n;
  t0 = CmiWallTimer();
  if (enqueue) CsdEnqueue(m);
  else CmiSyncSendAndFree(CmiMyPe(), CpvAccess(msg_size), m);
  CsdScheduler(-1);
  return CmiWallTimer() - t0;
}

static double send_free_loop(long n) { return self_loop(n, CpvAccess(h_self), 0); }
static double enqueue_loop(long n) { return self_loop(n, CpvAccess(h_enqueue), 1); }

/* ctxt.c: the main thread yields with nothing else to run. */
static double yield_loop(long n) {
  double t0 = CmiWallTimer();
  long i;
  for (i = 0; i < n; i++) CthYield();
  return CmiWallTimer() - t0;
}

/* smputil.c: both PEs go through `n` node barriers. */
static double barrier_loop(long n) {
  double t0 = CmiWallTimer();
  long i;
  for (i = 0; i < n; i++) CmiNodeBarrier();
  return CmiWallTimer() - t0;
}

/* pingpong: each PE sends what it received back to the other; PE 0 counts
 * round trips and stops both schedulers (PE 1 stops on a message of the
 * header alone, which is never a ping). */
static void forward_handler(void *msg) {
  if (CmiMyPe() == 1) {
    if (CmiSize(msg) == CmiMsgHeaderSizeBytes) {
      CmiFree(msg);
      CsdExitScheduler();
      return;
    }
    CmiSyncSendAndFree(0, CmiSize(msg), msg);
    return;
  }
  if (--CpvAccess(left) <= 0) {
    void *stop = CmiAlloc(CmiMsgHeaderSizeBytes);
    CmiFree(msg);
    CmiSetHandler(stop, CpvAccess(h_forward));
    CmiSyncSendAndFree(1, CmiMsgHeaderSizeBytes, stop);
    CsdExitScheduler();
    return;
  }
  CmiSyncSendAndFree(1, CmiSize(msg), msg);
}

static double forward_loop(long n) {
  double t0;
  void *m = CmiAlloc(CpvAccess(msg_size));
  CmiSetHandler(m, CpvAccess(h_forward));
  CpvAccess(left) = n;
  t0 = CmiWallTimer();
  CmiSyncSendAndFree(1, CpvAccess(msg_size), m);
  CsdScheduler(-1);
  return CmiWallTimer() - t0;
}

static void start(int argc, char **argv) {
  static const int self_sizes[] = {0, 256};
  static const int forward_sizes[] = {1 << 20, 8 << 20};
  cpu_set_t cpus;
  int i, k;
  CPU_ZERO(&cpus);
  CPU_SET(CmiMyPe() % CPU_SETSIZE, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus); /* best effort */
  if (argc > 1) ops = atol(argv[1]);
  if (argc > 2) round_trips = atol(argv[2]);
  CpvInitialize(int, h_self);
  CpvInitialize(int, h_enqueue);
  CpvInitialize(int, h_forward);
  CpvInitialize(long, left);
  CpvInitialize(int, msg_size);
  CpvAccess(h_self) = CmiRegisterHandler(self_handler);
  CpvAccess(h_enqueue) = CmiRegisterHandler(enqueue_handler);
  CpvAccess(h_forward) = CmiRegisterHandler(forward_handler);

  /* Both PEs: the barrier, timed on PE 0. */
  {
    double t = best_of(barrier_loop, ops / 10);
    if (CmiMyPe() == 0) CmiPrintf("node_barrier_ns %.3f\n", t * 1e9 / (double)(ops / 10));
  }
  if (CmiMyPe() != 0) {
    /* PE 1 forwards until PE 0's last loop stops it, once per loop. */
    for (k = 0; k < 2 * (RUNS + 1); k++) CsdScheduler(-1);
    return;
  }
  for (i = 0; i < 2; i++) {
    CpvAccess(msg_size) = CmiMsgHeaderSizeBytes + self_sizes[i];
    CmiPrintf("send_free_self_%dB_ns %.3f\n", self_sizes[i],
              best_of(send_free_loop, ops) * 1e9 / (double)ops);
  }
  CpvAccess(msg_size) = CmiMsgHeaderSizeBytes;
  CmiPrintf("enqueue_self_ns %.3f\n", best_of(enqueue_loop, ops) * 1e9 / (double)ops);
  CmiPrintf("yield_ns %.3f\n", best_of(yield_loop, ops) * 1e9 / (double)ops);
  for (i = 0; i < 2; i++) {
    CpvAccess(msg_size) = CmiMsgHeaderSizeBytes + forward_sizes[i];
    CmiPrintf("forward_%dMiB_us %.4f\n", forward_sizes[i] >> 20,
              best_of(forward_loop, round_trips) * 1e6 / (double)(2 * round_trips));
  }
  ConverseExit();
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
