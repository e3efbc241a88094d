/*-------------------------------------------------------------------------
 *
 * digest.c
 *		SHA-256 digests of lease names (termlock.c's lock tags, shmem.c's
 *		keys of the names waited for), from one hashing context kept for
 *		the life of the backend.  A term change digests its name twice, and
 *		creating and freeing a context each time (with OpenSSL: allocating
 *		it, finding the algorithm, remembering it in a resource owner)
 *		costs more than hashing a short name.
 *
 *		The context is allocated in TopMemoryContext and belongs to a
 *		resource owner of this file's own, never released, as plpgsql's
 *		shared simple-expression resource owner is: it outlives every
 *		transaction, and is never in use when an error ends one (it is set
 *		up again from scratch for each digest).  Once it exists, a digest
 *		raises no error, and can be taken at the end of a transaction
 *		(wakeup.c's, through shmem.c's keys).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "digest.h"

#if PG_VERSION_NUM >= 140000
#include "common/cryptohash.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#endif

#if PG_VERSION_NUM >= 140000
static pg_cryptohash_ctx *ctx = NULL;
#endif

/*
 * Set up the context, if this backend has none yet: after this, a digest
 * allocates nothing of PostgreSQL's, and hl_sha256_try() can be used where
 * no error may be raised (at the end of a transaction).
 */
void
hl_sha256_prepare(void)
{
#if PG_VERSION_NUM >= 140000
	static ResourceOwner owner = NULL;

	if (ctx == NULL)
	{
		ResourceOwner save_owner = CurrentResourceOwner;
		MemoryContext save_context = MemoryContextSwitchTo(TopMemoryContext);

		if (owner == NULL)
			owner = ResourceOwnerCreate(NULL, "hoplock digests");
		CurrentResourceOwner = owner;
		ctx = pg_cryptohash_create(PG_SHA256);
		CurrentResourceOwner = save_owner;
		MemoryContextSwitchTo(save_context);
		if (ctx == NULL)
			ereport(ERROR,
					(errcode(ERRCODE_OUT_OF_MEMORY),
					 errmsg("out of memory")));
	}
#endif
}

/*
 * SHA-256 of "len" bytes at "data" into "digest"; false if it could not be
 * computed.  Raises nothing once hl_sha256_prepare() has been called.
 */
bool
hl_sha256_try(const uint8 *data, size_t len,
			  uint8 digest[PG_SHA256_DIGEST_LENGTH])
{
#if PG_VERSION_NUM >= 140000
	if (ctx == NULL)
		hl_sha256_prepare();
	return pg_cryptohash_init(ctx) >= 0 &&
		pg_cryptohash_update(ctx, data, len) >= 0 &&
#if PG_VERSION_NUM >= 150000
		pg_cryptohash_final(ctx, digest, PG_SHA256_DIGEST_LENGTH) >= 0;
#else
		pg_cryptohash_final(ctx, digest) >= 0;
#endif
#else
	pg_sha256_ctx sha;

	pg_sha256_init(&sha);
	pg_sha256_update(&sha, data, len);
	pg_sha256_final(&sha, digest);
	return true;
#endif
}

/* SHA-256 of "len" bytes at "data" into "digest". */
void
hl_sha256(const uint8 *data, size_t len, uint8 digest[PG_SHA256_DIGEST_LENGTH])
{
	if (!hl_sha256_try(data, len, digest))
		elog(ERROR, "could not compute SHA-256 digest");
}
