/* Seed balancing from C: an info function with priorities and a pack
 * function that turns a seed's short form (a pointer to text in the
 * sender's process) into its long form (the text in the message) when, and
 * only when, the seed leaves its process; CldEnqueue to this PE (run in
 * priority order), CLD_BROADCAST_ALL, CLD_ANYWHERE, CldEnqueueMulti,
 * CldNodeEnqueue; the token queue (CldPutToken, CldCountTokens,
 * CldGetToken) and CldSwitchHandler/CldRestoreHandler. Every handled seed
 * reports to PE 0, which checks the counts and ends the job. */
#include <converse.h>
#include <cldb.h>

enum { LOCAL, BCAST, ANY, MULTI, NODE, TOKEN, KINDS };
static const char *kind_names[KINDS] = {"local", "bcast", "anywhere", "multi", "node", "token"};
#define ANYWHERE_SEEDS 20

typedef struct {
  char header[CmiMsgHeaderSizeBytes];
  int kind, from, prio, packed;
  const char *text; /* the short form: text in the sender's process */
  char data[16];    /* the long form */
} Seed;

typedef struct {
  char header[CmiMsgHeaderSizeBytes];
  int kind, packed;
} Done;

static const char text[] = "seed";

CpvStaticDeclare(int, seed_handler);
CpvStaticDeclare(int, done_handler);
CpvStaticDeclare(int, other_handler);
CpvStaticDeclare(int, info_index);
CpvStaticDeclare(int, pack_index);
CpvStaticDeclare(int, last_local); /* the priority of the last local seed run */
typedef struct {
  int n[KINDS];
} Counts;
CpvStaticDeclare(Counts, counts);
CpvStaticDeclare(int, packs);

static void check(int ok, const char *what) {
  if (!ok) CmiAbort("cld on PE %d: %s", CmiMyPe(), what);
}

static void pack(void *p) {
  Seed **pm = (Seed **)p, *old = *pm;
  Seed *s = (Seed *)CmiAlloc(sizeof(Seed));
  memcpy(s, old, sizeof(Seed));
  strcpy(s->data, old->text);
  s->text = NULL;
  s->packed = 1;
  CmiFree(old);
  *pm = s;
}

static void info(void *m, CldPackFn *pfn, int *len, int *queueing, int *priobits,
                 unsigned int **prioptr) {
  Seed *s = (Seed *)m;
  *pfn = s->packed ? (CldPackFn)0 : (CldPackFn)CmiHandlerToFunction(CpvAccess(pack_index));
  *len = sizeof(Seed);
  if (s->prio != 0) {
    *queueing = CQS_QUEUEING_IFIFO;
    *priobits = 8 * sizeof(int);
    *prioptr = (unsigned int *)&s->prio;
  } else {
    *queueing = CQS_QUEUEING_FIFO;
    *priobits = 0;
    *prioptr = NULL;
  }
}

static Seed *seed(int kind, int prio) {
  Seed *s = (Seed *)CmiAlloc(sizeof(Seed));
  s->kind = kind;
  s->from = CmiMyPe();
  s->prio = prio;
  s->text = text;
  CmiSetHandler(s, CpvAccess(seed_handler));
  return s;
}

static void on_seed(void *m) {
  Seed *s = (Seed *)m;
  Done d;
  check(strcmp(s->packed ? s->data : s->text, "seed") == 0, "the seed's text");
  if (s->kind == LOCAL) {
    check(s->from == CmiMyPe(), "a local seed ran here");
    check(s->prio > CpvAccess(last_local), "local seeds run in priority order");
    CpvAccess(last_local) = s->prio;
  }
  memset(&d, 0, sizeof d);
  d.kind = s->kind;
  d.packed = s->packed;
  CmiFree(s);
  CmiSetHandler(&d, CpvAccess(done_handler));
  CmiSyncSend(0, sizeof d, &d);
}

static void on_other(void *m) {
  CmiFree(m);
  CmiAbort("a switched handler ran");
}

