/* The C API's side of `cargo bench -p converse-capi --bench capi`: a
 * self-send loop and an 8-byte ping-pong between two PEs, written as a C
 * Converse program writes them. PE 0 times each (best of RUNS, after an
 * untimed tenth) and prints
 *   self_send_ns <ns per message>
 *   pingpong_rtt_us <microseconds per round trip>
 *   csv_access_ns <ns per increment of a Csv variable>
 *   cpv_access_ns <ns per increment of a Cpv variable>
 * Each PE thread is pinned to the CPU of its number (as the Rust side of
 * the benchmark pins its PEs). Arguments: +p 2 [self-send count] [rounds]. */
#define _GNU_SOURCE
#include <converse.h>
#include <sched.h>

#define RUNS 3

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  char payload[8];
} Msg;

CpvStaticDeclare(long, cpv_counter);
CsvStaticDeclare(long, csv_counter);

/* Nanoseconds per increment of a Cpv (`cpv`) or a Csv variable, the
 * variable looked up at every increment (the empty asm says memory may
 * have changed, so neither the access nor the address is kept across
 * iterations). */
static double access_ns(int cpv, long n) {
  double t0 = CmiWallTimer();
  long i;
  for (i = 0; i < n; i++) {
    if (cpv) CpvAccess(cpv_counter)++;
    else CsvAccess(csv_counter)++;
    __asm__ __volatile__("" ::: "memory");
  }
  return (CmiWallTimer() - t0) * 1e9 / (double)n;
}

static long self_count = 2000000;
static long rounds = 200000;

CpvStaticDeclare(int, h_self);
CpvStaticDeclare(int, h_ping);
CpvStaticDeclare(int, h_pong);
CpvStaticDeclare(long, left);

static void self_handler(void *msg) {
  if (--CpvAccess(left) <= 0) {
    CmiFree(msg);
    CsdExitScheduler();
    return;
  }
  CmiSyncSendAndFree(CmiMyPe(), sizeof(Msg), msg);
}

/* On PE 1: send it straight back. */
static void ping_handler(void *msg) {
  CmiSetHandler(msg, CpvAccess(h_pong));
  CmiSyncSendAndFree(0, sizeof(Msg), msg);
}

/* On PE 0: count the round trip, send the next. */
static void pong_handler(void *msg) {
  if (--CpvAccess(left) <= 0) {
    CmiFree(msg);
    CsdExitScheduler();
    return;
  }
  CmiSetHandler(msg, CpvAccess(h_ping));
  CmiSyncSendAndFree(1, sizeof(Msg), msg);
}

static double self_send_once(long n) {
  double t0;
  Msg *m = (Msg *)CmiAlloc(sizeof(Msg));
  CmiSetHandler(m, CpvAccess(h_self));
  CpvAccess(left) = n;
  t0 = CmiWallTimer();
  CmiSyncSendAndFree(CmiMyPe(), sizeof(Msg), m);
  CsdScheduler(-1);
  return CmiWallTimer() - t0;
}

static double pingpong_once(long n) {
  double t0;
  Msg *m = (Msg *)CmiAlloc(sizeof(Msg));
  CmiSetHandler(m, CpvAccess(h_ping));
  CpvAccess(left) = n;
  t0 = CmiWallTimer();
  CmiSyncSendAndFree(1, sizeof(Msg), m);
  CsdScheduler(-1);
  return CmiWallTimer() - t0;
}

static void start(int argc, char **argv) {
  cpu_set_t cpus;
  int run;
  CPU_ZERO(&cpus);
  CPU_SET(CmiMyPe() % CPU_SETSIZE, &cpus);
  sched_setaffinity(0, sizeof cpus, &cpus); /* best effort */
  if (argc > 1) self_count = atol(argv[1]);
  if (argc > 2) rounds = atol(argv[2]);
  CpvInitialize(int, h_self);
  CpvInitialize(int, h_ping);
  CpvInitialize(int, h_pong);
  CpvInitialize(long, left);
  CpvInitialize(long, cpv_counter);
  CsvInitialize(long, csv_counter);
  CpvAccess(h_self) = CmiRegisterHandler(self_handler);
  CpvAccess(h_ping) = CmiRegisterHandler(ping_handler);
  CpvAccess(h_pong) = CmiRegisterHandler(pong_handler);
  if (CmiMyPe() == 0) {
    double best = 1e30, t;
    self_send_once(self_count / 10 + 1);
    for (run = 0; run < RUNS; run++) {
      t = self_send_once(self_count);
      if (t < best) best = t;
    }
    CmiPrintf("self_send_ns %.3f\n", best * 1e9 / (double)self_count);
    best = 1e30;
    pingpong_once(rounds / 10 + 1);
    for (run = 0; run < RUNS; run++) {
      t = pingpong_once(rounds);
      if (t < best) best = t;
    }
    CmiPrintf("pingpong_rtt_us %.4f\n", best * 1e6 / (double)rounds);
    {
      /* In turns, the best of RUNS each, after one untimed round. */
      double csv = 1e30, cpv = 1e30;
      access_ns(0, self_count / 10 + 1);
      access_ns(1, self_count / 10 + 1);
      for (run = 0; run < RUNS; run++) {
        t = access_ns(0, 10 * self_count);
        if (t < csv) csv = t;
        t = access_ns(1, 10 * self_count);
        if (t < cpv) cpv = t;
      }
      CmiPrintf("csv_access_ns %.4f\ncpv_access_ns %.4f\n", csv, cpv);
    }
    ConverseExit();
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
