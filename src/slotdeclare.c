/*-------------------------------------------------------------------------
 *
 * slotdeclare.c
 *		The number of slots a name records (its marker, slotkey.h).  The
 *		first acquire with slots => N records N.  N binds while the name is
 *		in use -- a slot's term runs, or the hold of one released early
 *		(min_hold) keeps the name, or a candidate waits for it with N (not
 *		one that waits with the caller's own number: two waits that give
 *		a free name the same new number agree): a call that gives
 *		another number (an acquire or wait with other slots, or
 *		without: acquire, wait, write, delete) gets 22023.  Once every slot
 *		is free, the name is a released name like any other: such a call
 *		has its rows forgotten (slotforget.c) and is made as for a name
 *		never used, recording its own number, or none.
 *
 *		Locking: the name's term lock.  Writers of the name's own row (the
 *		marker, a term without slots, a forget) take it in ExclusiveLock;
 *		every acquire with slots holds it in ShareLock from before it reads
 *		the slots until its transaction ends if it wrote (slots.c), so the
 *		rows are judged and removed with no slot term beginning meanwhile,
 *		and none begins over a removal until it commits.  A call that finds
 *		the lock taken is contended: it never waits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "candidates.h"
#include "hoplock.h"
#include "slotdeclare.h"
#include "slotforget.h"
#include "slotkey.h"
#include "termlock.h"

#include "utils/timestamp.h"

/*
 * For an acquire with slots => req->slots (> 1), whose read of the slots
 * is *s: the name records that number, or is made to, by the marker's
 * write (LEASE_OP_SLOTS) -- after the rows of another number of slots are
 * forgotten, none of them in use.  Called holding the name's lock in
 * ShareLock, once; returns LEASE_DONE holding it in *mode (ExclusiveLock
 * if this call wrote the marker, ShareLock if another did meanwhile), the
 * slots read again into *s; otherwise the outcome, having given the lock
 * back unless *kept (rows were removed: it stays until the transaction
 * ends).  Raises 22023 if the name is in use with another number.
 */
LeaseOutcome
hl_slots_declare(LeaseRequest *req, SlotRows *s, LOCKMODE *mode, bool *kept)
{
	LeaseRequest mark = *req;
	Lease		marker;
	bool		marked;
	LeaseOutcome outcome;
	HlSlotsState state;
	int			have = s->base_found ? hl_slot_marker(&s->base) : 0;

	*kept = false;
	/* in use, as committed: said at once */
	if (have > 1 && (hl_slots_in_use(s, GetCurrentTimestamp()) ||
					 hl_candidate_others(req->name, req->slots)))
		hl_slots_mismatch(req->name, have, req->slots);

	/* the writers of the name's own row take its lock in ExclusiveLock */
	hl_term_unlock(req->name, ShareLock);
	if (!hl_term_trylock(req->name, ExclusiveLock))
		return LEASE_CONTENDED;
	*mode = ExclusiveLock;
	if (!hl_slots_read(req->name, req->slots, s, req->busy_is_contention))
	{
		hl_term_unlock(req->name, ExclusiveLock);
		return LEASE_CONTENDED;
	}
	have = s->base_found ? hl_slot_marker(&s->base) : 0;
	if (have == req->slots)
	{
		/* another recorded it meanwhile: share the name with the others */
		(void) hl_term_trylock(req->name, ShareLock);
		hl_term_unlock(req->name, ExclusiveLock);
		*mode = ShareLock;
		return LEASE_DONE;
	}
	if (have > 1)
	{
		state = hl_candidate_others(req->name, req->slots) ? SLOTS_IN_USE :
			hl_slots_forget(req->name, true, 0, &have, kept);
		if (state == SLOTS_IN_USE)
			hl_slots_mismatch(req->name, have, req->slots);
		if (state == SLOTS_BUSY)
		{
			hl_term_unlock(req->name, ExclusiveLock);
			return LEASE_CONTENDED;
		}
	}
	mark.op = LEASE_OP_SLOTS;
	outcome = hl_lease_cas(&mark, &marker, &marked);
	if (outcome == LEASE_CONTENDED)
	{
		if (!*kept)
			hl_term_unlock(req->name, ExclusiveLock);
		return outcome;
	}
	s->newest = Max(s->newest, marker.generation);
	return LEASE_DONE;
}

/*
 * An acquire, write or delete without slots of a name that records "have"
 * slots (the core answered LEASE_SLOTTED).  If none of its slots is in
 * use and no other candidate waits, its rows are forgotten and the call
 * made again, as for a name never used (a delete, or a write of a handle,
 * finds no state: false, and nothing is forgotten); otherwise 22023, or
 * contention while a slot's row is being changed or its end announced.
 */
LeaseOutcome
hl_slots_undeclare(const LeaseRequest *req, int have, Lease *result,
				   bool *found)
{
	bool		remove = (req->op == LEASE_OP_ACQUIRE ||
						  (req->op == LEASE_OP_WRITE && req->handle == NULL));
	bool		removed = false;
	HlSlotsState state = SLOTS_IN_USE;
	LeaseOutcome outcome;

	*found = false;
	/* in use, as committed: said at once, with no lock taken */
	if (hl_candidate_others(req->name, 1) ||
		hl_slots_forget(req->name, false, 0, &have, &removed) == SLOTS_IN_USE)
		hl_slots_mismatch(req->name, have, 1);

	/* the writers of the name's own row take its lock in ExclusiveLock */
	if (!hl_term_trylock(req->name, ExclusiveLock))
		return LEASE_CONTENDED;
	if (!hl_candidate_others(req->name, 1))
		state = hl_slots_forget(req->name, remove, 0, &have, &removed);
	if (state == SLOTS_IN_USE)
		hl_slots_mismatch(req->name, have, 1);
	if (state == SLOTS_BUSY || !remove)
	{
		hl_term_unlock(req->name, ExclusiveLock);
		return state == SLOTS_BUSY ? LEASE_CONTENDED : LEASE_REFUSED;
	}
	outcome = hl_lease_cas(req, result, found);
	/* (what was removed stays locked until the transaction ends) */
	if (!removed && outcome != LEASE_DONE)
		hl_term_unlock(req->name, ExclusiveLock);
	return outcome == LEASE_SLOTTED ? LEASE_CONTENDED : outcome;
}
