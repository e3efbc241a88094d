/*-------------------------------------------------------------------------
 *
 * slots.c
 *		Leases with slots (slots => N on hoplock_acquire and hoplock_wait):
 *		up to N terms of a name run at once, each in a slot of its own,
 *		stored as a lease row of its own (slotkey.h).  This file decides
 *		which slot a call is for and hands that slot's row to the lease
 *		core; the core never calls back.
 *
 *		- An acquire first has the name record N (LEASE_OP_SLOTS), then
 *		  reads the slots (one index scan, slotkey.c):
 *		  the owner's own term, if it has one, is extended (an owner holds
 *		  at most one slot of a name); otherwise the free slots are tried,
 *		  from the one the owner's last term in this backend ran in, else
 *		  one the owner's hash picks (slothint.c) -- callers at once
 *		  spread, and each keeps to its slot -- and the first that can be
 *		  had is taken.  A new slot term's generation is above every other
 *		  slot's of the name.
 *		- An acquire holds the lock of (name, owner) (slotrows.c) from
 *		  before it reads the slots until its transaction ends if it wrote
 *		  (else it gives it back): two sessions of one owner never begin
 *		  two terms at once, not even when the owner's term ends between
 *		  the read and the write (the extension then begins a new term in
 *		  that slot).  If that lock is held by another transaction, the
 *		  call is contended.
 *		- A call about an owner's term of such a name (renew, release,
 *		  handoff, proclaim), which the core answers LEASE_SLOTTED, is made
 *		  again for the slot of that owner (and generation, if given);
 *		  force_release and request_step_down for every running slot.  A
 *		  renew, release or proclaim first tries the slot this backend
 *		  last found the owner's term in (slothint.c), acting there only
 *		  if the row is that term, running (the core's owners_term_only):
 *		  then neither the name's row nor the other slots' are read.
 *		- A name's N binds only while the name is in use (slotdeclare.c):
 *		  an acquire with another N, or a call without slots that would
 *		  begin or end a term of the name itself (acquire, write, delete),
 *		  gets 22023 then, or has the free name's rows forgotten and goes
 *		  on as for a name never used.  An acquire holds the name's term
 *		  lock in ShareLock from before it reads the slots until its
 *		  transaction ends, if it wrote: no forget, nor another N, comes
 *		  in between (slotforget.c).
 *		- A handoff of a slot's term goes to a candidate whose owner holds
 *		  no other slot of the name (slothandoff.c).
 *		- Candidates (hoplock_wait) are the name's: any slot that frees
 *		  goes to the first of them, in their fair order (candidates.c
 *		  keys a slot as its name).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "lease.h"
#include "slotdeclare.h"
#include "slothandoff.h"
#include "slothint.h"
#include "slotkey.h"
#include "slotrows.h"
#include "slots.h"
#include "termlock.h"
#include "undoable.h"

#include "common/hashfn.h"
#include "storage/lockdefs.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/*
 * For a waiter: the running slot term that lapses first, in *result (it
 * sleeps until then, unless woken before); *found false if none runs.
 */
static void
first_to_lapse(const SlotRows *s, TimestampTz now, text *name, Lease *result,
			   bool *found)
{
	*found = false;
	for (int k = 0; k < s->n; k++)
	{
		if (!s->found[k] ||
			!(hl_lease_is_held(&s->rows[k], now) ||
			  hl_lease_in_hold(&s->rows[k], now)))
			continue;
		if (!*found ||
			Max(s->rows[k].expires_at, s->rows[k].hold_until) <
			Max(result->expires_at, result->hold_until))
		{
			*result = s->rows[k];
			*found = true;
		}
	}
	if (*found)
		result->name = name;
}

/* Give back the locks of an acquire with slots that wrote nothing */
static void
give_back(text *name, text *lock_key, LOCKMODE mode, bool kept)
{
	if (!kept)
		hl_term_unlock(name, mode);
	hl_term_unlock(lock_key, ExclusiveLock);
}

static LeaseOutcome acquire_recording(LeaseRequest *req, Lease *result,
									  bool *found, void *arg);

/*
 * An acquire (or a wait's attempt) with slots => N, N > 1.  "recording":
 * made in a subtransaction of its own (undoable.c), it may write the
 * name's own row.
 */
