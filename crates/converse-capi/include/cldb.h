/*
 * cldb.h: the seed balancer's token facilities (the extensions manual's
 * section 7.3.2), over crates/converse-capi/src/ext_cld.rs (the Rust crate
 * converse-ext). The interface every program uses (CldEnqueue,
 * CldRegisterInfoFn, ...) is in converse.h (converse-rs/ext.h).
 *
 *   CldCountTokens, CldLoad, CldPutToken, CldGetToken, CldMultipleSend,
 *   CldSwitchHandler, CldRestoreHandler, CldModuleGeneralInit
 *
 * The strategies are the runtime's (+balancer none, rand, neighbor,
 * workstealing, ring) unless the program brings its own, as the manual's
 * section 7.3 writes one: a program that defines CldEnqueue,
 * CldModuleInit and CldGetStrategy (and, if it wants, CldEnqueueMulti and
 * CldNodeEnqueue) links those instead of the library's (which are weak
 * symbols), and its CldModuleInit runs on every PE before the start
 * function. CldMultipleSend's seeds stay movable on arrival (they go to the
 * token queue there, as the manual's CldBalanceHandler puts them).
 */
#ifndef CONVERSE_RS_CLDB_H
#define CONVERSE_RS_CLDB_H

#include "converse.h"

#ifdef __cplusplus
extern "C" {
#endif

/* The seeds in the calling PE's token queue (movable). */
int CldCountTokens(void);
/* The calling PE's load: its scheduler queue, tokens included. */
int CldLoad(void);
/* Puts msg (its own handler set, CmiSetInfo(msg, infofn) done) in the
 * calling PE's token queue, at its priority; takes msg. */
void CldPutToken(void *msg);
/* Takes the most urgent seed out of the token queue (0 if none); its info
 * slot holds its info function's index again. */
void CldGetToken(char **msg);
/* Moves up to numToSend seeds of the token queue to PE pe, where they stay
 * movable. */
void CldMultipleSend(int pe, int numToSend);
/* Sets the message's handler, keeping its own in the info slot. */
void CldSwitchHandler(void *msg, int handler);
/* Puts back the handler CldSwitchHandler kept. */
void CldRestoreHandler(void *msg);
/* Sets the token queue up on the calling PE (CldModuleInit does it); argv
 * is not read. */
void CldModuleGeneralInit(char **argv);

#ifdef __cplusplus
}
#endif

#endif /* CONVERSE_RS_CLDB_H */
