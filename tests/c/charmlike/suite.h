/* The suite's parts, each a module as in Charm++'s megacon test: a
 * `*_moduleinit` registering its handlers and Cpvs on every PE, and a
 * `*_init` that PE 0 calls to start it. A part calls suite_done() when it
 * has checked what it tests. */
#ifndef SUITE_H
#define SUITE_H
#include "converse.h"

void suite_done(const char *part);

void ring_moduleinit(void);
void ring_init(void);
void topo_moduleinit(void);
void topo_init(void);
void args_moduleinit(char **argv);
void args_init(void);
void vars_moduleinit(void);
void vars_init(void);
#endif
