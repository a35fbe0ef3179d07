/* The extensions manual's example program of section 7.1 (using the
 * Converse load balancers, hello.c), as printed there, with these changes:
 * - the struct's typedef name is the one the code uses (pemsg: the printed
 *   code mixes pemsg and pmsg, and prioptr and prioPtr);
 * - the messages are allocated with CmiAlloc, not malloc: CldEnqueue takes
 *   a Converse buffer (it frees it with CmiFree, as the manual says);
 * - PackFn has the empty body of the manual's source (the printed page
 *   lost it), and registerAndInitialize its braces;
 * - the job ends: each handled message reports to PE 0, which ends the job
 *   once all CHARES messages of every PE were handled (the printed program
 *   never ends), and the handler frees its message.
 * Its own code draws warnings (the Makefile builds it without -Werror). */
#include <stdio.h>
#include "converse.h"
#define CHARES 10
void startup(int argc, char *argv[]);
void registerAndInitialize();

typedef struct pemsgstruct
{
  char header[CmiExtHeaderSizeBytes];
  int pe, id, pfnx;
  int queuing, priobits;
  unsigned int prioptr;
} pemsg;

CpvDeclare(int, MyHandlerIndex);
CpvDeclare(int, InfoFnIndex);
CpvDeclare(int, PackFnIndex);
CpvDeclare(int, DoneHandlerIndex); /* added: the end of the job */
CpvDeclare(int, handled);          /* added */

int main(int argc, char *argv[])
{
  ConverseInit(argc, argv, startup, 0, 0);
  CsdScheduler(-1);
}

void startup(int argc, char *argv[])
{
  pemsg *msg;
  int i;

  registerAndInitialize();
  for (i=0; i<CHARES; i++) {
    msg = (pemsg *)CmiAlloc(sizeof(pemsg));
    msg->pe = CmiMyPe();
    msg->id = i;
    msg->pfnx = CpvAccess(PackFnIndex);
    msg->queuing = CQS_QUEUEING_FIFO;
    msg->priobits = 0;
    msg->prioptr = 0;
    CmiSetHandler(msg, CpvAccess(MyHandlerIndex));
    CmiPrintf("[%d] sending message %d\n", msg->pe, msg->id);
    CldEnqueue(CLD_ANYWHERE, msg, CpvAccess(InfoFnIndex));
    /*    CmiSyncSend(i, sizeof(pemsg), &msg); */
  }
}

void MyHandler(pemsg *msg)
{
  char done[CmiMsgHeaderSizeBytes]; /* added */
  CmiPrintf("Message %d created on %d handled by %d.\n", msg->id, msg->pe,
            CmiMyPe());
  CmiFree(msg); /* added */
  memset(done, 0, sizeof done);
  CmiSetHandler(done, CpvAccess(DoneHandlerIndex));
  CmiSyncSend(0, sizeof done, done);
}

void DoneHandler(void *msg) /* added */
{
  CmiFree(msg);
  if (++CpvAccess(handled) == CHARES * CmiNumPes()) {
    CmiPrintf("all %d messages handled (strategy %s)\n", CpvAccess(handled),
              CldGetStrategy());
    ConverseExit();
  }
}

void InfoFn(pemsg *msg, CldPackFn *pfn, int *len, int *queuing, int *priobits,
            unsigned int *prioptr)
{
  *pfn = (CldPackFn)CmiHandlerToFunction(msg->pfnx);
  *len = sizeof(pemsg);
  *queuing = msg->queuing;
  *priobits = msg->priobits;
  prioptr = &(msg->prioptr);
}

void PackFn(pemsg **msg)
{
}

void registerAndInitialize()
{
  CpvInitialize(int, MyHandlerIndex);
  CpvAccess(MyHandlerIndex) = CmiRegisterHandler(MyHandler);
  CpvInitialize(int, InfoFnIndex);
  CpvAccess(InfoFnIndex) = CldRegisterInfoFn((CldInfoFn)InfoFn);
  CpvInitialize(int, PackFnIndex);
  CpvAccess(PackFnIndex) = CldRegisterPackFn((CldPackFn)PackFn);
  CpvInitialize(int, DoneHandlerIndex); /* added */
  CpvAccess(DoneHandlerIndex) = CmiRegisterHandler(DoneHandler);
  CpvInitialize(int, handled);
}
