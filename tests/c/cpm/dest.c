/* Every kind of CPM destination:
 *
 * 1. CpmSend to one PE, to CpmALL, to CpmOTHERS: PE 0 counts who answered.
 * 2. Every CpmEnqueue* (each PE, to itself): the order the queued calls
 *    ran in, batch by batch, against the order their priorities and
 *    strategies give (messages a PE sends itself all arrive before the
 *    queue runs, so the order is the queue's).
 * 3. CpmMakeThread and CpmMakeThreadSize (each PE, to itself): the calls
 *    run in threads that yield to each other, and one blocks until a
 *    reply from another PE awakens it.
 * 4. Destinations of the program's own (the manual's 6.3): one whose send
 *    function keeps a tag in the envelope and detours the message through
 *    its own handler, and one that calls the function at once; each
 *    launcher returns what its send function returned.
 * 5. CpmEnqueue and CpmMakeThread to every PE (CpmALL).
 *
 * The phases run one after the other, started by PE 0. */
#include <converse.h>
#include <conv-cpm.h>

CpmDeclareSimple(CthThread);
#define CpmPack_CthThread(v) ((void)(v))
#define CpmUnpack_CthThread(v) ((void)(v))

#include "dest.cpm.h"

typedef struct {
  int tags[8];
} Log;

CpvStaticDeclare(int, answers);
CpvStaticDeclare(Log, ran);
CpvStaticDeclare(int, nran);
CpvStaticDeclare(int, batch);
CpvStaticDeclare(int, bad);
CpvStaticDeclare(int, reply);
CpvStaticDeclare(int, tag_seen);
CpvStaticDeclare(int, tagged_index);

static void next_phase(int phase);

/* ---- 1. CpmSend ----------------------------------------------------------- */

CpmInvokable finish(void) { CsdExitScheduler(); }

CpmInvokable answered(int phase, int pe) {
  (void)pe;
  CpvAccess(answers)++;
  /* Phase 1 expects N (CpmALL) + N - 1 (CpmOTHERS) + 1 (one PE) answers;
   * phases 2, 3, 5 and 6 one from each PE; phase 4 one. */
  if (phase == 1 && CpvAccess(answers) == 2 * CmiNumPes()) {
    CmiPrintf("PE 0: CpmSend: %d answers to CpmALL, CpmOTHERS and one PE\n", CpvAccess(answers));
    next_phase(2);
  } else if (phase != 1 && phase != 4 && CpvAccess(answers) == CmiNumPes()) {
    next_phase(phase + 1);
  } else if (phase == 4) {
    next_phase(5);
  }
}

CpmInvokable hello(CpmStr how) {
  CmiPrintf("PE %d: hello via %s\n", CmiMyPe(), how);
  Cpm_answered(CpmSend(0), 1, CmiMyPe());
}

/* ---- 2. CpmEnqueue* --------------------------------------------------------- */

static const char *const batch_names[] = {"FIFO", "LIFO", "IFIFO", "ILIFO", "B", "general"};
static const int batch_sizes[] = {3, 3, 8, 4, 4, 4};
#define BATCHES 6

static void start_batch(int b);

/* A queued call: `tag` is the place it must run in. */
CpmInvokable queued(int b, int tag) {
  int i, me = CmiMyPe();
  char line[128];
  size_t used;
  if (b != CpvAccess(batch)) CpvAccess(bad)++;
  CpvAccess(ran).tags[CpvAccess(nran)++] = tag;
  if (CpvAccess(nran) < batch_sizes[b]) return;
  used = (size_t)snprintf(line, sizeof line, "PE %d: %s ran", me, batch_names[b]);
  for (i = 0; i < CpvAccess(nran); i++) {
    used += (size_t)snprintf(line + used, sizeof line - used, " %d", CpvAccess(ran).tags[i]);
    if (CpvAccess(ran).tags[i] != i) CpvAccess(bad)++;
  }
  CmiPrintf("%s\n", line);
  if (b + 1 < BATCHES) {
    start_batch(b + 1);
  } else {
    CmiPrintf("PE %d: CpmEnqueue: %d out of order\n", me, CpvAccess(bad));
    Cpm_answered(CpmSend(0), 2, me);
  }
}

