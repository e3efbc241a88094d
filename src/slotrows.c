/*-------------------------------------------------------------------------
 *
 * slotrows.c
 *		A name's slots as one call reads them (the newest committed rows),
 *		what they say, the lock of (name, owner), and the lease core's
 *		call made for one slot: shared by slots.c, slotdeclare.c and
 *		slothandoff.c.
 *
 *		The lock of (name, owner) is a term lock keyed by U+0002, the
 *		name, U+001F and the owner (no lease's name begins with a control
 *		character).  Whoever may begin a term of an owner in a slot holds
 *		it from before it reads the slots until its transaction ends if
 *		it wrote (an acquire, a handoff to a candidate of that owner), so
 *		that one owner never holds two slots of a name.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "slotkey.h"
#include "slotrows.h"

/*
 * Read the "n" slots of "name" into *s.  Returns false, having read
 * nothing, if the table is locked by maintenance and "busy" (a wait's
 * call: that is contention); with "busy" false, that raises 55P03.
 */
bool
hl_slots_read(text *name, int n, SlotRows *s, bool busy)
{
	s->n = n;
	s->rows = palloc(n * sizeof(Lease));
	s->found = palloc(n * sizeof(bool));
	if (hl_slot_rows(name, n, s->rows, s->found, &s->base, &s->base_found,
					 busy) < 0)
		return false;
	s->newest = s->base_found ? s->base.generation : 0;
	for (int k = 0; k < n; k++)
		if (s->found[k])
			s->newest = Max(s->newest, s->rows[k].generation);
	return true;
}

/* The slot of the owner's term, running or in its hold; 0 if none */
int
hl_slots_owners_slot(const SlotRows *s, text *owner, TimestampTz now)
{
	for (int k = 1; k <= s->n; k++)
	{
		const Lease *row = &s->rows[k - 1];

		if (s->found[k - 1] && hl_text_equal(row->owner, owner) &&
			(hl_lease_is_held(row, now) || hl_lease_in_hold(row, now)))
			return k;
	}
	return 0;
}

/* Does a slot's term run, or its hold keep the name? */
bool
hl_slots_in_use(const SlotRows *s, TimestampTz now)
{
	for (int k = 0; k < s->n; k++)
	{
		if (s->found[k] && (hl_lease_is_held(&s->rows[k], now) ||
							hl_lease_in_hold(&s->rows[k], now)))
			return true;
	}
	return false;
}

/* The key of the lock of (name, owner): see the header comment */
text *
hl_slots_owner_lock(text *name, text *owner)
{
	int			nlen = VARSIZE_ANY_EXHDR(name);
	int			olen = VARSIZE_ANY_EXHDR(owner);
	text	   *key = (text *) palloc(VARHDRSZ + nlen + olen + 2);
	char	   *p = VARDATA(key);

	SET_VARSIZE(key, VARHDRSZ + nlen + olen + 2);
	*p++ = '\x02';
	memcpy(p, VARDATA_ANY(name), nlen);
	p += nlen;
	*p++ = HL_SLOT_SEP;
	memcpy(p, VARDATA_ANY(owner), olen);
	return key;
}

/*
 * The core's call for slot "slot" of req's name; a new term's generation
 * is above "after" (the greatest of the name's slots).
 */
LeaseOutcome
hl_slot_cas(const LeaseRequest *req, int slot, int64 after, Lease *result,
			bool *found)
{
	LeaseRequest sreq = *req;
	LeaseOutcome outcome;

	sreq.name = hl_slot_key(req->name, slot);
	sreq.generation_after = after;
	/* a slot being changed is passed over for the next, not polled */
	sreq.await_announcement = false;
	outcome = hl_lease_cas(&sreq, result, found);
	if (*found || outcome == LEASE_DONE)
		result->name = req->name;
	return outcome;
}
