/* Handlers with a user pointer. Every PE registers ex_handler with
 * CmiRegisterHandlerEx and a pointer to its own Cpv slot, and installs
 * other_ex with CmiNumberHandlerEx at an index a plain handler held. PE 0
 * sends every PE a message for each: each handler must get its own PE's
 * pointer and the message, and reports to PE 0. */
#include <converse.h>

typedef struct {
  int pe;
  int received;
} Slot;

typedef struct {
  char head[CmiMsgHeaderSizeBytes];
  int value;
} IntMsg;

CpvStaticDeclare(Slot, slot);
CpvStaticDeclare(Slot, other_slot);
CpvStaticDeclare(int, h_ex);
CpvStaticDeclare(int, h_other);
CpvStaticDeclare(int, h_report);
CpvStaticDeclare(int, reports);

static void send_int(int pe, int handler, int value) {
  IntMsg *m = (IntMsg *)CmiAlloc(sizeof(IntMsg));
  CmiSetHandler(m, handler);
  m->value = value;
  CmiSyncSendAndFree(pe, sizeof(IntMsg), m);
}

static void take(void *msg, void *user, Slot *own, int want) {
  Slot *s = (Slot *)user;
  IntMsg *m = (IntMsg *)msg;
  if (s != own) CmiAbort("PE %d: the handler got %p, not its PE's %p", CmiMyPe(), user, (void *)own);
  if (s->pe != CmiMyPe() || m->value != want) CmiAbort("PE %d: slot of PE %d, value %d", CmiMyPe(), s->pe, m->value);
  s->received++;
  CmiFree(msg);
  send_int(0, CpvAccess(h_report), 0);
}

static void ex_handler(void *msg, void *user) { take(msg, user, &CpvAccess(slot), 11); }

static void other_ex(void *msg, void *user) { take(msg, user, &CpvAccess(other_slot), 22); }

static void placeholder(void *msg) {
  CmiFree(msg);
  CmiAbort("the placeholder handler ran");
}

static void report(void *msg) {
  CmiFree(msg);
  if (++CpvAccess(reports) == 2 * CmiNumPes()) {
    CmiPrintf("handlerEx: %d PEs got their own pointer, twice each\n", CmiNumPes());
    ConverseExit();
  }
}

static void start(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CpvInitialize(Slot, slot);
  CpvInitialize(Slot, other_slot);
  CpvInitialize(int, h_ex);
  CpvInitialize(int, h_other);
  CpvInitialize(int, h_report);
  CpvInitialize(int, reports);
  CpvAccess(slot).pe = CmiMyPe();
  CpvAccess(other_slot).pe = CmiMyPe();
  CpvAccess(h_report) = CmiRegisterHandler(report);
  CpvAccess(h_ex) = CmiRegisterHandlerEx(ex_handler, &CpvAccess(slot));
  CpvAccess(h_other) = CmiRegisterHandler(placeholder);
  CmiNumberHandlerEx(CpvAccess(h_other), other_ex, &CpvAccess(other_slot));
  /* A PE runs no handler before its start function returns: PE 0 may
   * send at once. */
  if (CmiMyPe() == 0) {
    int pe;
    for (pe = 0; pe < CmiNumPes(); pe++) {
      send_int(pe, CpvAccess(h_ex), 11);
      send_int(pe, CpvAccess(h_other), 22);
    }
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