static LeaseOutcome
slots_acquire(LeaseRequest *req, Lease *result, bool *found, bool recording)
{
	LeaseOutcome outcome;
	SlotRows	s;
	TimestampTz now;
	text	   *lock_key;
	LOCKMODE	mode = ShareLock;
	bool		kept = false;
	int			first;
	int			k;

	/*
	 * The owner's lock first, then the slots: whatever this call writes --
	 * the owner's term extended, or begun again in its slot if it ended
	 * meanwhile, or a term in a free slot -- no other session of the owner
	 * begins one at the same time.  And the name's lock, shared with the
	 * other acquires of its slots: the name is not forgotten, nor given
	 * another number of slots, while this call runs, nor before its term
	 * commits (slotforget.c).
	 */
	lock_key = hl_slots_owner_lock(req->name, req->owner);
	if (!hl_term_trylock(lock_key, ExclusiveLock))
	{
		if (hl_slots_read(req->name, req->slots, &s, req->busy_is_contention))
			first_to_lapse(&s, GetCurrentTimestamp(), req->name, result,
						   found);
		else
			*found = false;
		return LEASE_CONTENDED;
	}
	if (!hl_term_trylock(req->name, ShareLock))
	{
		hl_term_unlock(lock_key, ExclusiveLock);
		*found = false;
		return LEASE_CONTENDED;
	}
	if (!hl_slots_read(req->name, req->slots, &s, req->busy_is_contention))
	{
		give_back(req->name, lock_key, mode, false);
		*found = false;
		return LEASE_CONTENDED;
	}

	/*
	 * Unless the name's row records this N already, the name records it
	 * now -- or says it is in use with another N: an error.  That write,
	 * and a removal of another N's rows, is kept only if this call begins
	 * a term: made again in a subtransaction, rolled back otherwise.  (A
	 * wait that took no slot sleeps in this transaction: what it wrote
	 * would keep every other caller of the name out until its timeout.)
	 */
	if (!s.base_found || hl_slot_marker(&s.base) != req->slots)
	{
		if (!recording)
		{
			give_back(req->name, lock_key, mode, false);
			return hl_undoable(acquire_recording, req, result, found, NULL);
		}
		outcome = hl_slots_declare(req, &s, &mode, &kept);
		if (outcome != LEASE_DONE)
		{
			hl_term_unlock(lock_key, ExclusiveLock);
			*found = false;
			return outcome;
		}
	}
	now = GetCurrentTimestamp();

	/* the owner's term, running or in its hold, is extended or taken again */
	if ((k = hl_slots_owners_slot(&s, req->owner, now)) > 0)
	{
		outcome = hl_slot_cas(req, k, s.newest, result, found);
		if (outcome == LEASE_DONE)
			hl_slot_hint_set(req->name, req->owner, k);
		else
			give_back(req->name, lock_key, mode, kept);
		return outcome;
	}

	/*
	 * The free slots, from the one the owner's last term in this backend
	 * ran in (slothint.c), else from one the owner's hash chooses: callers
	 * at once spread over the slots, and a client that takes the name
	 * again and again keeps to its slot rather than racing the others
	 * for the same free one.
	 */
	first = hl_slot_hint(req->name, req->owner) - 1;
	if (first < 0 || first >= s.n)
		first = hash_bytes((const unsigned char *) VARDATA_ANY(req->owner),
						   VARSIZE_ANY_EXHDR(req->owner)) % s.n;
	for (int i = 0; i < s.n; i++)
	{
		Lease	   *row;
		Lease		seen;
		bool		seen_found;

		k = (first + i) % s.n + 1;
		row = &s.rows[k - 1];

		if (s.found[k - 1] &&
			(hl_lease_is_held(row, now) || hl_lease_in_hold(row, now)))
			continue;
		outcome = hl_slot_cas(req, k, s.newest, &seen, &seen_found);
		if (outcome == LEASE_DONE)
		{
			hl_slot_hint_set(req->name, req->owner, k);
			*result = seen;
			*found = true;
			return outcome;		/* the locks are kept */
		}
	}
	give_back(req->name, lock_key, mode, kept);
	first_to_lapse(&s, now, req->name, result, found);
	if (!*found)
	{
		/* all free, none to be had now (changes in flight, candidates) */
		if (s.base_found)
			*result = s.base;
		else
			memset(result, 0, sizeof(Lease));
		result->name = req->name;
		result->state = LEASE_STATE_RELEASED;
		*found = true;
	}
	return LEASE_CONTENDED;
}

/* slots_acquire in a subtransaction of its own (hl_undoable) */
static LeaseOutcome
acquire_recording(LeaseRequest *req, Lease *result, bool *found, void *arg)
{
	return slots_acquire(req, result, found, true);
}

/* hl_slots_undeclare in a subtransaction of its own (hl_undoable) */
static LeaseOutcome
undeclare(LeaseRequest *req, Lease *result, bool *found, void *arg)
{
	return hl_slots_undeclare(req, *(int *) arg, result, found);
}

/*
 * A renew, release or proclaim, made for the slot this backend last found
 * the owner's term of the name in (slothint.c) only if that slot's row is
 * the term the call is about -- the owner's, running, of req->generation
 * if given, committed and not being changed.  That is the owner's only
 * running term, the one slots_redo's passes would find and act on; and a
 * running slot term binds the name to its slots, so the core would have
 * answered LEASE_SLOTTED for the name's own row: neither that row nor the
 * other slots' need be read.  False if it is not (nothing done): the call
 * goes the long way.
 */
