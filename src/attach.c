/*-------------------------------------------------------------------------
 *
 * attach.c
 *		Which terms attach to an owner keepalive, and when (keepalive.c has
 *		the table).  A term attaches when it begins while its (role, owner)
 *		has a running keepalive, and hoplock_renew_all attaches the owner's
 *		running terms when it begins a keepalive: the lease table has no
 *		index that finds an owner's terms (its key would change with every
 *		takeover and cost each one its HOT update), so that call scans the
 *		table, once.
 *
 *		A database that has no keepalive row pays nothing at term changes:
 *		a flag in its shared-memory slot ("keepalives") says whether it may
 *		have one, and only then does a new term look its owner's keepalive
 *		up.  The flag is set, under the slot's lock, by every transaction
 *		that inserts a keepalive (after the insert), by every SQL statement
 *		that writes hoplock's tables (a restore's COPY: dbhooks.c), and on
 *		every start of the slot; the worker clears it, under the same lock, when a dirty
 *		scan finds the table empty and no keepalive was begun since it read
 *		the count of those begun ("keepalives_begun").
 *
 *		A term change reads the flag after its transaction has its id; the
 *		beginning renew_all reads the next transaction id after setting it.
 *		So a term that missed a keepalive being begun belongs to a
 *		transaction whose id is below that horizon: renew_all keeps looking
 *		for unattached terms (keepalive.attach_horizon) until a snapshot
 *		sees no transaction below it running.  A term change holds its
 *		name's term lock from before it reads the flag to its end, so only
 *		the transactions holding a term lock just before that snapshot
 *		count (renewall.c): another role's idle transaction does not keep
 *		the owner's calls scanning.
 *
 *		A term that leaves a running keepalive (renewed by itself, or begun
 *		with a hold past the keepalive's expiry) keeps minus the
 *		keepalive's id in its keepalive column: renew_all reads those
 *		through the same partial index and attaches them again.
 *
 *		While hoplock.max_names_per_role is set, a role may have as many
 *		keepalives as names (hl_keepalives_check_role).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "keepalive.h"
#include "settings.h"
#include "shmem.h"
#include "storage.h"
#include "termlock.h"

#include "access/tableam.h"
#include "access/xact.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/lwlock.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* Single-user mode: no other process, so this backend's own flag */
static int	single_user_keepalives = -1;	/* -1: not looked yet */

static bool table_empty(void);

/* This database's slot, NULL if it has none (no worker, no shared memory) */
static HlDbSlot *
my_slot(void)
{
	static HlDbSlot *cached = NULL;

	if (hl_shared == NULL)
		return NULL;
	if (cached == NULL || cached->dboid != MyDatabaseId)
		cached = hl_slot_for(MyDatabaseId);
	return cached;
}

/*
 * May this database have a keepalive?  Call it only once the transaction
 * has its id (the horizon argument above rests on that order).
 */
bool
hl_keepalives_maybe(void)
{
	HlDbSlot   *slot = my_slot();

	if (slot == NULL)
	{
		if (IsUnderPostmaster)
			return true;		/* no worker yet: cannot tell */
		if (single_user_keepalives < 0)
			single_user_keepalives = table_empty() ? 0 : 1;
		return single_user_keepalives != 0;
	}
	pg_memory_barrier();
	return pg_atomic_read_u32(&slot->keepalives) != 0;
}

/* A keepalive was just inserted (not committed yet): set the flag. */
void
hl_keepalives_begun(void)
{
	HlDbSlot   *slot = my_slot();

	if (slot == NULL)
	{
		single_user_keepalives = 1;
		return;
	}
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	slot->keepalives_begun++;
	pg_atomic_write_u32(&slot->keepalives, 1);
	LWLockRelease(slot->lock);
}

/*
 * An SQL statement wrote rows of hoplock's tables (a restore's COPY, an
 * INSERT by a superuser), after the rows are in place: keepalive rows may
 * have come in that no hoplock_renew_all began, into a database whose
 * worker had found none.  Set the flag as a begin does, or the owner's new
 * terms would not attach to them and hoplock_renew_all would leave those
 * terms out for good.  (The worker clears it again if the table is empty.)
 */
void
hl_keepalives_written(void)
{
	if (!IsTransactionState())
		return;
	hl_keepalives_begun();
}

/*
 * Is the keepalive table empty, as a dirty snapshot sees it (an insert in
 * flight counts)?  False if it is locked.
 */
