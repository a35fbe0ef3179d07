/* CthPup moves a suspended migratable thread from PE 0 to the last PE:
 * the thread (CthCreateMigratable) fills locals on its stack (an array
 * and a pointer into it), asks PE 0 to move it and suspends; PE 0's
 * handler sizes and packs it with CthPup and sends the bytes on; the last
 * PE unpacks it with CthPup and awakens it. The thread checks its locals
 * and the PE it runs on, and ends the job. A second thread, which has not
 * suspended, is refused by name (run with the argument `refuse`), and so
 * are bytes claiming more than their buffer holds (`garbage`). */
#include <converse.h>

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  CthThread t;
} MoveMsg;

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int size;
  char bytes[1]; /* `size` of them */
} PackedMsg;

CpvStaticDeclare(int, h_move);
CpvStaticDeclare(int, h_arrive);
CpvStaticDeclare(int, h_done);

static void body(void *arg) {
  int squares[64], i, *where = &squares[10], from = CmiMyPe();
  MoveMsg *m;
  (void)arg;
  for (i = 0; i < 64; i++) squares[i] = i * i;
  m = (MoveMsg *)CmiAlloc(sizeof(MoveMsg));
  CmiSetHandler(m, CpvAccess(h_move));
  m->t = CthSelf();
  CmiSyncSendAndFree(CmiMyPe(), sizeof(MoveMsg), m);
  CthSuspend();
  /* Here after the move: the stack is where it was, on another PE. */
  for (i = 0; i < 64; i++)
    if (squares[i] != i * i) CmiAbort("cthpup: squares[%d] is %d after the move", i, squares[i]);
  if (*where != 100 || where != &squares[10]) CmiAbort("cthpup: the pointer into the stack moved");
  CmiPrintf("cthpup: thread moved from PE %d to PE %d with its stack\n", from, CmiMyPe());
  {
    MoveMsg *d = (MoveMsg *)CmiAlloc(sizeof(MoveMsg));
    CmiSetHandler(d, CpvAccess(h_done));
    CmiSyncSendAndFree(0, sizeof(MoveMsg), d);
  }
}

static void move(void *msg) {
  CthThread t = ((MoveMsg *)msg)->t;
  pup_er p = pup_new_sizer();
  int size;
  PackedMsg *out;
  CmiFree(msg);
  if (CthPup(p, t) != t) CmiAbort("cthpup: sizing returned another thread");
  size = pup_size(p);
  pup_destroy(p);
  /* Sizing leaves the thread alone: again, the same size. */
  p = pup_new_sizer();
  CthPup(p, t);
  if (pup_size(p) != size) CmiAbort("cthpup: sized %d bytes, then %d", size, pup_size(p));
  pup_destroy(p);
  out = (PackedMsg *)CmiAlloc(sizeof(PackedMsg) + size);
  p = pup_new_toMemSized(out->bytes, size);
  if (CthPup(p, t) != NULL) CmiAbort("cthpup: packing returned a thread");
  if (pup_size(p) != size) CmiAbort("cthpup: packed %d bytes, sized %d", pup_size(p), size);
  pup_destroy(p);
  out->size = size;
  CmiSetHandler(out, CpvAccess(h_arrive));
  CmiPrintf("cthpup: packed the thread on PE %d\n", CmiMyPe());
  CmiSyncSendAndFree(CmiNumPes() - 1, sizeof(PackedMsg) + size, out);
}

static void arrive(void *msg) {
  PackedMsg *in = (PackedMsg *)msg;
  pup_er p = pup_new_fromMemSized(in->bytes, in->size);
  CthThread t = CthPup(p, NULL);
  pup_destroy(p);
  CmiFree(msg);
  CthAwaken(t);
}

static void done(void *msg) {
  CmiFree(msg);
  ConverseExit();
}

static void never(void *arg) { (void)arg; }

static void start(int argc, char **argv) {
  CpvInitialize(int, h_move);
  CpvInitialize(int, h_arrive);
  CpvInitialize(int, h_done);
  CpvAccess(h_move) = CmiRegisterHandler(move);
  CpvAccess(h_arrive) = CmiRegisterHandler(arrive);
  CpvAccess(h_done) = CmiRegisterHandler(done);
  if (CmiMyPe() != 0) return;
  if (argc > 1 && strcmp(argv[1], "garbage") == 0) {
    unsigned long long bytes[2] = {1ULL << 30, 0};
    pup_er p = pup_new_fromMemSized(bytes, (int)sizeof bytes);
    CthPup(p, NULL); /* claims 1 GiB in 16 bytes: refused */
    CmiAbort("cthpup: a 1 GiB thread was read from 16 bytes");
  }
  if (argc > 1 && strcmp(argv[1], "refuse") == 0) {
    pup_er p = pup_new_sizer();
    CthPup(p, CthCreateMigratable(never, NULL, 0)); /* never ran: refused */
    CmiAbort("cthpup: a thread that never ran was packed");
  }
  CthAwaken(CthCreateMigratable(body, NULL, 0));
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
