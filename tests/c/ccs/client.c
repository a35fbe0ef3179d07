/* A plain C program (no ConverseInit) using the CCS client library against
 * tests/c/ccs/server.c: the layout, requests to each PE, broadcasts and
 * multicasts with merged replies, a delayed reply, no reply, errors, and
 * "stop". Usage: client HOST PORT [KEY | ask HANDLER]. With KEY (32 hex
 * digits), it first checks that the server refuses a client without it or
 * with another key, then does everything authenticated. With `ask HANDLER`
 * it only sends HANDLER a request for PE 0 and prints what came back. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ccs-client.h>

#define WAIT 30 /* seconds: longer than any reply takes */

static CcsServer svr;

/* Sends a request to `pe` (-1: broadcast) and receives its reply as text. */
static int ask(const char *handler, int pe, const char *data, char *out, int outsize) {
  int size = data ? (int)strlen(data) : 0;
  int sent = pe < 0 ? CcsSendBroadcastRequest(&svr, handler, size, data)
                    : CcsSendRequest(&svr, handler, pe, size, data);
  int got;
  if (sent != 0) {
    printf("%s: send failed\n", handler);
    exit(1);
  }
  got = CcsRecvResponse(&svr, outsize - 1, out, WAIT);
  out[got < 0 ? 0 : got] = '\0';
  return got;
}

