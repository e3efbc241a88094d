/*-------------------------------------------------------------------------
 *
 * slotforget.h
 *		Forgetting a lease with slots, every row of it together, once no
 *		slot is in use (slotforget.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SLOTFORGET_H
#define HOPLOCK_SLOTFORGET_H

#include "storage.h"

/* What a name's slots say of its use */
typedef enum HlSlotsState
{
	SLOTS_FREE,					/* no slot in use: the name can be forgotten */
	SLOTS_IN_USE,				/* a slot's term runs, or its hold keeps it */
	SLOTS_BUSY					/* free soon: a change in flight, an end
								 * still to announce; or the floor busy */
} HlSlotsState;

extern HlSlotsState hl_slots_forget_rows(HlRelation *rel, text *name,
										 const LeaseVersion *marker,
										 TimestampTz ended_before,
										 int64 floor_raised);
extern HlSlotsState hl_slots_forget(text *name, bool remove,
									 TimestampTz ended_before, int *have,
									 bool *removed);

#endif							/* HOPLOCK_SLOTFORGET_H */
