/* A Converse job whose CCS handlers are written in C: replies at once,
 * delayed replies answered by another PE, no reply, broadcasts and
 * multicasts merged by Charm++'s merges and by one of its own, a new-style
 * handler with a user pointer, a Converse handler made callable over CCS,
 * "stop", which ends the job, and two misuses of delayed replies
 * ("delay_twice", "delay_far"), which end it with an error. Run it with ++server (any free port);
 * PE 0 prints "server ready" once every PE has registered its handlers. */
#include <stdio.h>
#include <string.h>

#include <converse.h>
#include <conv-ccs.h>

static int echo_idx;    /* the "echo" CCS handler, also sent to directly */
static int forward_idx; /* answers a delayed reply on the next PE */
static int ready_idx;   /* each PE tells PE 0 its handlers are registered */
static int ready_count; /* on PE 0 */

static void reply_text(const char *text) { CcsSendReply((int)strlen(text), text); }

/* The request data and its length. */
static const char *data_of(void *msg, int *len) {
  *len = CmiSize(msg) - CmiMsgHeaderSizeBytes;
  return (const char *)msg + CmiMsgHeaderSizeBytes;
}

static void echo(void *msg) {
  char out[256];
  int len;
  const char *data = data_of(msg, &len);
  skt_ip_t ip;
  unsigned int port = 0;
  if (!CcsIsRemoteRequest()) {
    CmiPrintf("echo on PE %d: not a CCS request, %d bytes\n", CmiMyPe(), len);
    CmiFree(msg);
    return;
  }
  CcsCallerId(&ip, &port);
  snprintf(out, sizeof out, "PE %d got '%.*s' from %d.%d.%d.%d, port %s", CmiMyPe(), len, data,
           ip.data[0], ip.data[1], ip.data[2], ip.data[3], port != 0 ? "known" : "zero");
  reply_text(out);
  CmiFree(msg);
}

static void whoami(void *msg) {
  char out[32];
  snprintf(out, sizeof out, "[%d]", CmiMyPe());
  reply_text(out);
  CmiFree(msg);
}

static void sum(void *msg) {
  int v = CmiMyPe() + 1;
  CcsSendReply((int)sizeof v, &v);
  CmiFree(msg);
}

static void maxd(void *msg) {
  double v = 1.5 * CmiMyPe();
  CcsSendReply((int)sizeof v, &v);
  CmiFree(msg);
}

static void join(void *msg) {
  char out[32];
  snprintf(out, sizeof out, "%d", CmiMyPe());
  reply_text(out);
  CmiFree(msg);
}

/* A merge written as for Charm++: joins the replies' text with '+'. */
static void *join_merge(int *size, void *local, void **remote, int count) {
  int total = 0, i, at;
  CcsImplHeader *hdr = (CcsImplHeader *)((char *)local + CmiReservedHeaderSize);
  char *out;
  void *merged;
  total = (int)ChMessageInt(hdr->len);
  for (i = 0; i < count; i++) {
    CcsImplHeader *h = (CcsImplHeader *)((char *)remote[i] + CmiReservedHeaderSize);
    total += 1 + (int)ChMessageInt(h->len);
  }
  merged = CmiAlloc(CmiReservedHeaderSize + (int)sizeof(CcsImplHeader) + total);
  memcpy((char *)merged + CmiReservedHeaderSize, hdr, sizeof(CcsImplHeader));
  out = (char *)merged + CmiReservedHeaderSize + sizeof(CcsImplHeader);
  at = (int)ChMessageInt(hdr->len);
  memcpy(out, hdr + 1, (size_t)at);
  for (i = 0; i < count; i++) {
    CcsImplHeader *h = (CcsImplHeader *)((char *)remote[i] + CmiReservedHeaderSize);
    int len = (int)ChMessageInt(h->len);
    if (strcmp(h->handler, "join") != 0) CmiAbort("join_merge: a reply of another handler");
    out[at++] = '+';
    memcpy(out + at, h + 1, (size_t)len);
    at += len;
  }
  ((CcsImplHeader *)((char *)merged + CmiReservedHeaderSize))->len = ChMessageInt_new((unsigned)total);
  *size = CmiReservedHeaderSize + (int)sizeof(CcsImplHeader) + total;
  CmiFree(local);
  return merged;
}

typedef struct {
  char header[CmiMsgHeaderSizeBytes];
  CcsDelayedReply reply;
  int asked;
} ForwardMsg;

static void delay(void *msg) {
  ForwardMsg f;
  CmiFree(msg);
  f.reply = CcsDelayReply();
  f.asked = CmiMyPe();
  CmiSetHandler(&f, forward_idx);
  /* To the next PE of this node (a delayed reply stays in its process). */
  CmiSyncSend(CmiNodeFirst(CmiMyNode()) + (CmiMyRank() + 1) % CmiMyNodeSize(), (int)sizeof f, &f);
}

