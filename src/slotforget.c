/*-------------------------------------------------------------------------
 *
 * slotforget.c
 *		Forgetting a lease with slots: the row that records its number of
 *		slots (the marker, slotkey.h) and every slot's row, removed
 *		together once no slot is in use -- by hoplock_forget and the
 *		worker's hoplock.released_retention (hl_forget, lease.c), and by
 *		an acquire that gives the free name another number of slots, or
 *		none (slots.c).  A name's slots bind only while it is in use.
 *
 *		In use: a slot's term runs, or the hold of one released early
 *		(min_hold) keeps the name.  Not free yet, but soon (contention, not
 *		use): a slot's row being changed by a transaction in flight, a
 *		lapsed term or a hold's end the worker has still to announce.
 *
 *		Locking: the caller holds the name's term lock in ExclusiveLock.
 *		An acquire with slots holds it in ShareLock from before it reads
 *		the slots until its transaction ends, if it wrote (slots.c), so no
 *		slot term begins while the rows are judged and removed, nor over a
 *		removal not yet committed.  Every other change of a slot's row (a
 *		renewal, a release, an expiry, a hold's end, a handoff, a session's
 *		end) needs a term that runs or an end still to announce: a free
 *		slot has neither.  The generation floor is raised to the greatest
 *		generation removed first (floor.c), so that the name, when it comes
 *		back, starts above every term it had; the rows are removed in a
 *		subtransaction: all of them, or none.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "floor.h"
#include "slotforget.h"
#include "slotkey.h"
#include "storage.h"
#include "subxact.h"

#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* What slot row "row" says of its name's use, at "now" */
static HlSlotsState
slot_state(const LeaseVersion *row, TimestampTz now, TimestampTz ended_before)
{
	const Lease *l = &row->lease;

	if (!row->found)
		return SLOTS_FREE;
	if (TransactionIdIsValid(row->inflight))
		return SLOTS_BUSY;
	if (hl_lease_is_held(l, now) || hl_lease_in_hold(l, now))
		return SLOTS_IN_USE;
	/* lapsed, or a hold over, and not announced yet; or too recent */
	if (l->state == LEASE_STATE_HELD || hl_hold_pending(l) ||
		(ended_before != 0 && l->expires_at >= ended_before))
		return SLOTS_BUSY;
	return SLOTS_FREE;
}

/* Remove the rows at tids[0..n-1], all or none; false if none */
static bool
delete_all(HlRelation *rel, ItemPointerData *tids, int n)
{
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool done = true;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(context);
	PG_TRY();
	{
		for (int i = 0; i < n && done; i++)
			done = (hl_row_delete(rel, &tids[i]) == TM_Ok);
		if (done)
			ReleaseCurrentSubTransaction();
		else
			RollbackAndReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(context);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		/* (a user's foreign key that references a row, say) */
		edata = hl_subxact_caught(context, owner);
		ReThrowError(edata);
	}
	PG_END_TRY();
	if (done)
		CommandCounterIncrement();
	return done;
}

/*
 * Judge the rows of the "n" slots of lease "name": the state of the name
 * (SLOTS_FREE if every slot is, and, with "ended_before" -- 0: any time --
 * every slot's term ended before then); the rows found in tids[*ntids],
 * the greatest generation among them in *greatest.
 */
static HlSlotsState
judge(HlRelation *rel, text *name, int n, TimestampTz ended_before,
	  ItemPointerData *tids, int *ntids, int64 *greatest)
{
	TimestampTz now = GetCurrentTimestamp();
	HlSlotsState state = SLOTS_FREE;

	for (int k = 1; k <= n && state == SLOTS_FREE; k++)
	{
		LeaseVersion row;
		SnapshotData dirty;

		InitDirtySnapshot(dirty);
		hl_store_fetch(rel, hl_slot_key(name, k), &dirty, &row);
		hl_version_release(&row);
		state = slot_state(&row, now, ended_before);
		if (row.found)
		{
			tids[(*ntids)++] = row.tid;
			*greatest = Max(*greatest, row.lease.generation);
		}
	}
	return state;
}

/*
 * Forget lease "name" whose marker, as the caller fetched it for a write
 * in "rel", is "marker": remove it and its slots' rows if no slot is in
 * use, and, with "ended_before" (0: any time), every slot's term ended
 * before then.  A caller that raised the floor for a batch passes the
 * generation it raised it to in "floor_raised" (0: none); it is raised
 * here when a slot's generation is above.  Returns SLOTS_FREE when it
 * removed them; otherwise, changing nothing, SLOTS_IN_USE or SLOTS_BUSY
 * (also when the floor cannot be written now, or a row removed).  The
 * caller holds the name's term lock in ExclusiveLock.
 */
HlSlotsState
hl_slots_forget_rows(HlRelation *rel, text *name, const LeaseVersion *marker,
					 TimestampTz ended_before, int64 floor_raised)
{
	int			n = hl_slot_marker(&marker->lease);
	ItemPointerData *tids = palloc((n + 1) * sizeof(ItemPointerData));
	int			ntids = 0;
	int64		greatest = marker->lease.generation;
	HlSlotsState state;

	state = judge(rel, name, n, ended_before, tids, &ntids, &greatest);
	if (state != SLOTS_FREE)
		return state;

	/* the name's generations stay monotone: the floor first */
	if ((floor_raised == 0 || greatest > floor_raised) &&
		!hl_floor_raise_forgotten(greatest))
		return SLOTS_BUSY;
	tids[ntids++] = marker->tid;
	return delete_all(rel, tids, ntids) ? SLOTS_FREE : SLOTS_BUSY;
}

/*
 * The same, the name's newest row read here: for a call that gives name
 * "name" another number of slots (slotdeclare.c), and for hl_forget before
 * it takes the name's lock.  The rows are removed only if "remove" (the
 * caller holds the name's term lock in ExclusiveLock); else only judged,
 * with "ended_before" as above.  *have is the number of slots the name
 * records (0: none, or no row); *removed whether rows were removed.
 * SLOTS_FREE also when the name records no slots (any more).
 */
HlSlotsState
hl_slots_forget(text *name, bool remove, TimestampTz ended_before, int *have,
				bool *removed)
{
	HlRelation	rel;
	LeaseVersion marker;
	SnapshotData dirty;
	HlSlotsState state;

	*have = 0;
	*removed = false;
	if (!hl_open(HL_REL_LEASE, RowExclusiveLock, false, &rel))
		return SLOTS_BUSY;
	InitDirtySnapshot(dirty);
	hl_store_fetch(&rel, name, &dirty, &marker);
	hl_version_release(&marker);
	if (marker.found)
		*have = hl_slot_marker(&marker.lease);
	if (marker.found && TransactionIdIsValid(marker.inflight))
		state = SLOTS_BUSY;
	else if (*have <= 1)
		state = SLOTS_FREE;
	else if (!remove)
	{
		ItemPointerData *tids = palloc(*have * sizeof(ItemPointerData));
		int			ntids = 0;
		int64		greatest = 0;

		state = judge(&rel, name, *have, ended_before, tids, &ntids,
					  &greatest);
	}
	else
	{
		state = hl_slots_forget_rows(&rel, name, &marker, 0, 0);
		*removed = (state == SLOTS_FREE);
	}
	hl_close(&rel, *removed);
	return state;
}
