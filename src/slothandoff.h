/*-------------------------------------------------------------------------
 *
 * slothandoff.h
 *		hoplock_handoff of a slot's term (slothandoff.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SLOTHANDOFF_H
#define HOPLOCK_SLOTHANDOFF_H

#include "slotrows.h"

extern LeaseOutcome hl_slot_handoff(const LeaseRequest *req,
									const SlotRows *s, int slot,
									Lease *result, bool *found);

#endif							/* HOPLOCK_SLOTHANDOFF_H */
