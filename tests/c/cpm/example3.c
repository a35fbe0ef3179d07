/* The manual's third CPM example (6.2, example3.c): two types of the
 * program's own, `coordinate` (CpmDeclareSimple) and `intptr`
 * (CpmDeclarePointer), with their pack hooks, passed one by one and in
 * arrays. The hooks are called as Charm++'s scanner calls them: the simple
 * type's by value (here macros converting in place: a "network format"
 * that swaps x and y, so a missing unpack would show), the pointer type's
 * as the manual writes them. */
#include <converse.h>
#include <conv-cpm.h>

typedef struct {
  double x, y;
} coordinate;
CpmDeclareSimple(coordinate);

static void coordinate_swap(coordinate *p) {
  double t = p->x;
  CpmPack_double(p->x);
  CpmPack_double(p->y);
  p->x = p->y;
  p->y = t;
}
#define CpmPack_coordinate(v) coordinate_swap(&(v))
#define CpmUnpack_coordinate(v) coordinate_swap(&(v))

typedef int *intptr;
CpmDeclarePointer(intptr);

#define CpmPtrSize_intptr(p) sizeof(int)

void CpmPtrPack_intptr(void *p, intptr v);
void CpmPtrPack_intptr(void *p, intptr v) {
  *(int *)p = *v;
  CpmPack_int(*(int *)p);
}

intptr CpmPtrUnpack_intptr(void *p);
intptr CpmPtrUnpack_intptr(void *p) {
  CpmUnpack_int(*(int *)p);
  return (int *)p;
}

#define CpmPtrFree_intptr(p) (0)

#include "example3.cpm.h"

CpmInvokable finish(void) { CsdExitScheduler(); }

CpmInvokable show(coordinate c, intptr p, CpmDim n, coordinate *cs, CpmDim m, intptr *ps) {
  int i;
  double sx = 0, sy = 0;
  int sum = 0;
  for (i = 0; i < n; i++) {
    sx += cs[i].x;
    sy += cs[i].y;
  }
  for (i = 0; i < m; i++) sum += *ps[i];
  CmiPrintf("PE %d: c (%.1f, %.1f), *p %d, %d coordinates summing to (%.1f, %.1f), %d ints "
            "summing to %d\n",
            CmiMyPe(), c.x, c.y, *p, n, sx, sy, m, sum);
  Cpm_finish(CpmSend(CpmALL));
}

static void user_main(int argc, char **argv) {
  (void)argc;
  (void)argv;
  CpmModuleInit();
  CpmInitializeThisModule();
  if (CmiMyPe() == 0) {
    coordinate c = {1.5, -2.5};
    coordinate cs[3] = {{1, 10}, {2, 20}, {3, 30}};
    int v = 42, a = 1, b = 2, d = 3, e = 4;
    intptr ps[4];
    ps[0] = &a;
    ps[1] = &b;
    ps[2] = &d;
    ps[3] = &e;
    Cpm_show(CpmSend(CmiNumPes() - 1), c, &v, 3, cs, 4, ps);
    /* The arguments were copied: changing them now changes nothing. */
    c.x = 0;
    v = 0;
    cs[0].x = 100;
    a = 100;
  }
}

int main(int argc, char **argv) {
  ConverseInit(argc, argv, user_main, 0, 0);
  return 0;
}