static void start_batch(int b) {
  int me = CmiMyPe();
  CpvAccess(batch) = b;
  CpvAccess(nran) = 0;
  switch (b) {
  case 0:
    Cpm_queued(CpmEnqueueFIFO(me), b, 0);
    Cpm_queued(CpmEnqueueFIFO(me), b, 1);
    Cpm_queued(CpmEnqueueFIFO(me), b, 2);
    break;
  case 1:
    Cpm_queued(CpmEnqueueLIFO(me), b, 2);
    Cpm_queued(CpmEnqueueLIFO(me), b, 1);
    Cpm_queued(CpmEnqueueLIFO(me), b, 0);
    break;
  case 2: {
    /* Charm++'s priotest: integer priorities, sent out of order. */
    static const int prios[8] = {1, 5, 2, 4, 3, 6, 0, 7};
    int i;
    for (i = 0; i < 8; i++) Cpm_queued(CpmEnqueueIFIFO(me, prios[i]), b, prios[i]);
    break;
  }
  case 3:
    /* Equal priorities LIFO; a more urgent one first. */
    Cpm_queued(CpmEnqueueILIFO(me, 3), b, 3);
    Cpm_queued(CpmEnqueueILIFO(me, 3), b, 2);
    Cpm_queued(CpmEnqueueILIFO(me, -5), b, 0);
    Cpm_queued(CpmEnqueueILIFO(me, 3), b, 1);
    break;
  case 4: {
    /* Bit-vector priorities, most significant bit first: .11 after the
     * middle (.1, FIFO's), .0 before it; .10 is the middle itself, and
     * LIFO goes in front of its equals. */
    unsigned int p11 = 0xC0000000u, p0 = 0, p10 = 0x80000000u;
    Cpm_queued(CpmEnqueueBFIFO(me, 2, &p11), b, 3);
    Cpm_queued(CpmEnqueueFIFO(me), b, 2);
    Cpm_queued(CpmEnqueueBFIFO(me, 1, &p0), b, 0);
    Cpm_queued(CpmEnqueueBLIFO(me, 2, &p10), b, 1);
    break;
  }
  case 5: {
    /* CpmEnqueue itself, and the 64-bit kinds. */
    unsigned int two = 2;
    long long urgent = -(1LL << 40), late = 1LL << 40;
    Cpm_queued(CpmEnqueue(me, CQS_QUEUEING_IFIFO, 32, &two), b, 2);
    Cpm_queued(CpmEnqueueLLIFO(me, 64, (unsigned int *)(void *)&late), b, 3);
    Cpm_queued(CpmEnqueue(me, CQS_QUEUEING_FIFO, 0, NULL), b, 1);
    Cpm_queued(CpmEnqueueLFIFO(me, 64, (unsigned int *)(void *)&urgent), b, 0);
    break;
  }
  }
}

CpmInvokable enqueue_batches(void) {
  CpvAccess(bad) = 0;
  start_batch(0);
}

/* ---- 3. CpmMakeThread --------------------------------------------------------- */

CpmInvokable pong(CthThread t, int value) {
  CpvAccess(reply) = value;
  CthAwaken(t);
}

CpmInvokable ping(int from, CthThread t) { Cpm_pong(CpmSend(from), t, 100 * CmiMyPe()); }

CpmInvokable worker(int id) {
  int me = CmiMyPe();
  CpvAccess(ran).tags[CpvAccess(nran)++] = 10 * id + 1;
  if (CthIsMainThread(CthSelf())) CpvAccess(bad)++;
  CthYield();
  CpvAccess(ran).tags[CpvAccess(nran)++] = 10 * id + 2;
  if (id == 2) {
    /* Block until the next PE replies. */
    int other = (me + 1) % CmiNumPes();
    Cpm_ping(CpmSend(other), me, CthSelf());
    CthSuspend();
    CmiPrintf("PE %d: thread order %d %d %d %d, reply %d, %s\n", me, CpvAccess(ran).tags[0],
              CpvAccess(ran).tags[1], CpvAccess(ran).tags[2], CpvAccess(ran).tags[3], CpvAccess(reply),
              CpvAccess(bad) ? "a call ran in the main flow" : "in threads");
    Cpm_answered(CpmSend(0), 3, me);
  }
}

CpmInvokable threads(void) {
  int me = CmiMyPe();
  CpvAccess(nran) = 0;
  CpvAccess(bad) = 0;
  Cpm_worker(CpmMakeThread(me), 1);
  Cpm_worker(CpmMakeThreadSize(me, 256 * 1024), 2);
}

/* ---- 4. destinations of the program's own ------------------------------------- */

/* The manual's layout: the send function, the envelope size, then our own
 * fields. */
