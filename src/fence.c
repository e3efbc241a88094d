/*-------------------------------------------------------------------------
 *
 * fence.c
 *		hoplock_fence(name, generation): succeed only if term "generation"
 *		holds the lease now, and keep any term change out until the calling
 *		transaction ends, by holding the name's term lock in ShareLock (see
 *		lease.c for the protocol).  Renewals take no term lock, so they are
 *		not held up.
 *
 *		The checks -- the generation, the term still running, the caller's
 *		rights -- are made before the lock is taken, so that a call that
 *		fails takes no lock on anyone's behalf, and again once it is held,
 *		since the lease may have changed in between.
 *
 *		A fence protects the writes of its own transaction.  One taken
 *		outside a transaction block protects nothing unless its statement
 *		itself writes (a function that fences and then writes): if such a
 *		transaction reaches its commit without having written anything, it
 *		fails.  A fenced transaction cannot be prepared: it would keep the
 *		lease from changing hands for as long as it stays prepared.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "fence.h"
#include "history.h"
#include "hoplock.h"
#include "lease.h"
#include "refusals.h"
#include "settings.h"
#include "slotkey.h"
#include "storage.h"
#include "termlock.h"
#include "wakeup.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "tcop/utility.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* This transaction holds a fence */
static bool fenced = false;

/*
 * The fences this transaction holds, for hl_fence_once(): (name,
 * generation, the role that took it), in TopTransactionContext.  The role
 * is part of the key: a fence taken by a SECURITY DEFINER function of the
 * leader's vouches for that role's writes, not for its caller's.  Forgotten when a subtransaction
 * aborts (its fences with it, maybe) and when the transaction ends.
 */
typedef struct HeldFence
{
	struct HeldFence *next;
	int64		generation;
	Oid			roleid;
	text	   *name;
} HeldFence;

static HeldFence *held = NULL;

/* ... taken outside a transaction block */
static bool fenced_outside_block = false;

/*
 * A write by term "generation" of lease "name", which is not the running
 * term ("cur" is the lease's row, generation below its own or equal), is
 * refused: count it as a zombie write, by a role with the privileges of
 * that term's role (refusals.c) -- as the history has it; with no history
 * kept (hoplock.history_size = 0), the role of the lease's last term.  (A
 * generation the kept history does not have is not counted: one the lease
 * never had, or a term older than the history keeps.)
 */
static void
note_refusal(text *name, int64 generation, const Lease *cur,
			 HlRefusalKind kind)
{
	Oid			roleid = cur->owner_roleid;

	if (generation != cur->generation && hl_history_size > 0 &&
		!hl_history_term_role(name, generation, &roleid))
		return;
	hl_refusal_note(name, generation, roleid, cur->generation, kind);
}

/*
 * The same for lease "name" with "slots" slots, none of which is at
 * "generation" any more (its slot has a newer term since): the term is
 * found in the history, in whichever slot it ran, and counted there.  (Not
 * counted when the history does not have it: see note_refusal.)
 */
static void
note_slot_refusal(text *name, int slots, int64 generation, HlRefusalKind kind)
{
	Lease	   *rows;
	bool	   *found;

	if (hl_history_size <= 0)
		return;
	rows = palloc(slots * sizeof(Lease));
	found = palloc(slots * sizeof(bool));
	(void) hl_slot_rows(name, slots, rows, found, NULL, NULL, false);
	for (int k = 1; k <= slots; k++)
	{
		text	   *key = hl_slot_key(name, k);
		Oid			roleid;

		if (found[k - 1] && rows[k - 1].generation > generation &&
			hl_history_term_role(key, generation, &roleid))
		{
			hl_refusal_note(key, generation, roleid, rows[k - 1].generation,
							kind);
			return;
		}
	}
}

/*
 * Raise 55P03 unless term "generation" of lease "*namep" holds it now,
 * 42501 unless the caller may fence it.  Reads the newest committed
 * version.  Of a lease with slots, the term is its slot's of that
 * generation: *namep becomes that slot's key.  Returns the term's
 * expires_at.  A refusal because the term is not the
 * lease's running one is a zombie write, counted as "kind" (refusals.c).
 */
