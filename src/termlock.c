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
#include "storage/proc.h"
#include "storage/procarray.h"

/* locktag_field4 of term locks; SQL's advisory locks use 1 and 2 */
#define HL_LOCKTAG_CLASS	0x686c

/*
 * The digests of the last names asked about: a call looks a name up several
 * times (lock, unlock, wake-up), and hashing is the costly part.  An
 * acquire with slots goes between three keys -- the (name, owner) lock,
 * the name, the slot's row -- so a few are kept, the oldest replaced.
 */
#define DIGEST_CACHE_SIZE	4
/* the longest key: the lock of (name, owner) (slotrows.c) */
#define DIGEST_KEY_MAX		(2 * HL_MAX_NAME_BYTES + 2)

typedef struct DigestEntry
{
	int			len;			/* -1: empty */
	char		key[DIGEST_KEY_MAX];
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
} DigestEntry;

static DigestEntry digest_cache[DIGEST_CACHE_SIZE] = {
	{.len = -1}, {.len = -1}, {.len = -1}, {.len = -1}
};
static int	digest_next = 0;
static uint8 uncached_digest[PG_SHA256_DIGEST_LENGTH];

static const uint8 *
name_digest(text *name)
{
	const char *key = VARDATA_ANY(name);
	int			len = VARSIZE_ANY_EXHDR(name);
	DigestEntry *e;

	for (int i = 0; i < DIGEST_CACHE_SIZE; i++)
	{
		e = &digest_cache[i];
		if (e->len == len && memcmp(e->key, key, len) == 0)
			return e->digest;
	}
	if (len > DIGEST_KEY_MAX)
	{
		hl_sha256((const uint8 *) key, len, uncached_digest);
		return uncached_digest;
	}
	e = &digest_cache[digest_next];
	digest_next = (digest_next + 1) % DIGEST_CACHE_SIZE;
	/* (empty while it is computed: hl_sha256 may raise) */
	e->len = -1;
	hl_sha256((const uint8 *) key, len, e->digest);
	memcpy(e->key, key, len);
	e->len = len;
	return e->digest;
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

/*
 * The top-level transaction ids of the transactions that hold a term lock
 * of this database in ExclusiveLock -- those that may be beginning a term
 * right now -- and have an id: an array of *n in the current memory
 * context.  Returns false if one of them is a prepared transaction, whose
 * id this cannot tell.
 */
bool
hl_term_lock_xids(TransactionId **xids, int *n)
{
	LockData   *data = GetLockStatusData();
	bool		known = true;

	*xids = palloc(sizeof(TransactionId) * Max(data->nelements, 1));
	*n = 0;
	for (int i = 0; i < data->nelements; i++)
	{
		LockInstanceData *inst = &data->locks[i];
		PGPROC	   *proc;
		TransactionId xid;

		if (inst->locktag.locktag_type != LOCKTAG_ADVISORY ||
			inst->locktag.locktag_field4 != HL_LOCKTAG_CLASS ||
			inst->locktag.locktag_field1 != MyDatabaseId ||
			(inst->holdMask & LOCKBIT_ON(ExclusiveLock)) == 0)
			continue;
		if (inst->pid == 0)
		{
			known = false;		/* (a prepared transaction) */
			continue;
		}
		proc = BackendPidGetProc(inst->pid);
		if (proc == NULL)
			continue;			/* (ended since) */
#if PG_VERSION_NUM >= 140000
		xid = *((volatile TransactionId *) &proc->xid);
#else
		xid = *((volatile TransactionId *) &ProcGlobal->allPgXact[proc->pgprocno].xid);
#endif
		if (TransactionIdIsValid(xid))
			(*xids)[(*n)++] = xid;
	}
	return known;
}