typedef struct {
  CpmSender sendfn;
  int envsize;
  int pe;
  int tag;
} TaggedDestination;

CpvStaticDeclare(TaggedDestination, tagged);
static int tagged_result, direct_result;

static void *tagged_send(CpmDestination dest, int len, void *msg) {
  TaggedDestination *d = (TaggedDestination *)(void *)dest;
  int *env = (int *)CpmEnv(msg);
  env[0] = (int)CmiGetHandler(msg);
  env[1] = d->tag;
  CmiSetHandler(msg, CpvAccess(tagged_index));
  CmiSyncSendAndFree(d->pe, len, msg);
  return &tagged_result;
}

static void tagged_arrived(void *msg) {
  int *env = (int *)CpmEnv(msg);
  CpvAccess(tag_seen) = env[1];
  CmiSetHandler(msg, env[0]);
  CmiGetHandlerFunction(msg)(msg);
}

static CpmDestination CpmTagged(int pe, int tag) {
  CpvAccess(tagged).sendfn = tagged_send;
  CpvAccess(tagged).envsize = 2 * sizeof(int);
  CpvAccess(tagged).pe = pe;
  CpvAccess(tagged).tag = tag;
  return (CpmDestination)(void *)&CpvAccess(tagged);
}

/* No envelope: the function runs now, on this PE. */
static void *direct_send(CpmDestination dest, int len, void *msg) {
  (void)dest;
  (void)len;
  CmiGetHandlerFunction(msg)(msg);
  return &direct_result;
}

static struct CpmDestinationStruct direct = {direct_send, 0};

CpmInvokable right_now(int n) { CmiPrintf("PE %d: right_now(%d) called\n", CmiMyPe(), n); }

CpmInvokable tagged_call(int n) {
  CmiPrintf("PE %d: tagged_call(%d) arrived with tag %d\n", CmiMyPe(), n, CpvAccess(tag_seen));
  Cpm_answered(CpmSend(0), 4, CmiMyPe());
}

/* ---- 5. CpmEnqueue and CpmMakeThread to every PE ------------------------- */

CpmInvokable everywhere(int phase, CpmStr how) {
  CmiPrintf("PE %d: %s%s\n", CmiMyPe(), how, CthIsMainThread(CthSelf()) ? "" : " (thread)");
  Cpm_answered(CpmSend(0), phase, CmiMyPe());
}

/* ---- the phases ---------------------------------------------------------- */

static void next_phase(int phase) {
  int n = CmiNumPes();
  void *r;
  CpvAccess(answers) = 0;
  switch (phase) {
  case 1:
    Cpm_hello(CpmSend(CpmALL), "CpmALL");
    Cpm_hello(CpmSend(CpmOTHERS), "CpmOTHERS");
    Cpm_hello(CpmSend(n - 1), "one PE");
    break;
  case 2:
    Cpm_enqueue_batches(CpmSend(CpmALL));
    break;
  case 3:
    Cpm_threads(CpmSend(CpmALL));
    break;
  case 4:
    r = Cpm_right_now(&direct, 7);
    CmiPrintf("PE 0: the direct launcher returned %s\n",
              r == &direct_result ? "its send function's result" : "something else");
    r = Cpm_tagged_call(CpmTagged(n - 1, 42), 5);
    CmiPrintf("PE 0: the tagged launcher returned %s\n",
              r == &tagged_result ? "its send function's result" : "something else");
    break;
  case 5:
    Cpm_everywhere(CpmEnqueueIFIFO(CpmALL, -1), 5, "enqueued everywhere");
    break;
  case 6:
    Cpm_everywhere(CpmMakeThread(CpmALL), 6, "in a thread everywhere");
    break;
  default:
    CmiPrintf("PE 0: all destinations done\n");
    Cpm_finish(CpmSend(CpmALL));
  }
}

static void user_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CpvInitialize(int, answers);
  CpvInitialize(Log, ran);
  CpvInitialize(int, nran);
  CpvInitialize(int, batch);
  CpvInitialize(int, bad);
  CpvInitialize(int, reply);
  CpvInitialize(int, tag_seen);
  CpvInitialize(int, tagged_index);
  CpvInitialize(TaggedDestination, tagged);
  CpmModuleInit();
  CpvAccess(tagged_index) = CmiRegisterHandler(tagged_arrived);
  CpmInitializeThisModule();
  if (CmiMyPe() == 0) next_phase(1);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, user_main, 0, 0);
  return 0;
}