static TimestampTz
check_fence(text **namep, int64 generation, HlRefusalKind kind)
{
	text	   *name = *namep;
	HlRelation	rel;
	LeaseVersion cur;
	SnapshotData dirty;
	TimestampTz now;
	char	   *lease_name;
	bool		resolved = false;

again:
	if (!hl_open(HL_REL_LEASE, AccessShareLock, false, &rel))
		hl_table_busy_error(HL_REL_LEASE);

	/*
	 * The dirty snapshot may show a change still in flight, which may yet
	 * roll back; then read the newest committed version.  (With the term
	 * lock held, a change in flight can only be a renewal.)
	 */
	InitDirtySnapshot(dirty);
	hl_store_fetch(&rel, name, &dirty, &cur);
	if (TransactionIdIsValid(cur.inflight))
	{
		Snapshot	latest = RegisterSnapshot(GetLatestSnapshot());

		hl_version_release(&cur);
		hl_store_fetch(&rel, name, latest, &cur);
		UnregisterSnapshot(latest);
	}
	hl_version_release(&cur);
	hl_close(&rel, false);
	now = GetCurrentTimestamp();

	/*
	 * A lease with slots: the term is one of its slots', the one of that
	 * generation (slotkey.h); its row is read and locked instead.
	 */
	if (cur.found && hl_slot_marker(&cur.lease) > 1 && !resolved)
	{
		text	   *key = hl_slot_key_of_generation(name,
													hl_slot_marker(&cur.lease),
													generation);

		if (key == NULL)
		{
			/* a zombie write, if a slot's term had that generation */
			note_slot_refusal(name, hl_slot_marker(&cur.lease), generation,
							  kind);
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("lease \"%s\" is not held by generation " INT64_FORMAT,
							text_to_cstring(name), generation),
					 errdetail("None of the lease's slots is at that generation.")));
		}
		*namep = name = key;
		resolved = true;
		goto again;
	}

	lease_name = hl_lease_display_name(name);
	if (!cur.found)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease \"%s\" is not held by generation " INT64_FORMAT,
						lease_name, generation),
				 errdetail("The lease has never been acquired.")));
	/*
	 * A zombie write: by a term before the running one, or by the last
	 * term after it ended.  (A generation above the lease's was never one
	 * of its terms: refused, not counted.)
	 */
	if (generation < cur.lease.generation ||
		(generation == cur.lease.generation &&
		 !hl_lease_is_held(&cur.lease, now)))
		note_refusal(name, generation, &cur.lease, kind);
	if (cur.lease.generation != generation)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease \"%s\" is at generation " INT64_FORMAT ", not " INT64_FORMAT,
						lease_name, cur.lease.generation, generation)));
	if (!hl_lease_is_held(&cur.lease, now))
	{
		if (cur.lease.state == LEASE_STATE_RELEASED)
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("lease \"%s\" is no longer held by generation " INT64_FORMAT,
							lease_name, generation),
					 errdetail("The term was released.")));
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease \"%s\" is no longer held by generation " INT64_FORMAT,
						lease_name, generation),
				 errdetail("The term expired at %s.",
						   timestamptz_to_str(cur.lease.expires_at))));
	}
	hl_check_term_role(&cur.lease);
	return cur.lease.expires_at;
}

/*
 * hoplock_fence(name, generation): hold the term's lock until this
 * transaction ends; raises unless the term is current and the caller's.
 */
static void
fence(text *name, int64 generation, HlRefusalKind kind)
{
	TimestampTz expires_at;

	/* a fence on a standby could not keep the primary from changing terms */
	PreventCommandDuringRecovery("hoplock_fence()");
	/* nor one in a parallel worker: its lock would end with the worker */
	PreventCommandIfParallelMode("hoplock_fence()");

	expires_at = check_fence(&name, generation, kind);
	if (!hl_term_trylock(name, ShareLock))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not fence lease \"%s\"", hl_lease_display_name(name)),
				 errdetail("Another transaction is starting or ending a term of the lease.")));
	fenced = true;
	if (!IsTransactionBlock())
		fenced_outside_block = true;

	/*
	 * Whoever waits for the lease may try again when this transaction ends,
	 * if the term has lapsed by then: only then can the fence have kept a
	 * waiter out.
	 */
	hl_wake_waiters_if_lapsed_at_end(name, expires_at);

	/* the lease may have changed before the lock was had */
	(void) check_fence(&name, generation, kind);
}

void
hl_fence(text *name, int64 generation)
{
	fence(name, generation, HL_REFUSED_FENCE);
}

/*
 * hoplock_fence once per transaction, lease, generation and current role
 * (the trigger hoplock_fenced calls it for every row it checks).
 */
void
hl_fence_once(text *name, int64 generation)
{
	MemoryContext old;
	HeldFence  *item;
	Oid			roleid = GetUserId();

	for (item = held; item != NULL; item = item->next)
	{
		if (item->generation == generation && item->roleid == roleid &&
			hl_text_equal(item->name, name))
			return;
	}
	fence(name, generation, HL_REFUSED_WRITE);
	old = MemoryContextSwitchTo(TopTransactionContext);
	item = palloc(sizeof(HeldFence));
	item->generation = generation;
	item->roleid = roleid;
	item->name = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(name));
	item->next = held;
	held = item;
	MemoryContextSwitchTo(old);
}

static void
fence_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					   SubTransactionId parentSubid, void *arg)
{
	/* its fences may be gone with it: check again next time */
	if (event == SUBXACT_EVENT_ABORT_SUB)
		held = NULL;
}

static void
fence_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			if (fenced_outside_block &&
				!FullTransactionIdIsValid(GetTopFullTransactionIdIfAny()))
			{
				fenced = fenced_outside_block = false;
				ereport(ERROR,
						(errcode(ERRCODE_NO_ACTIVE_SQL_TRANSACTION),
						 errmsg("hoplock_fence() can only be used in transaction blocks"),
						 errdetail("The fence ended with its statement, which wrote nothing: it protected nothing."),
						 errhint("Call hoplock_fence() after BEGIN, in the transaction whose writes it protects.")));
			}
			break;
		case XACT_EVENT_PRE_PREPARE:
			if (fenced)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that has fenced a hoplock lease"),
						 errdetail("A prepared transaction would keep the lease from changing hands for as long as it lasts.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			fenced = fenced_outside_block = false;
			held = NULL;
			break;
		default:
			break;
	}
}

/* Register the callbacks of this file's end-of-transaction work. */
void
hl_fence_init(void)
{
	RegisterXactCallback(fence_xact_callback, NULL);
	RegisterSubXactCallback(fence_subxact_callback, NULL);
}
