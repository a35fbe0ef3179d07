/* PUP from C. Every PE packs and unpacks a record (every basic type, a
 * heap array, a fixed array, raw bytes) and a struct of arrays of every
 * type, and checks: the sizer's size is the sum of the items' sizes, the
 * packer writes exactly that many bytes, the unbounded and the sized
 * packers write the same bytes, and unpacking gives back the original.
 * PE 0 prints a line per check once every PE has passed.
 *
 * With an argument, PE 0 instead overruns a buffer and the job must end:
 *   overrun-pack     packs the record into a buffer one byte short
 *   overrun-unpack   unpacks it from a buffer one byte short */
#include <converse.h>
#include <pup_c.h>

typedef struct {
  char c;
  short s;
  int i;
  long l;
  unsigned char uc;
  unsigned short us;
  unsigned int ui;
  unsigned long ul;
  float f;
  double d;
  void *ptr;
  int64_t i8;
  int n;
  double *items; /* n of them, on the heap */
  int arr[5];
  char name[8];
} Record;

typedef struct {
  char c[3];
  short s[3];
  int i[3];
  long l[3];
  unsigned char uc[3];
  unsigned short us[3];
  unsigned int ui[3];
  unsigned long ul[3];
  float f[3];
  double d[3];
  void *ptr[3];
  int64_t i8[3];
} Arrays;

CpvStaticDeclare(int, h_passed);
CpvStaticDeclare(int, passed);

static void pup_record(pup_er p, Record *r) {
  pup_char(p, &r->c);
  pup_short(p, &r->s);
  pup_int(p, &r->i);
  pup_long(p, &r->l);
  pup_uchar(p, &r->uc);
  pup_ushort(p, &r->us);
  pup_uint(p, &r->ui);
  pup_ulong(p, &r->ul);
  pup_float(p, &r->f);
  pup_double(p, &r->d);
  pup_pointer(p, &r->ptr);
  pup_int8(p, &r->i8);
  pup_int(p, &r->n);
  if (pup_isUnpacking(p)) r->items = (double *)malloc(r->n * sizeof(double));
  pup_doubles(p, r->items, r->n);
  pup_ints(p, r->arr, 5);
  pup_bytes(p, r->name, (int)sizeof r->name);
}

static void pup_arrays(pup_er p, Arrays *a) {
  pup_chars(p, a->c, 3);
  pup_shorts(p, a->s, 3);
  pup_ints(p, a->i, 3);
  pup_longs(p, a->l, 3);
  pup_uchars(p, a->uc, 3);
  pup_ushorts(p, a->us, 3);
  pup_uints(p, a->ui, 3);
  pup_ulongs(p, a->ul, 3);
  pup_floats(p, a->f, 3);
  pup_doubles(p, a->d, 3);
  pup_pointers(p, a->ptr, 3);
  pup_int8s(p, a->i8, 3);
}

static int record_bytes(const Record *r) {
  return (int)(sizeof(char) + sizeof(short) + sizeof(int) + sizeof(long) + sizeof(unsigned char) +
               sizeof(unsigned short) + sizeof(unsigned int) + sizeof(unsigned long) + sizeof(float) +
               sizeof(double) + sizeof(void *) + sizeof(int64_t) + sizeof(int) +
               r->n * sizeof(double) + 5 * sizeof(int) + 8);
}

static void fill_record(Record *r, int pe) {
  int k;
  memset(r, 0, sizeof *r);
  r->c = 'x';
  r->s = -12345;
  r->i = -100000 - pe;
  r->l = -(1L << 40);
  r->uc = 250;
  r->us = 65000;
  r->ui = 4000000000u;
  r->ul = ~0UL - 7;
  r->f = 1.5f;
  r->d = -2.25e100;
  r->ptr = (void *)r;
  r->i8 = -((int64_t)1 << 60);
  r->n = 7 + pe;
  r->items = (double *)malloc(r->n * sizeof(double));
  for (k = 0; k < r->n; k++) r->items[k] = k * 0.5 + pe;
  for (k = 0; k < 5; k++) r->arr[k] = k * k - pe;
  memcpy(r->name, "pupname", 8);
}

static int same_record(const Record *a, const Record *b) {
  int k;
  if (a->c != b->c || a->s != b->s || a->i != b->i || a->l != b->l || a->uc != b->uc ||
      a->us != b->us || a->ui != b->ui || a->ul != b->ul || a->f != b->f || a->d != b->d ||
      a->ptr != b->ptr || a->i8 != b->i8 || a->n != b->n)
    return 0;
  for (k = 0; k < a->n; k++)
    if (a->items[k] != b->items[k]) return 0;
  for (k = 0; k < 5; k++)
    if (a->arr[k] != b->arr[k]) return 0;
  return memcmp(a->name, b->name, 8) == 0;
}

static void fill_arrays(Arrays *a) {
  int k;
  memset(a, 0, sizeof *a);
  for (k = 0; k < 3; k++) {
    a->c[k] = (char)('a' + k);
    a->s[k] = (short)(-k * 1000);
    a->i[k] = -k * 100000;
    a->l[k] = -((long)k << 35);
    a->uc[k] = (unsigned char)(200 + k);
    a->us[k] = (unsigned short)(60000 + k);
    a->ui[k] = 3000000000u + k;
    a->ul[k] = ~0UL - k;
    a->f[k] = 0.25f * k;
    a->d[k] = 1e-300 * (k + 1);
    a->ptr[k] = (void *)&a->ptr[k];
    a->i8[k] = ((int64_t)1 << 62) - k;
  }
}

