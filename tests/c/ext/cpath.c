/* CPath: a 3 x 4 array of threads laid out by a C mapper, and a single
 * thread; row multicasts from the start function, a multicast to every
 * element from the single thread (which gets the array's descriptor in a
 * message), tag-matched neighbour messages (CPATH_TAGVEC, CPATH_WILD),
 * a reduction per row and one over the whole array with a C reducer. The
 * whole array's result ends the job. */
#include <converse.h>
#include <conv-cpath.h>

#define ROWS 3
#define COLS 4

CpvStaticDeclare(int, element_fn);
CpvStaticDeclare(int, single_fn);
CpvStaticDeclare(int, mapper);
CpvStaticDeclare(int, sum);

static void check(int ok, const char *what) {
  if (!ok) CmiAbort("cpath on PE %d: %s", CmiMyPe(), what);
}

static unsigned int map_rows(CPath *path, int *ix) {
  return (unsigned int)((ix[0] * CPathArrayDimension(path, 1) + ix[1]) % CmiNumPes());
}

static void sum_ints(int vecsize, void *data1, void *data2) {
  int *a = (int *)data1, *b = (int *)data2, i;
  for (i = 0; i < vecsize; i++) a[i] += b[i];
}

static int recv_int(void *msg) {
  int len, v;
  void *bytes;
  CPathMsgDecodeBytes(msg, &len, &bytes);
  check(len == sizeof(int), "an int's message");
  memcpy(&v, bytes, sizeof v);
  CPathMsgFree(msg);
  return v;
}

static void element(CPath *self, int *ix) {
  int i = ix[0], j = ix[1], right = (j + 1) % COLS, left = (j + COLS - 1) % COLS;
  int out[2] = {3, 0}, in[2] = {3, 0}, vals[2], vecsize, eltsize, *r;
  void *m;

  check(CPathArrayDimensions(self) == 2 && CPathArrayDimension(self, 0) == ROWS &&
            CPathArrayDimension(self, 1) == COLS,
        "the descriptor's dimensions");
  check(map_rows(self, ix) == (unsigned int)CmiMyPe(), "the element runs where its mapper says");

  /* The row's multicast from the start function. */
  check(recv_int(CPathRecv(CPATH_TAG, 1, CPATH_END)) == 100 * i, "the row's value");
  /* The single thread's multicast to everyone, tags (2, 9), matched by
   * (2, CPATH_WILD). */
  check(recv_int(CPathRecv(CPATH_TAGS, 2, CPATH_WILD, 0, CPATH_END)) == 7, "the single thread's value");

  /* Neighbours: to the right with tags (3, j); from the left by tags
   * (3, left). */
  out[1] = j;
  CPathSend(CPATH_DEST, self, i, right, CPATH_TAGVEC, 2, out, CPATH_BYTES, sizeof j, &j, CPATH_END);
  in[1] = left;
  check(recv_int(CPathRecv(CPATH_TAGVEC, 2, in, CPATH_END)) == left, "the left neighbour's index");

  /* The row's reduction (the manual's clause order), to (i, 0). */
  vals[0] = j;
  vals[1] = 1;
  CPathReduce(CPATH_OVER, self, i, CPATH_ALL, CPATH_TAG, 4, CPATH_REDUCER, CpvAccess(sum),
              CPATH_BYTES, 2, (int)sizeof(int), vals, CPATH_DEST, self, i, 0, CPATH_END);
  if (j == 0) {
    m = CPathRecv(CPATH_TAG, 4, CPATH_END);
    CPathMsgDecodeReduction(m, &vecsize, &eltsize, &r);
    check(vecsize == 2 && eltsize == sizeof(int), "the row result's shape");
    CmiPrintf("row %d: sum %d count %d\n", i, r[0], r[1]);
    CPathMsgFree(m);
  }

  /* The whole array's reduction (Charm++'s clause order), to (0, 0). */
  vals[0] = i * COLS + j;
  CPathReduce(CPATH_OVER, self, CPATH_ALL, CPATH_ALL, CPATH_TAG, 6, CPATH_REDUCER, CpvAccess(sum),
              CPATH_DEST, self, 0, 0, CPATH_BYTES, 1, (int)sizeof(int), vals, CPATH_END);
  if (i == 0 && j == 0) {
    m = CPathRecv(CPATH_TAG, 6, CPATH_END);
    CPathMsgDecodeReduction(m, &vecsize, &eltsize, &r);
    CmiPrintf("cpath: total %d of %d elements on %d PEs\n", r[0], ROWS * COLS, CmiNumPes());
    CPathMsgFree(m);
    ConverseExit();
  }
}

static void single(CPath *self, int *ix) {
  CPath array;
  int len, seven = 7;
  void *m, *bytes;
  (void)ix;
  check(CPathArrayDimensions(self) == 0, "a single thread has no dimensions");
  m = CPathRecv(CPATH_TAG, 5, CPATH_END);
  CPathMsgDecodeBytes(m, &len, &bytes);
  check(len == sizeof(CPath), "a descriptor in a message");
  memcpy(&array, bytes, sizeof array);
  CPathMsgFree(m);
  CPathSend(CPATH_DEST, &array, CPATH_ALL, CPATH_ALL, CPATH_TAGS, 2, 9, 0, CPATH_BYTES, sizeof seven,
            &seven, CPATH_END);
  CmiPrintf("single thread on PE %d sent to %d elements\n", CmiMyPe(),
            CPathArrayDimension(&array, 0) * CPathArrayDimension(&array, 1));
}

static void start(int argc, char **argv) {
  CPath array, one;
  int r, v;
  (void)argc;
  (void)argv;
  CpvInitialize(int, element_fn);
  CpvInitialize(int, single_fn);
  CpvInitialize(int, mapper);
  CpvInitialize(int, sum);
  CpvAccess(mapper) = CPathRegisterMapper(map_rows);
  CpvAccess(element_fn) = CPathRegisterThreadFn(element);
  CpvAccess(single_fn) = CPathRegisterThreadFn(single);
  CpvAccess(sum) = CPathRegisterReducer(sum_ints);
  if (CmiMyPe() != 0) return;
  CPathMakeArray(&array, CpvAccess(element_fn), CpvAccess(mapper), ROWS, COLS, 0);
  CPathMakeThread(&one, CpvAccess(single_fn), CmiNumPes() - 1);
  for (r = 0; r < ROWS; r++) {
    v = 100 * r;
    CPathSend(CPATH_DEST, &array, r, CPATH_ALL, CPATH_TAG, 1, CPATH_BYTES, sizeof v, &v, CPATH_END);
  }
  CPathSend(CPATH_DEST, &one, CPATH_TAG, 5, CPATH_BYTES, sizeof array, &array, CPATH_END);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
