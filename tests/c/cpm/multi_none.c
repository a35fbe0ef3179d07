/* The third file of the `multi` program: no invokable, yet a .cpm.h with
 * its CpmInitializeThisModule (see multi_main.c). */
#include <converse.h>

#include "multi_none.cpm.h"

void none_init(void);
const char *none_name(void);

void none_init(void) { CpmInitializeThisModule(); }

/* A function pointer and a string with braces: nothing to generate. */
static const char *(*namer)(void) = none_name;
const char *none_name(void) { return namer == none_name ? "multi_none.c has none {}" : "?"; }