static bool
table_empty(void)
{
	HlRelation	rel;
	SnapshotData dirty;
	TableScanDesc scan;
	TupleTableSlot *tslot;
	bool		empty;

	if (!hl_open(HL_REL_KEEPALIVE, AccessShareLock, false, &rel))
		return false;
	InitDirtySnapshot(dirty);
	tslot = table_slot_create(rel.heap, NULL);
	scan = table_beginscan(rel.heap, &dirty, 0, NULL);
	empty = !table_scan_getnextslot(scan, ForwardScanDirection, tslot);
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(tslot);
	hl_close(&rel, false);
	return empty;
}

/*
 * The worker: clear the flag if the keepalive table is empty and no
 * keepalive was begun since the count read before looking.
 */
void
hl_keepalives_try_clear(void)
{
	HlDbSlot   *slot = my_slot();
	uint64		begun;

	if (slot == NULL || pg_atomic_read_u32(&slot->keepalives) == 0)
		return;
	LWLockAcquire(slot->lock, LW_SHARED);
	begun = slot->keepalives_begun;
	LWLockRelease(slot->lock);

	if (!table_empty())
		return;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (slot->keepalives_begun == begun)
		pg_atomic_write_u32(&slot->keepalives, 0);
	LWLockRelease(slot->lock);
}

/* What live_cb collects */
typedef struct LiveSearch
{
	TimestampTz now;
	Keepalive  *best;
	int			result;
} LiveSearch;

static void
live_cb(const Keepalive *k, void *arg)
{
	LiveSearch *s = (LiveSearch *) arg;

	if (s->result == -1 || s->now >= k->expires_at)
		return;

	/*
	 * Being begun by another transaction, which may roll back; or being
	 * renewed by one, which may shorten it (a ttl below what is left) or
	 * roll back: the term could not tell the expiry it would run until.
	 */
	if (TransactionIdIsValid(k->inflight) &&
		!TransactionIdIsCurrentTransactionId(k->inflight))
	{
		s->result = -1;
		return;
	}
	if (s->result == 0 || k->id > s->best->id)
	{
		*s->best = *k;
		s->best->owner = NULL;
		s->result = 1;
	}
}

/*
 * The running keepalive a new term of "owner" of role "roleid" attaches to,
 * read through a dirty snapshot: 1 (in *k, its owner not set), 0 none, -1
 * a running one is being begun or renewed by another transaction in
 * flight (contention: the term could not tell whether it would run on it,
 * nor until when).
 */
int
hl_keepalive_live(Oid roleid, text *owner, Keepalive *k)
{
	HlRelation	rel;
	SnapshotData dirty;
	LiveSearch	s;

	if (!hl_open(HL_REL_KEEPALIVE, AccessShareLock, false, &rel))
		return -1;
	InitDirtySnapshot(dirty);
	s.now = GetCurrentTimestamp();
	s.best = k;
	s.result = 0;
	memset(k, 0, sizeof(Keepalive));
	if (!hl_keepalive_scan_owner(&rel, roleid, owner, &dirty, live_cb, &s))
		s.result = -1;			/* (its index is locked: contention) */
	hl_close(&rel, false);
	return s.result;
}

/*
 * Role "roleid" is about to begin a keepalive: it may not have more than
 * hoplock.max_names_per_role of them, as it may not have more names (each
 * is a row, and an entry in the worker's schedule, until it lapses).  As
 * for names, one transaction of a role begins keepalives at a time,
 * holding a lock of the role (keyed like a term lock, by a name no lease
 * can have) until it ends; otherwise sessions counting at once would each
 * find room.
 */
void
hl_keepalives_check_role(HlRelation *rel, Oid roleid)
{
	char		key[32];
	char	   *rolename;

	if (hl_max_names_per_role <= 0 || superuser_arg(roleid))
		return;
	rolename = GetUserNameFromId(roleid, false);
	snprintf(key, sizeof(key), "\x01keepalives %u", roleid);
	if (!hl_term_trylock(cstring_to_text(key), ExclusiveLock))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("another transaction of role \"%s\" is beginning keepalives",
						rolename),
				 errdetail("\"hoplock.max_names_per_role\" is set: a role begins keepalives one transaction at a time."),
				 errhint("The call changed nothing; try it again.")));
	if (hl_keepalive_count_role(rel, roleid, hl_max_names_per_role) >=
		hl_max_names_per_role)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("role \"%s\" already has %d keepalives, the most \"hoplock.max_names_per_role\" allows",
						rolename, hl_max_names_per_role),
				 errdetail("hoplock_renew_all begins a keepalive for each owner it is called with; one lives until it lapses."),
				 errhint("Renew the terms of fewer owners, or ask a superuser to raise \"hoplock.max_names_per_role\".")));
}