int main(int argc, char **argv) {
  const char *host;
  int port, n, i, node, got;
  char out[512];
  CcsSec_secretKey key, *use_key = NULL;
  if (argc < 3) {
    fprintf(stderr, "usage: client HOST PORT [KEY]\n");
    return 2;
  }
  host = argv[1];
  port = atoi(argv[2]);
  if (argc > 4 && strcmp(argv[3], "ask") == 0) {
    if (CcsConnect(&svr, host, port, NULL) != 0) return 1;
    CcsSendRequest(&svr, argv[4], 0, 0, NULL);
    got = CcsRecvResponse(&svr, (int)sizeof out - 1, out, WAIT);
    out[got < 0 ? 0 : got] = '\0';
    printf("%s: %d %s\n", argv[4], got, out);
    CcsFinalize(&svr);
    return 0;
  }
  if (argc > 3) {
    CcsSec_secretKey other;
    /* As Charm++'s CCS clients turn a key argument into a key. */
    if (!CCS_AUTH_makeSecretKey(argv[3], &key)) {
      fprintf(stderr, "bad key %s\n", argv[3]);
      return 2;
    }
    other = key;
    other.data[0] ^= 1;
    printf("no key: %d\n", CcsConnect(&svr, host, port, NULL));
    CcsFinalize(&svr);
    printf("other key: %d\n", CcsConnect(&svr, host, port, &other));
    CcsFinalize(&svr);
    use_key = &key;
  }

  if (CcsConnect(&svr, host, port, use_key) != 0) {
    printf("connect failed\n");
    return 1;
  }
  n = CcsNumPes(&svr);
  printf("layout: %d nodes, %d PEs, authenticated %d, fields %d %d\n", CcsNumNodes(&svr), n,
         svr.isAuth, svr.numNodes, svr.numPes);
  for (node = 0; node < CcsNumNodes(&svr); node++) {
    printf("node %d: first %d, size %d (numProcs %d)\n", node, CcsNodeFirst(&svr, node),
           CcsNodeSize(&svr, node), svr.numProcs[node]);
  }
  printf("node %d: first %d, size %d\n", CcsNumNodes(&svr), CcsNodeFirst(&svr, CcsNumNodes(&svr)),
         CcsNodeSize(&svr, CcsNumNodes(&svr)));
  printf("server %d.%d.%d.%d, port matches %d\n", svr.hostIP.data[0], svr.hostIP.data[1],
         svr.hostIP.data[2], svr.hostIP.data[3], (int)svr.hostPort == port);

  for (i = 0; i < n; i++) {
    ask("echo", i, "hello", out, sizeof out);
    printf("echo %d: %s\n", i, out);
  }

  ask("whoami", -1, NULL, out, sizeof out);
  printf("whoami: %s\n", out);
  {
    int total = 0;
    CcsSendBroadcastRequest(&svr, "sum", 0, NULL);
    got = CcsRecvResponse(&svr, (int)sizeof total, &total, WAIT);
    printf("sum: %d (%d bytes)\n", total, got);
  }
  {
    int pes[2], total = 0, npes = n > 1 ? 2 : 1;
    pes[0] = n - 1;
    pes[1] = 0;
    CcsSendMulticastRequest(&svr, "sum", npes, pes, 0, NULL);
    got = CcsRecvResponse(&svr, (int)sizeof total, &total, WAIT);
    printf("multicast sum: %d (%d bytes), list kept %d %d\n", total, got, pes[0], pes[1]);
    printf("empty multicast: %d\n", CcsSendMulticastRequest(&svr, "sum", 0, pes, 0, NULL));
  }
  {
    double m = 0;
    CcsSendBroadcastRequest(&svr, "maxd", 0, NULL);
    got = CcsRecvResponse(&svr, (int)sizeof m, &m, WAIT);
    printf("maxd: %.1f (%d bytes)\n", m, got);
  }
  ask("join", -1, NULL, out, sizeof out);
  printf("join: %s\n", out);

  for (i = 0; i < n; i++) {
    ask("delay", i, NULL, out, sizeof out);
    printf("delay %d: %s\n", i, out);
  }

  CcsSendRequest(&svr, "silent", 0, 0, NULL);
  printf("silent: %d\n", CcsRecvResponse(&svr, (int)sizeof out, out, WAIT));

  got = ask("noerror", n - 1, NULL, out, sizeof out);
  printf("noerror: %s (%d bytes)\n", out, got);

  ask("fn", n - 1, "12345", out, sizeof out);
  printf("fn: %s\n", out);
  ask("used", 0, NULL, out, sizeof out);
  printf("used: %s\n", out);
  got = ask("nosuch", 0, "x", out, sizeof out);
  printf("nosuch: %d bytes\n", got);

  printf("bad pe: %d\n", CcsSendRequest(&svr, "echo", n, 0, NULL));
  printf("negative pe: %d\n", CcsSendRequest(&svr, "echo", -2, 0, NULL));

  CcsSendRequest(&svr, "echo", 0, 3, "abc");
  printf("small buffer: %d\n", CcsRecvResponse(&svr, 4, out, WAIT));
  {
    /* The reply is still there for a receive into a buffer of its own. */
    int size = -1;
    void *buf = NULL;
    got = CcsRecvResponseMsg(&svr, &size, &buf, WAIT);
    printf("msg: %d %d %.*s\n", got, size, size, (const char *)buf);
    free(buf);
  }
  {
    int polls = 0, probe;
    struct timespec ms = {0, 1000000};
    CcsSendRequest(&svr, "whoami", 0, 0, NULL);
    while ((probe = CcsProbe(&svr)) == 0 && polls < 20000) {
      nanosleep(&ms, NULL);
      polls++;
    }
    printf("probe: %d\n", probe);
    got = CcsRecvResponse(&svr, (int)sizeof out - 1, out, WAIT);
    out[got < 0 ? 0 : got] = '\0';
    printf("after probe: %s\n", out);
    printf("probe with nothing asked: %d\n", CcsProbe(&svr));
    printf("probe timeout with nothing asked: %d\n", CcsProbeTimeout(&svr, 10));
    CcsSendRequest(&svr, "whoami", n - 1, 0, NULL);
    printf("probe timeout: %d\n", CcsProbeTimeout(&svr, -1)); /* waits as long as it takes */
    got = CcsRecvResponse(&svr, (int)sizeof out - 1, out, WAIT);
    out[got < 0 ? 0 : got] = '\0';
    printf("after probe timeout: %s\n", out);
    /* A reply not wanted: the request is over, the next one works. */
    CcsSendRequest(&svr, "echo", 0, 3, "abc");
    printf("no response: %d\n", CcsNoResponse(&svr));
    printf("receive after no response: %d\n", CcsRecvResponse(&svr, (int)sizeof out, out, 0));
    printf("receive with nothing asked: %d\n", CcsRecvResponse(&svr, (int)sizeof out, out, 0));
  }

  ask("stop", 0, NULL, out, sizeof out);
  printf("stop: %s\n", out);
  CcsFinalize(&svr);
  printf("after finalize: %d %d\n", CcsNumPes(&svr), CcsSendRequest(&svr, "echo", 0, 0, NULL));
  return 0;
}
