/*
 * conv-random.h: random numbers (Crn), over converse-rs (part of
 * converse.h, which includes it; it also works alone).
 *
 * A 64-bit linear congruential generator whose output is mixed. Each PE
 * has a default stream (CrnSrand, CrnRand, CrnDrand), seeded 0 until
 * CrnSrand; a program keeps streams of its own in CrnStream variables
 * (CrnInitStream, then CrnInt, CrnDouble, CrnFloat). The same seed and
 * type on the same PE give the same numbers; different seeds or PEs give
 * streams that do not overlap.
 *
 * A CrnStream is a complete type of 56 bytes: declare one anywhere and
 * copy it freely (both copies go on alike); its fields are the runtime's.
 * Using one that CrnInitStream did not initialise, a null pointer, or a
 * stream type other than 0, 1, 2 ends the job naming the call.
 */
#ifndef CONVERSE_RS_CONV_RANDOM_H
#define CONVERSE_RS_CONV_RANDOM_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct rngen_ {
  unsigned int initialised_;      /* the runtime's: set by CrnInitStream */
  unsigned int reserved_;         /* the runtime's */
  unsigned long long state_[6];   /* the runtime's: the generator's state */
} CrnStream;

/* type: 0, 1 or 2 (which multiplier). */
void CrnInitStream(CrnStream *dest, unsigned int seed, int type);
/* 0 .. INT_MAX */
int CrnInt(CrnStream *genptr);
/* [0, 1) */
double CrnDouble(CrnStream *genptr);
/* Exactly (float) CrnDouble(genptr): [0, 1], 1.0 about once in 2^25. */
float CrnFloat(CrnStream *genptr);

void CrnSrand(unsigned int seed);
/* 0 .. INT_MAX */
int CrnRand(void);
/* [0, 1) */
double CrnDrand(void);

#ifdef __cplusplus
}
#endif

#endif /* CONVERSE_RS_CONV_RANDOM_H */
