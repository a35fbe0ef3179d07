/* Pseudo-globals as Charm++'s megacon `vars` test checks them, built into
 * a library (libvars.a, made by `$(CHARMC) -o libvars.a vars.o`): Cpv,
 * Ctv and Csv initialized in the module init, their Initialized checks,
 * a Csv value set once per node and read by every PE of it, and a Csv
 * counter every PE of a node increments with Charm++'s atomics. */
#include "suite.h"

CpvDeclare(int, vars_cpv);
CtvDeclare(int, vars_ctv);
CsvDeclare(int, vars_csv);
CsvDeclare(CmiMemoryAtomicType(int), vars_count);
CsvDeclare(CmiMemoryAtomicUInt, vars_tickets);
CpvStaticDeclare(int, vars_handler);
CpvStaticDeclare(int, vars_reports);
CpvStaticDeclare(int, vars_report_handler);

static void check(void *msg) {
  if (CpvAccess(vars_cpv) != CmiMyPe()) CmiAbort("vars: PE %d's Cpv holds %d", CmiMyPe(), CpvAccess(vars_cpv));
  if (CsvAccess(vars_csv) != 1000 + CmiMyNode())
    CmiAbort("vars: node %d's Csv holds %d", CmiMyNode(), CsvAccess(vars_csv));
  CmiSetHandler(msg, CpvAccess(vars_report_handler));
  CmiSyncSendAndFree(0, CmiMsgHeaderSizeBytes, msg);
}

static void report(void *msg) {
  CmiFree(msg);
  if (++CpvAccess(vars_reports) == CmiNumPes()) suite_done("vars");
}

void vars_moduleinit(void) {
  CtvInitialize(int, vars_ctv);
  if (!CtvInitialized(vars_ctv)) CmiAbort("vars: Ctv not initialized");
  CpvInitialize(int, vars_cpv);
  if (!CpvInitialized(vars_cpv)) CmiAbort("vars: Cpv not initialized");
  CsvInitialize(int, vars_csv);
  if (!CsvInitialized(vars_csv)) CmiAbort("vars: Csv not initialized");
  CpvInitialize(int, vars_handler);
  CpvInitialize(int, vars_reports);
  CpvInitialize(int, vars_report_handler);
  CpvAccess(vars_cpv) = CmiMyPe();
  CtvAccess(vars_ctv) = CmiMyPe();
  if (CmiMyRank() == 0) CsvAccess(vars_csv) = 1000 + CmiMyNode();
  CpvAccess(vars_handler) = CmiRegisterHandler(check);
  CpvAccess(vars_report_handler) = CmiRegisterHandler(report);
  {
    /* Twice up, once down, one ticket each: the node's PEs at once. */
    unsigned int ticket;
    CmiMemoryAtomicIncrement(CsvAccess(vars_count));
    CmiMemoryAtomicIncrement(CsvAccess(vars_count), memory_order_relaxed);
    CmiMemoryAtomicDecrement(CsvAccess(vars_count));
    CmiMemoryAtomicFetchAndInc(CsvAccess(vars_tickets), ticket);
    if (ticket >= (unsigned)CmiMyNodeSize()) CmiAbort("vars: ticket %u of %d", ticket, CmiMyNodeSize());
    CmiMemoryWriteFence();
  }
  CmiNodeAllBarrier();
  CmiMemoryReadFence();
  if (CsvAccess(vars_count) != CmiMyNodeSize() || CsvAccess(vars_tickets) != (unsigned)CmiMyNodeSize())
    CmiAbort("vars: node %d counted %d and %u of %d PEs", CmiMyNode(), CsvAccess(vars_count),
             CsvAccess(vars_tickets), CmiMyNodeSize());
}

void vars_init(void) {
  void *m = CmiAlloc(CmiMsgHeaderSizeBytes);
  CmiSetHandler(m, CpvAccess(vars_handler));
  CmiSyncBroadcastAllAndFree(CmiMsgHeaderSizeBytes, m);
}
