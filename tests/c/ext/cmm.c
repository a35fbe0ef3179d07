/* Tag matching (Cmm): stored and asked-for wildcards, the oldest match
 * first, probe against get, the number of tags, CmmEntries, and CmmFree of
 * a table still holding Converse buffers. One PE checks, prints the
 * results and ends the job. */
#include <converse.h>

static int failures;

static void expect(int ok, const char *what) {
  if (!ok) {
    CmiPrintf("FAILED: %s\n", what);
    failures++;
  }
}

static void start(int argc, char **argv) {
  CmmTable t;
  int a = 1, b = 2, c = 3, d = 4, e = 5;
  int t12[2] = {1, 2}, t1w[2] = {1, CmmWildcard}, t33[2] = {3, 3}, t7[1] = {7};
  int ww[2] = {CmmWildcard, CmmWildcard}, q15[2] = {1, 5}, q9[1] = {9};
  int ret[2] = {0, 0};
  void *m;
  (void)argc;
  (void)argv;
  if (CmiMyPe() != 0) return;

  t = CmmNew();
  CmmPut(t, 2, t12, &a);
  CmmPut(t, 2, t1w, &b); /* a stored wildcard */
  CmmPut(t, 2, t12, &c);
  CmmPut(t, 2, t33, &d);
  CmmPut(t, 1, t7, &e);
  expect(CmmEntries(t) == 5, "five entries");

  /* A pattern (1, 5) matches only the stored wildcard (1, *). */
  m = CmmProbe(t, 2, q15, ret);
  expect(m == &b && ret[0] == 1 && ret[1] == CmmWildcard, "probe (1,5) finds (1,*)");
  expect(CmmEntries(t) == 5, "a probe leaves the entry");

  /* (1, 2): the oldest of a, b (matching by its wildcard), c. */
  m = CmmGet(t, 2, t12, ret);
  expect(m == &a && ret[0] == 1 && ret[1] == 2, "get (1,2) takes the oldest, a");
  m = CmmGet(t, 2, t12, ret);
  expect(m == &b, "then b, by its stored wildcard");
  m = CmmFind(t, 2, t12, ret, 0);
  expect(m == &c, "CmmFind without del finds c");
  m = CmmFind(t, 2, t12, NULL, 1);
  expect(m == &c, "CmmFind with del takes c (ret_tags may be NULL)");
  expect(CmmGet(t, 2, t12, ret) == NULL, "no (1,2) left");

  /* A different number of tags never matches. */
  expect(CmmGet(t, 1, q9, ret) == NULL, "(9) matches nothing");
  expect(CmmProbe(t, 1, ww, ret) == &e, "(*) matches the one-tag entry");
  m = CmmGet(t, 2, ww, ret);
  expect(m == &d && ret[0] == 3 && ret[1] == 3, "(*,*) takes (3,3)");
  expect(CmmEntries(t) == 1, "one entry left");
  m = CmmGet(t, 1, ww, ret);
  expect(m == &e && ret[0] == 7, "(*) takes (7)");
  expect(CmmEntries(t) == 0, "empty");
  CmmFree(t);

  /* CmmFree gives what is left to CmiFree. */
  t = CmmNew();
  CmmPut(t, 1, t7, CmiAlloc(64));
  CmmPut(t, 2, t12, CmiAlloc(64));
  CmmPut(t, 0, NULL, CmiAlloc(16));
  expect(CmmEntries(t) == 3, "three buffers");
  expect(CmmProbe(t, 0, NULL, NULL) != NULL, "no tags match no tags");
  CmmFree(t);

  CmiPrintf("cmm: %d failures\n", failures);
  ConverseExit(failures != 0);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
