/*
 * ccs-auth.h: the keys of authenticated CCS (the Converse Client-Server
 * interface), for clients. ccs-client.h includes it.
 *
 *   CcsSec_secretKey        a security level's 16-byte key
 *   CCS_AUTH_makeSecretKey  a key from its text: hex digits, two a byte,
 *                           as the server's ++server-auth file and its
 *                           one-time-key line write it (Charm++ reads the
 *                           pairs as decimal numbers; see docs/c-abi.md);
 *                           1 if a byte was read, else 0
 *
 * Charm++'s hashing and random-stream helpers of this header are not
 * there (docs/c-abi.md): the client library authenticates by itself.
 */
#ifndef CONVERSE_RS_CCS_AUTH_H
#define CONVERSE_RS_CCS_AUTH_H

#ifdef __cplusplus
extern "C" {
#endif

typedef struct {
  unsigned char data[16];
} CcsSec_secretKey;

int CCS_AUTH_makeSecretKey(const char *str, CcsSec_secretKey *key);

#ifdef __cplusplus
}
#endif

#endif /* CONVERSE_RS_CCS_AUTH_H */