static void forward(void *msg) {
  ForwardMsg *f = (ForwardMsg *)msg;
  char out[128];
  snprintf(out, sizeof out, "asked PE %d, answered by PE %d (remote request: %d)", f->asked,
           CmiMyPe(), CcsIsRemoteRequest());
  CcsSendDelayedReply(f->reply, (int)strlen(out), out);
  CmiFree(msg);
}

/* Misuse, each ending the job with a message naming it: a delayed reply
 * answered twice, and one sent to a PE of another node (process). */
static void delay_twice(void *msg) {
  CcsDelayedReply d = CcsDelayReply();
  CmiFree(msg);
  CcsSendDelayedReply(d, 5, "first");
  CcsSendDelayedReply(d, 6, "second");
}

static void delay_far(void *msg) {
  ForwardMsg f;
  CmiFree(msg);
  f.reply = CcsDelayReply();
  f.asked = CmiMyPe();
  CmiSetHandler(&f, forward_idx);
  CmiSyncSend(CmiNodeFirst((CmiMyNode() + 1) % CmiNumNodes()), (int)sizeof f, &f);
}

static void silent(void *msg) {
  CmiFree(msg);
  CcsNoReply();
}

/* Only the first reply goes; the second and the CcsNoReply after it do
 * nothing (Charm++'s CcsSendReplyNoError). */
static void noerror(void *msg) {
  CmiFree(msg);
  CcsSendReplyNoError(4, "once");
  CcsSendReplyNoError(5, "twice");
  CcsNoReply();
}

static void with_user(void *user, int len, const void *data) {
  char out[128];
  snprintf(out, sizeof out, "fn on PE %d: %s, %d bytes: %.*s", CmiMyPe(), (const char *)user, len,
           len, (const char *)data);
  reply_text(out);
}

static void used(void *msg) {
  char out[64];
  snprintf(out, sizeof out, "used on PE %d (remote request: %d)", CmiMyPe(), CcsIsRemoteRequest());
  reply_text(out);
  CmiFree(msg);
}

static void stop(void *msg) {
  CmiFree(msg);
  reply_text("stopping");
  CmiPrintf("stop requested on PE %d\n", CmiMyPe());
  ConverseExit(0);
}

static void ready(void *msg) {
  CmiFree(msg);
  if (++ready_count == CmiNumPes()) {
    CmiPrintf("server ready on %d PEs\n", CmiNumPes());
  }
}

static char user_data[] = "user data";

static void start(int argc, char **argv) {
  char plain[CmiMsgHeaderSizeBytes + 5];
  char note[CmiMsgHeaderSizeBytes];
  (void)argc;
  (void)argv;
  echo_idx = CcsRegisterHandler("echo", echo);
  CcsRegisterHandler("whoami", whoami);
  CcsSetMergeFn("whoami", CcsMerge_concat);
  CcsRegisterHandler("sum", sum);
  CcsSetMergeFn("sum", CcsMerge_sum_int);
  CcsRegisterHandler("maxd", maxd);
  CcsSetMergeFn("maxd", CcsMerge_max_double);
  CcsRegisterHandler("join", join);
  CcsSetMergeFn("join", join_merge);
  CcsRegisterHandler("delay", delay);
  CcsRegisterHandler("silent", silent);
  CcsRegisterHandler("noerror", noerror);
  CcsRegisterHandler("delay_twice", delay_twice);
  CcsRegisterHandler("delay_far", delay_far);
  CcsRegisterHandlerFn("fn", with_user, user_data);
  CcsUseHandler("used", CmiRegisterHandler(used));
  CcsRegisterHandler("stop", stop);
  forward_idx = CmiRegisterHandler(forward);
  ready_idx = CmiRegisterHandler(ready);

  /* No request is being handled: nothing is owed, nothing happens. */
  CcsSendReplyNoError(3, "out");
  CcsNoReply();
  if (CmiMyPe() == 0) {
    CmiPrintf("CcsEnabled %d, CcsIsRemoteRequest %d\n", CcsEnabled(), CcsIsRemoteRequest());
    /* An ordinary message to a CCS handler is not a CCS request. */
    memcpy(plain + CmiMsgHeaderSizeBytes, "plain", 5);
    CmiSetHandler(plain, echo_idx);
    CmiSyncSend(0, (int)sizeof plain, plain);
  }
  CmiSetHandler(note, ready_idx);
  CmiSyncSend(0, (int)sizeof note, note);
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
