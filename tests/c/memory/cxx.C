// The headers from C++: a PUP round trip, a struct reduction over all PEs,
// CpvAccess(cQdState) and CmiStartQD with a CcdCondFn (the C++ overload).
#include <converse.h>

#include <vector>

struct Pair {
  int a;
  double b;
};

static void pup_pair(pup_er p, void *data) {
  Pair *x = static_cast<Pair *>(data);
  pup_int(p, &x->a);
  pup_double(p, &x->b);
}

static void *merge_pair(int *, void *local, void **remote, int count) {
  Pair *l = static_cast<Pair *>(local);
  for (int i = 0; i < count; i++) {
    Pair r;
    pup_er p = pup_new_fromMemSized(remote[i], int(sizeof(int) + sizeof(double)));
    pup_pair(p, &r);
    pup_destroy(p);
    l->a += r.a;
    l->b += r.b;
  }
  return local;
}

static void delete_pair(void *data) { delete static_cast<Pair *>(data); }

static void quiet(void *arg) {
  int *done = static_cast<int *>(arg);
  if (*done != 1) CmiAbort("cxx: quiescent before the reduction finished");
  CmiPrintf("cxx: quiescence after the reduction\n");
  ConverseExit();
}

CpvStaticDeclare(int, reduced);

static void dest_pair(void *data) {
  Pair *x = static_cast<Pair *>(data);
  int n = CmiNumPes();
  if (x->a != n * (n - 1) / 2 || x->b != 0.5 * n) CmiAbort("cxx: reduced to %d %g", x->a, x->b);
  CmiPrintf("cxx: reduced %d %g on PE %d\n", x->a, x->b, CmiMyPe());
  delete x;
  CpvAccess(reduced) = 1;
}

static void start(int, char **) {
  CpvInitialize(int, reduced);
  Pair orig = {CmiMyPe(), 0.25}, back = {0, 0};
  pup_er p = pup_new_sizer();
  pup_pair(p, &orig);
  std::vector<char> buf(pup_size(p));
  pup_destroy(p);
  p = pup_new_toMemSized(buf.data(), int(buf.size()));
  pup_pair(p, &orig);
  pup_destroy(p);
  p = pup_new_fromMemSized(buf.data(), int(buf.size()));
  pup_pair(p, &back);
  pup_destroy(p);
  if (back.a != orig.a || back.b != orig.b) CmiAbort("cxx: the pair did not round-trip");

  CQdCreate(CpvAccess(cQdState), 1);
  CQdProcess(CpvAccess(cQdState), 1);
  CmiReduceStruct(new Pair{CmiMyPe(), 0.5}, pup_pair, merge_pair, dest_pair, delete_pair);
  if (CmiMyPe() == 0) CmiStartQD(quiet, &CpvAccess(reduced));
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