static int arrays_bytes(void) {
  return (int)(3 * (sizeof(char) + sizeof(short) + sizeof(int) + sizeof(long) + sizeof(unsigned char) +
                    sizeof(unsigned short) + sizeof(unsigned int) + sizeof(unsigned long) +
                    sizeof(float) + sizeof(double) + sizeof(void *) + sizeof(int64_t)));
}

static int sized(Record *r) {
  pup_er p = pup_new_sizer();
  int n;
  if (!pup_isSizing(p) || pup_isPacking(p) || pup_isUnpacking(p) || pup_isDeleting(p) ||
      pup_isUserlevel(p) || pup_isRestarting(p))
    CmiAbort("pup: a sizer's queries are wrong");
  pup_record(p, r);
  n = pup_size(p);
  pup_destroy(p);
  return n;
}

/* Globals: reachable while an overrun ends the job. */
static Record g_record;
static char g_buf[1024];
static pup_er g_p;

static void overrun(const char *mode) {
  int n;
  fill_record(&g_record, 0);
  n = sized(&g_record);
  if (n > (int)sizeof g_buf) CmiAbort("pup: the record is larger than the buffer");
  if (strcmp(mode, "overrun-pack") == 0) {
    CmiPrintf("pup: packing %d bytes into %d\n", n, n - 1);
    g_p = pup_new_toMemSized(g_buf, n - 1);
    pup_record(g_p, &g_record);
  } else {
    Record back;
    g_p = pup_new_toMemSized(g_buf, n);
    pup_record(g_p, &g_record);
    pup_destroy(g_p);
    CmiPrintf("pup: unpacking %d bytes from %d\n", n, n - 1);
    memset(&back, 0, sizeof back);
    g_p = pup_new_fromMemSized(g_buf, n - 1);
    pup_record(g_p, &back);
  }
  CmiAbort("pup: the overrun was not caught");
}

static void passed(void *msg) {
  CmiFree(msg);
  if (++CpvAccess(passed) == CmiNumPes()) {
    CmiPrintf("pup: record sized, packed and unpacked on %d PEs\n", CmiNumPes());
    CmiPrintf("pup: arrays of every type round-trip on %d PEs\n", CmiNumPes());
    ConverseExit();
  }
}

static void round_trips(void) {
  Record r, back;
  Arrays a, a_back;
  char *buf, *buf2;
  int n, want;
  pup_er p;

  fill_record(&r, CmiMyPe());
  n = sized(&r);
  want = record_bytes(&r);
  if (n != want) CmiAbort("pup: the sizer counted %d bytes, the items take %d", n, want);

  buf = (char *)malloc(n);
  p = pup_new_toMemSized(buf, n);
  if (!pup_isPacking(p) || pup_isSizing(p) || pup_isUnpacking(p)) CmiAbort("pup: a packer's queries");
  pup_record(p, &r);
  if (pup_size(p) != n) CmiAbort("pup: packed %d bytes, sized %d", pup_size(p), n);
  pup_destroy(p);

  /* Charm++'s unbounded packer writes the same bytes. */
  buf2 = (char *)malloc(n);
  p = pup_new_toMem(buf2);
  pup_record(p, &r);
  if (pup_size(p) != n) CmiAbort("pup: toMem packed %d bytes, sized %d", pup_size(p), n);
  pup_destroy(p);
  if (memcmp(buf, buf2, n) != 0) CmiAbort("pup: toMem and toMemSized differ");
  /* The layout is the items' bytes in order: the first is the char. */
  if (buf[0] != 'x') CmiAbort("pup: the first packed byte is %d", buf[0]);

  memset(&back, 0, sizeof back);
  p = pup_new_fromMemSized(buf, n);
  if (!pup_isUnpacking(p) || pup_isPacking(p) || pup_isSizing(p)) CmiAbort("pup: an unpacker's queries");
  pup_record(p, &back);
  if (pup_size(p) != n) CmiAbort("pup: unpacked %d bytes of %d", pup_size(p), n);
  pup_destroy(p);
  if (!same_record(&r, &back)) CmiAbort("pup: the unpacked record differs");
  free(back.items);

  memset(&back, 0, sizeof back);
  p = pup_new_fromMem(buf2);
  pup_record(p, &back);
  pup_destroy(p);
  if (!same_record(&r, &back)) CmiAbort("pup: the record unpacked by fromMem differs");
  free(back.items);
  free(buf);
  free(buf2);
  free(r.items);

  fill_arrays(&a);
  p = pup_new_sizer();
  pup_arrays(p, &a);
  n = pup_size(p);
  pup_destroy(p);
  if (n != arrays_bytes()) CmiAbort("pup: arrays sized %d, take %d", n, arrays_bytes());
  buf = (char *)malloc(n);
  p = pup_new_toMemSized(buf, n);
  pup_arrays(p, &a);
  pup_destroy(p);
  memset(&a_back, 0, sizeof a_back);
  p = pup_new_fromMemSized(buf, n);
  pup_arrays(p, &a_back);
  pup_destroy(p);
  free(buf);
  if (memcmp(&a, &a_back, sizeof a) != 0) CmiAbort("pup: the unpacked arrays differ");
  pup_destroy(NULL); /* does nothing */

  {
    char msg[CmiMsgHeaderSizeBytes];
    CmiSetHandler(msg, CpvAccess(h_passed));
    CmiSyncSend(0, sizeof msg, msg);
  }
}

static void start(int argc, char **argv) {
  CpvInitialize(int, h_passed);
  CpvInitialize(int, passed);
  CpvAccess(h_passed) = CmiRegisterHandler(passed);
  if (argc > 1) {
    if (CmiMyPe() == 0) overrun(argv[1]);
    return;
  }
  round_trips();
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, start, 0, 0);
  return 0;
}