static bool
at_hinted_slot(const LeaseRequest *req, Lease *result, bool *found,
			   LeaseOutcome *outcome)
{
	int			k = hl_slot_hint(req->name, req->owner);
	LeaseRequest probe = *req;

	if (k < 1 || k > HL_SLOTS_MAX)
		return false;
	probe.owners_term_only = true;
	/* (these begin no term: no generation to mint above the others') */
	*outcome = hl_slot_cas(&probe, k, 0, result, found);
	return *outcome != LEASE_REFUSED;
}

/*
 * A call the core answered LEASE_SLOTTED ("marker" is the name's row):
 * made again for the slot of the owner's term, or for every running slot.
 */
static LeaseOutcome
slots_redo(const LeaseRequest *req, const Lease *marker, Lease *result,
		   bool *found)
{
	SlotRows	s;
	TimestampTz now;
	LeaseOutcome best = LEASE_REFUSED;

	if (req->op == LEASE_OP_ACQUIRE || req->op == LEASE_OP_WRITE ||
		req->op == LEASE_OP_DELETE)
	{
		/* what it removes is kept only if it wrote (as slots_acquire) */
		int			have = hl_slot_marker(marker);

		return hl_undoable(undeclare, (LeaseRequest *) req, result, found,
						   &have);
	}
	(void) hl_slots_read(req->name, hl_slot_marker(marker), &s, false);
	now = GetCurrentTimestamp();
	*found = false;

	if (req->op == LEASE_OP_FORCE_RELEASE || req->op == LEASE_OP_STEP_DOWN)
	{
		/* a step-down the worker asks for a preempting candidate: none */
		if (req->preempt)
			return LEASE_REFUSED;
		for (int k = 1; k <= s.n; k++)
		{
			Lease		one;
			bool		one_found;

			if (!s.found[k - 1] ||
				!(hl_lease_is_held(&s.rows[k - 1], now) ||
				  hl_lease_in_hold(&s.rows[k - 1], now)))
				continue;
			if (hl_slot_cas(req, k, s.newest, &one, &one_found) == LEASE_DONE)
			{
				best = LEASE_DONE;
				*result = one;
				*found = true;
			}
		}
		return best;
	}

	/* the owner's term: of that generation, if given; a running one first */
	for (int pass = 0; pass < 2; pass++)
	{
		for (int k = 1; k <= s.n; k++)
		{
			Lease	   *row = &s.rows[k - 1];

			if (!s.found[k - 1] || !hl_text_equal(row->owner, req->owner) ||
				(req->generation != 0 && row->generation != req->generation) ||
				(pass == 0 && !hl_lease_is_held(row, now)))
				continue;
			if (req->op == LEASE_OP_HANDOFF)
				return hl_slot_handoff(req, &s, k, result, found);
			hl_slot_hint_set(req->name, req->owner, k);
			return hl_slot_cas(req, k, s.newest, result, found);
		}
	}
	return LEASE_REFUSED;
}

/*
 * hl_lease_cas for the SQL functions: with req->slots > 1, an acquire of
 * one of the name's slots; a call about a name that has slots, made for
 * its slot.  Otherwise the core's call, unchanged.
 */
LeaseOutcome
hl_slots_cas(LeaseRequest *req, Lease *result, bool *found)
{
	LeaseOutcome outcome;

	if (req->slots > 1 && req->op == LEASE_OP_ACQUIRE)
		return slots_acquire(req, result, found, false);
	if ((req->op == LEASE_OP_RENEW || req->op == LEASE_OP_RELEASE ||
		 req->op == LEASE_OP_PROCLAIM) &&
		at_hinted_slot(req, result, found, &outcome))
		return outcome;
	outcome = hl_lease_cas(req, result, found);
	if (outcome == LEASE_SLOTTED)
	{
		Lease		marker = *result;

		outcome = slots_redo(req, &marker, result, found);
	}
	return outcome;
}

/*
 * hoplock_holder of a name with slots ("row" is the name's row, as read):
 * its running term in the lowest slot, into *lease.  False if the row
 * records no slots (*lease untouched) or no slot's term runs.
 */
bool
hl_slots_holder(text *name, const Lease *row, Lease *lease)
{
	SlotRows	s;
	int			n = hl_slot_marker(row);
	TimestampTz now;

	if (n <= 1)
		return false;
	(void) hl_slots_read(name, n, &s, false);
	now = GetCurrentTimestamp();
	for (int k = 0; k < n; k++)
	{
		if (s.found[k] && hl_lease_is_held(&s.rows[k], now))
		{
			*lease = s.rows[k];
			lease->name = name;
			return true;
		}
	}
	return false;
}