static void on_done(void *m) {
  Done *d = (Done *)m;
  int expect[KINDS], i, total = 0, want = 0;
  CpvAccess(counts).n[d->kind]++;
  if (d->packed && d->kind != ANY) CpvAccess(packs)++;
  CmiFree(d);
  expect[LOCAL] = 3 * CmiNumPes();
  expect[BCAST] = CmiNumPes();
  expect[ANY] = ANYWHERE_SEEDS * CmiNumPes();
  expect[MULTI] = CmiNumPes();
  expect[NODE] = CmiNumNodes();
  expect[TOKEN] = CmiNumPes();
  for (i = 0; i < KINDS; i++) {
    total += CpvAccess(counts).n[i];
    want += expect[i];
  }
  if (total < want) return;
  for (i = 0; i < KINDS; i++) {
    CmiPrintf("cld: %s %d of %d\n", kind_names[i], CpvAccess(counts).n[i], expect[i]);
    check(CpvAccess(counts).n[i] == expect[i], "every seed ran once");
  }
  CmiPrintf("cld: packed when leaving the process: %d\n", CpvAccess(packs));
  CmiPrintf("cld: strategy %s\n", CldGetStrategy());
  ConverseExit();
}

static void start(int argc, char **argv) {
  int i, before, *pes;
  char *got;
  Seed *s;
  (void)argc;
  (void)argv;
  CpvInitialize(int, seed_handler);
  CpvInitialize(int, done_handler);
  CpvInitialize(int, other_handler);
  CpvInitialize(int, info_index);
  CpvInitialize(int, pack_index);
  CpvInitialize(int, last_local);
  CpvInitialize(int, packs);
  CpvInitialize(Counts, counts);
  CpvAccess(seed_handler) = CmiRegisterHandler(on_seed);
  CpvAccess(done_handler) = CmiRegisterHandler(on_done);
  CpvAccess(other_handler) = CmiRegisterHandler(on_other);
  CpvAccess(info_index) = CldRegisterInfoFn(info);
  CpvAccess(pack_index) = CldRegisterPackFn(pack);
  check(CmiHandlerToFunction(CpvAccess(info_index)) == (CmiHandler)(void (*)(void))info,
        "an info function's index is a handler index");

  /* The token queue: nothing runs during the start function. */
  before = CldCountTokens();
  s = seed(TOKEN, 0);
  CmiSetInfo(s, CpvAccess(info_index));
  CldPutToken(s);
  check(CldCountTokens() == before + 1, "CldPutToken adds a token");
  check(CldLoad() >= 1, "the load counts the token");
  CldGetToken(&got);
  check(got != NULL && ((Seed *)got)->kind == TOKEN, "CldGetToken gives it back");
  check(CmiGetInfo(got) == (unsigned int)CpvAccess(info_index), "with its info function");
  check(CldCountTokens() == before, "and it is gone");
  CldSwitchHandler(got, CpvAccess(other_handler));
  check(CmiGetHandler(got) == (unsigned int)CpvAccess(other_handler), "switched");
  CldRestoreHandler(got);
  check(CmiGetHandler(got) == (unsigned int)CpvAccess(seed_handler), "restored");
  CldEnqueue(CmiMyPe(), got, CpvAccess(info_index));

  /* To this PE: run in priority order (3 is enqueued first). */
  CldEnqueue(CmiMyPe(), seed(LOCAL, 3), CpvAccess(info_index));
  CldEnqueue(CmiMyPe(), seed(LOCAL, 1), CpvAccess(info_index));
  CldEnqueue(CmiMyPe(), seed(LOCAL, 2), CpvAccess(info_index));

  for (i = 0; i < ANYWHERE_SEEDS; i++)
    CldEnqueue(CLD_ANYWHERE, seed(ANY, 0), CpvAccess(info_index));

  if (CmiMyPe() == 0) {
    CldEnqueue(CLD_BROADCAST_ALL, seed(BCAST, 0), CpvAccess(info_index));
    pes = (int *)malloc(CmiNumPes() * sizeof(int));
    for (i = 0; i < CmiNumPes(); i++) pes[i] = CmiNumPes() - 1 - i;
    CldEnqueueMulti(CmiNumPes(), pes, seed(MULTI, 0), CpvAccess(info_index));
    free(pes);
    CldNodeEnqueue(CLD_BROADCAST_ALL, seed(NODE, 0), CpvAccess(info_index));
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
