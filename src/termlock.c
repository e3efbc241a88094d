/*-------------------------------------------------------------------------
 *
 * termlock.c
 *		The term lock: one heavyweight lock per lease name, on an advisory
 *		lock tag of its own class (pg_locks shows it as "advisory" with
 *		objsubid 26732).  A call that starts or ends a term takes it in
 *		ExclusiveLock, hoplock_fence in ShareLock, both conditionally and
 *		until the transaction ends (see lease.c for the protocol).
 *
 *		The tag is the database and 64 bits of the SHA-256 digest of the
 *		name.  A role that wanted to keep another role's lease from changing
 *		hands by holding a lock on a name of its own would need a name whose
 *		digest shares those 64 bits: a second preimage, which takes about
 *		2^64 digests.  (The waiters' condition variables are keyed with a
 *		secret of the server's: wait.c.)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "digest.h"
#include "hoplock.h"
#include "termlock.h"

#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"

/* locktag_field4 of term locks; SQL's advisory locks use 1 and 2 */
#define HL_LOCKTAG_CLASS	0x686c

/*
 * The digest of the last name asked about: a call looks a name up several
 * times (lock, unlock, wake-up), and hashing is the costly part.
 */
static uint8 last_digest[PG_SHA256_DIGEST_LENGTH];
static char last_name[HL_MAX_NAME_BYTES];
static int	last_len = -1;

static const uint8 *
name_digest(text *name)
{
	int			len = VARSIZE_ANY_EXHDR(name);

	if (len != last_len || len > HL_MAX_NAME_BYTES ||
		memcmp(VARDATA_ANY(name), last_name, len) != 0)
	{
		hl_sha256((const uint8 *) VARDATA_ANY(name), len, last_digest);
		if (len <= HL_MAX_NAME_BYTES)
		{
			memcpy(last_name, VARDATA_ANY(name), len);
			last_len = len;
		}
		else
			last_len = -1;
	}
	return last_digest;
}

static void
term_locktag(LOCKTAG *tag, text *name)
{
	const uint8 *d = name_digest(name);
	uint32		hi = ((uint32) d[0] << 24) | ((uint32) d[1] << 16) |
		((uint32) d[2] << 8) | d[3];
	uint32		lo = ((uint32) d[4] << 24) | ((uint32) d[5] << 16) |
		((uint32) d[6] << 8) | d[7];

	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, hi, lo, HL_LOCKTAG_CLASS);
}

/* Take the term lock of "name" without waiting; false if taken. */
bool
hl_term_trylock(text *name, LOCKMODE mode)
{
	LOCKTAG		tag;

	term_locktag(&tag, name);
	return LockAcquire(&tag, mode, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * Give back one hl_term_trylock() of a call that ended up changing nothing,
 * so that a failed attempt does not keep fences out for the rest of its
 * transaction.  The lock manager counts acquisitions: a lock this
 * transaction took earlier for a change it did make stays held.
 */
void
hl_term_unlock(text *name, LOCKMODE mode)
{
	LOCKTAG		tag;

	term_locktag(&tag, name);
	LockRelease(&tag, mode, false);
}

/* The first process among "vxids" (and not among "except"), or 0. */
static int
first_pid(VirtualTransactionId *vxids, VirtualTransactionId *except)
{
	for (int i = 0; VirtualTransactionIdIsValid(vxids[i]); i++)
	{
		bool		excepted = false;
		int			pid;

		for (int j = 0; except != NULL && VirtualTransactionIdIsValid(except[j]); j++)
		{
			if (VirtualTransactionIdEquals(vxids[i], except[j]))
				excepted = true;
		}
		if (!excepted && (pid = hl_vxid_pid(vxids[i])) != 0)
			return pid;
	}
	return 0;
}

/*
 * Other processes holding the term lock of "name": *change_pid one with a
 * term change in flight (ExclusiveLock), *fence_pid one with an open fence
 * (ShareLock only); 0 where there is none.
 */
void
hl_term_lock_holders(text *name, int *fence_pid, int *change_pid)
{
	LOCKTAG		tag;
	VirtualTransactionId *changers;
	VirtualTransactionId *holders;

	term_locktag(&tag, name);
	/* what conflicts with ShareLock is a term change */
	changers = GetLockConflicts(&tag, ShareLock, NULL);
	*change_pid = first_pid(changers, NULL);
	holders = GetLockConflicts(&tag, ExclusiveLock, NULL);
	*fence_pid = first_pid(holders, changers);
}
