/* Prints the header's layout as C sees it; the test compares it with the
 * Rust definition. Runs without starting a job. */
#include <converse.h>
#include <stddef.h>

int main(void) {
  printf("size %d %d\n", (int)sizeof(CmiMsgHeaderBasic), CmiMsgHeaderSizeBytes);
  printf("handler %d\n", (int)offsetof(CmiMsgHeaderBasic, handler));
  /* The core's info slot, in Charm++'s two 16-bit halves. */
  printf("xhdl %d %d\n", (int)offsetof(CmiMsgHeaderBasic, xhdl), (int)sizeof(unsigned short));
  printf("info %d %d\n", (int)offsetof(CmiMsgHeaderBasic, info), (int)sizeof(unsigned short));
  printf("total_size %d\n", (int)offsetof(CmiMsgHeaderBasic, total_size));
  printf("src_pe %d\n", (int)offsetof(CmiMsgHeaderBasic, src_pe));
  printf("dest %d\n", (int)offsetof(CmiMsgHeaderBasic, dest));
  printf("root %d\n", (int)offsetof(CmiMsgHeaderBasic, root));
  printf("flags %d\n", (int)offsetof(CmiMsgHeaderBasic, flags));
  printf("coll %d\n", (int)offsetof(CmiMsgHeaderBasic, coll));
  return 0;
}
