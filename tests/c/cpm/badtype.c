/* Not built by the Makefile: `convcc -gen-cpm badtype.c` must fail,
 * naming this file and the line of the unknown type. */
#include <converse.h>

typedef struct {
  int w, h;
} widget;

CpmInvokable draw(int times,
                  widget w) {
  (void)times;
  (void)w;
}
