/*-------------------------------------------------------------------------
 *
 * slothandoff.c
 *		hoplock_handoff of a slot's term.  One owner holds at most one slot
 *		of a name, so the term goes to a candidate whose owner holds no
 *		other slot: a candidate that could not take the term is passed
 *		over, as hoplock_handoff passes over every candidate it cannot
 *		hand to (another role's, one under REPEATABLE READ), and with
 *		to_owner naming one, or none left, the handoff returns NULL and
 *		the term goes on.
 *
 *		Locking: the handoff takes the lock of (name, candidate's owner)
 *		as an acquire of that owner would (slotrows.c), and reads the slots
 *		again with it held; an owner whose lock another transaction holds
 *		-- an acquire of it in flight -- is passed over.  The lock stays
 *		until the handoff's transaction ends, if it handed the term: no
 *		session of that owner takes another slot meanwhile (and after the
 *		commit, they find the owner's term in its slot).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "candidates.h"
#include "hoplock.h"
#include "slothandoff.h"
#include "termlock.h"

#include "miscadmin.h"
#include "utils/timestamp.h"

/*
 * Hand the term in slot "slot" of req's name (read as *s) to a waiting
 * candidate: req->to_owner's, or the first whose owner holds no other
 * slot of the name.
 */
LeaseOutcome
hl_slot_handoff(const LeaseRequest *req, const SlotRows *s, int slot,
				Lease *result, bool *found)
{
	List	   *passed = NIL;
	Oid			roleid = s->rows[slot - 1].owner_roleid;

	*found = false;
	for (;;)
	{
		HlCandidatePick pick;
		text	   *lock_key;

		CHECK_FOR_INTERRUPTS();
		if (!hl_candidate_pick_except(req->name, req->to_owner, passed,
									  roleid, &pick))
			return LEASE_REFUSED;
		lock_key = hl_slots_owner_lock(req->name, pick.owner);
		if (hl_term_trylock(lock_key, ExclusiveLock))
		{
			SlotRows	again;
			int			k;

			/* the owner's slots as they are now that none can begin */
			(void) hl_slots_read(req->name, s->n, &again, false);
			k = hl_slots_owners_slot(&again, pick.owner, GetCurrentTimestamp());
			if (k == 0 || k == slot)
			{
				LeaseRequest hreq = *req;
				LeaseOutcome outcome;

				hreq.to_owner = pick.owner;
				outcome = hl_slot_cas(&hreq, slot, again.newest, result,
									  found);
				if (outcome != LEASE_DONE)
					hl_term_unlock(lock_key, ExclusiveLock);
				return outcome;
			}
			hl_term_unlock(lock_key, ExclusiveLock);
		}
		/* its owner holds another slot, or is taking one: passed over */
		passed = lappend(passed, pick.owner);
	}
}
