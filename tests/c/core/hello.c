/* Every PE says hello and tells PE 0, which ends the job once all have. */
#include <converse.h>

CpvStaticDeclare(int, heard);
CpvStaticDeclare(int, hello_handler);

static void hello_done(void *msg) {
  CmiFree(msg);
  CpvAccess(heard)++;
  if (CpvAccess(heard) == CmiNumPes()) {
    CmiPrintf("PE 0 heard from all %d PEs\n", CmiNumPes());
    ConverseExit();
  }
}

static void start(int argc, char **argv) {
  void *msg;
  const char *slash;
  CpvInitialize(int, heard);
  CpvInitialize(int, hello_handler);
  CpvAccess(hello_handler) = CmiRegisterHandler(hello_done);
  slash = strrchr(argv[0], '/');
  CmiPrintf("hello from PE %d of %d (node %d of %d, rank %d), %s, %d args\n", CmiMyPe(),
            CmiNumPes(), CmiMyNode(), CmiNumNodes(), CmiMyRank(), slash ? slash + 1 : argv[0],
            argc);
  msg = CmiAlloc(CmiMsgHeaderSizeBytes);
  CmiSetHandler(msg, CpvAccess(hello_handler));
  CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, msg);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
