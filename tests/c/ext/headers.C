// The extensions' headers from C++: all of them in one translation unit,
// with the pthread_* names (the standard library's headers first), and a
// little of each used.
#include <cstdio>
#include <cstring>

#include <converse.h>
#include <cms.h>
#include <cldb.h>
#include <conv-cpath.h>
#include <cpthreads.h>

CpvStaticDeclare(int, done);

static void *add(void *arg) {
  static pthread_mutex_t m = PTHREAD_MUTEX_INITIALIZER;
  pthread_mutex_lock(&m);
  ++*static_cast<int *>(arg);
  pthread_mutex_unlock(&m);
  return arg;
}

static int cppmain(int, char **) {
  int n = 0;
  pthread_t t[3];
  for (int i = 0; i < 3; i++) pthread_create(&t[i], nullptr, add, &n);
  for (int i = 0; i < 3; i++) pthread_join(t[i], nullptr);
  CmmTable table = CmmNew();
  int tags[2] = {1, CmmWildcard}, ret[2];
  CmmPut(table, 2, tags, &n);
  int *back = static_cast<int *>(CmmGet(table, 2, tags, ret));
  CmmFree(table);
  Cfuture f = CfutureCreate();
  CfutureSet(f, &n, sizeof n);
  int *v = static_cast<int *>(CfutureWait(f));
  CmiPrintf("C++: %d threads, table %d, future %d\n", n, *back, *v);
  CfutureDestroy(f);
  ConverseExit();
  return 0;
}

static void start(int argc, char **argv) {
  CpvInitialize(int, done);
  CfutureModuleInit();
  CpthreadModuleInit();
  CPathModuleInit();
  CldModuleInit();
  if (CmiMyPe() == 0) Cpthreads_start_main(cppmain, argc, argv);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
