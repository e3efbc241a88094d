/*-------------------------------------------------------------------------
 *
 * digest.h
 *		SHA-256 digests of lease names, for the term locks (termlock.c) and
 *		the waiters' keys (shmem.c): digest.c.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_DIGEST_H
#define HOPLOCK_DIGEST_H

#include "common/sha2.h"

extern void hl_sha256_prepare(void);
extern bool hl_sha256_try(const uint8 *data, size_t len,
						  uint8 digest[PG_SHA256_DIGEST_LENGTH]);
extern void hl_sha256(const uint8 *data, size_t len,
					  uint8 digest[PG_SHA256_DIGEST_LENGTH]);

#endif							/* HOPLOCK_DIGEST_H */
