/*-------------------------------------------------------------------------
 *
 * slotrows.h
 *		A name's slots as one call reads them, and the core's call for one
 *		slot (slotrows.c): what the files of leases with slots share
 *		(slots.c, slotdeclare.c, slothandoff.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SLOTROWS_H
#define HOPLOCK_SLOTROWS_H

#include "lease.h"

/*
 * A name's slots, as read: rows[k - 1], found[k - 1] for slot k, and the
 * name's own row (the one that records N)
 */
typedef struct SlotRows
{
	int			n;
	Lease	   *rows;
	bool	   *found;
	Lease		base;
	bool		base_found;
	int64		newest;			/* greatest generation among them all */
} SlotRows;

extern bool hl_slots_read(text *name, int n, SlotRows *s, bool busy);
extern int	hl_slots_owners_slot(const SlotRows *s, text *owner,
								 TimestampTz now);
extern bool hl_slots_in_use(const SlotRows *s, TimestampTz now);
extern text *hl_slots_owner_lock(text *name, text *owner);
extern LeaseOutcome hl_slot_cas(const LeaseRequest *req, int slot,
								int64 after, Lease *result, bool *found);

#endif							/* HOPLOCK_SLOTROWS_H */
