/*
 * pup_c.h: PUP (pack/unpack) from C, Charm++'s C names, over
 * crates/converse-capi/src/pup.rs. converse.h includes it.
 *
 * A pup function names the items of a structure once and serves three
 * pup_ers: a sizer counts their bytes, a packer copies them into memory, an
 * unpacker copies them back out:
 *
 *   void pup_foo(pup_er p, foo *f) {
 *     pup_int(p, &f->n);
 *     if (pup_isUnpacking(p)) f->items = (double *)malloc(f->n * sizeof(double));
 *     pup_doubles(p, f->items, f->n);
 *   }
 *
 * Byte layout: each item's native bytes, in the order named, nothing
 * between them (Charm++'s toMem/fromMem). A sizer counts exactly the bytes
 * a packer of the same function writes.
 *
 * Bounds: pup_new_toMemSized and pup_new_fromMemSized never write or read
 * past the size they are given: an item that would cross the end ends the
 * job with a message naming the call, the item's size, the offset and the
 * buffer's size. Charm++'s pup_new_toMem and pup_new_fromMem take no size
 * and trust the caller (size the buffer with a sizer first).
 *
 * What is here:
 *   pup_ers         pup_new_sizer, pup_new_toMem, pup_new_fromMem,
 *                   pup_new_toMemSized, pup_new_fromMemSized, pup_destroy
 *   queries         pup_isPacking, pup_isUnpacking, pup_isSizing,
 *                   pup_isDeleting, pup_isUserlevel, pup_isRestarting (the
 *                   last three always 0 here), pup_size
 *   items           pup_T(p, T *v) and pup_Ts(p, T *arr, int nItems) for
 *                   char, short, int, long, uchar, ushort, uint, ulong,
 *                   float, double, pointer (void *), int8 (int64_t);
 *                   pup_bytes(p, void *ptr, int nBytes)
 * Not here: Charm++'s network (machine-independent) pup_ers, the fmt
 * pup_ers, comments and sync codes, pup_encodeSize/pup_decodeSize,
 * pup_typeString.
 */
#ifndef CONVERSE_RS_PUP_C_H
#define CONVERSE_RS_PUP_C_H

#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Opaque. */
typedef void *pup_er;

pup_er pup_new_sizer(void);
pup_er pup_new_toMem(void *Nbuf);
pup_er pup_new_fromMem(const void *Nbuf);
pup_er pup_new_toMemSized(void *buf, int size);
pup_er pup_new_fromMemSized(const void *buf, int size);
void pup_destroy(pup_er p);

/* 1 for true, 0 for false. */
int pup_isPacking(const pup_er p);
int pup_isUnpacking(const pup_er p);
int pup_isSizing(const pup_er p);
int pup_isDeleting(const pup_er p);
int pup_isUserlevel(const pup_er p);
int pup_isRestarting(const pup_er p);

/* Bytes counted (sizer), written (packer) or read (unpacker) so far. */
int pup_size(const pup_er p);

void pup_char(pup_er p, char *v);
void pup_chars(pup_er p, char *arr, int nItems);
void pup_short(pup_er p, short *v);
void pup_shorts(pup_er p, short *arr, int nItems);
void pup_int(pup_er p, int *v);
void pup_ints(pup_er p, int *arr, int nItems);
void pup_long(pup_er p, long *v);
void pup_longs(pup_er p, long *arr, int nItems);
void pup_uchar(pup_er p, unsigned char *v);
void pup_uchars(pup_er p, unsigned char *arr, int nItems);
void pup_ushort(pup_er p, unsigned short *v);
void pup_ushorts(pup_er p, unsigned short *arr, int nItems);
void pup_uint(pup_er p, unsigned int *v);
void pup_uints(pup_er p, unsigned int *arr, int nItems);
void pup_ulong(pup_er p, unsigned long *v);
void pup_ulongs(pup_er p, unsigned long *arr, int nItems);
void pup_float(pup_er p, float *v);
void pup_floats(pup_er p, float *arr, int nItems);
void pup_double(pup_er p, double *v);
void pup_doubles(pup_er p, double *arr, int nItems);
void pup_pointer(pup_er p, void **v);
void pup_pointers(pup_er p, void **arr, int nItems);
void pup_int8(pup_er p, int64_t *v);
void pup_int8s(pup_er p, int64_t *arr, int nItems);

/* Untyped bytes. */
void pup_bytes(pup_er p, void *ptr, int nBytes);

#ifdef __cplusplus
}
#endif

#include "converse-rs/absent.h" /* Charm++'s names that are not here */

#endif /* CONVERSE_RS_PUP_C_H */
