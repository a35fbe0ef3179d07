/* Crn: a CrnStream on the stack, determinism (same seed and type, same
 * numbers; a copy goes on alike), other seeds and types differ, the
 * ranges, CrnFloat as (float) CrnDouble, and the default stream repeating
 * after CrnSrand. Every PE checks; PE 0 ends the job once all reported. */
#include <converse.h>

#define N 10000

#define CHECK(cond)                                                                       \
  do {                                                                                    \
    if (!(cond)) CmiAbort("random: check `%s` failed at line %d", #cond, __LINE__);        \
  } while (0)

CpvStaticDeclare(int, report_handler);
CpvStaticDeclare(int, reports);

static void report(void *msg) {
  CmiFree(msg);
  if (++CpvAccess(reports) == CmiNumPes()) {
    CmiPrintf("random: all %d PEs checked\n", CmiNumPes());
    ConverseExit();
  }
}

/* How many of the first n numbers of two streams are equal. */
static int same_ints(CrnStream *a, CrnStream *b, int n) {
  int i, same = 0;
  for (i = 0; i < n; i++) same += CrnInt(a) == CrnInt(b);
  return same;
}

static void start(int argc, char **argv) {
  CrnStream s1, s2, other, copy;
  struct {
    char c;
    CrnStream s;
  } padded;
  int i, kind, first[8], same;
  double d, dmin = 1.0, dmax = 0.0;
  float f;
  void *done;
  (void)argc;
  (void)argv;
  CpvInitialize(int, report_handler);
  CpvInitialize(int, reports);
  CpvAccess(report_handler) = CmiRegisterHandler(report);

  if (CmiMyPe() == 0) {
    CmiPrintf("sizeof(CrnStream) %d, alignment %d\n", (int)sizeof(CrnStream),
              (int)((char *)&padded.s - (char *)&padded));
  }

  /* Same seed and type: the same numbers. */
  for (kind = 0; kind < 3; kind++) {
    CrnInitStream(&s1, 42, kind);
    CrnInitStream(&s2, 42, kind);
    CHECK(same_ints(&s1, &s2, N) == N);
  }
  /* Other seeds, other types: other numbers. */
  CrnInitStream(&s1, 42, 0);
  CrnInitStream(&other, 43, 0);
  same = same_ints(&s1, &other, 100);
  CHECK(same < 5);
  for (kind = 1; kind < 3; kind++) {
    CrnInitStream(&s1, 42, 0);
    CrnInitStream(&other, 42, kind);
    CHECK(same_ints(&s1, &other, 100) < 5);
  }
  /* A copy goes on as the original. */
  CrnInitStream(&s1, 7, 1);
  for (i = 0; i < 5; i++) (void)CrnDouble(&s1);
  copy = s1;
  CHECK(same_ints(&s1, &copy, N) == N);

  /* Ranges; CrnFloat is (float) CrnDouble of the same state. */
  CrnInitStream(&s1, 1234, 2);
  for (i = 0; i < N; i++) {
    copy = s1;
    d = CrnDouble(&s1);
    f = CrnFloat(&copy);
    CHECK(d >= 0.0 && d < 1.0);
    CHECK(f == (float)d);
    CHECK(f >= 0.0f && f <= 1.0f);
    CHECK(CrnInt(&s1) >= 0);
    if (d < dmin) dmin = d;
    if (d > dmax) dmax = d;
  }
  CHECK(dmin < 0.01 && dmax > 0.99); /* spread over [0, 1) */

  /* The default stream repeats after CrnSrand. */
  CrnSrand(99);
  for (i = 0; i < 8; i++) first[i] = CrnRand();
  d = CrnDrand();
  CHECK(d >= 0.0 && d < 1.0);
  CrnSrand(99);
  for (i = 0; i < 8; i++) CHECK(CrnRand() == first[i]);
  CHECK(CrnDrand() == d);
  for (i = 0; i < N; i++) CHECK(CrnRand() >= 0);

  CmiPrintf("PE %d: crn checks passed (seeds 42 and 43 agreed on %d of 100)\n", CmiMyPe(), same);
  done = CmiAlloc(CmiMsgHeaderSizeBytes);
  CmiSetHandler(done, CpvAccess(report_handler));
  CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, done);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
