/*-------------------------------------------------------------------------
 *
 * slotdeclare.h
 *		The number of slots a name records: recorded by its first acquire
 *		with slots, binding while the name is in use, changed once it is
 *		free (slotdeclare.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SLOTDECLARE_H
#define HOPLOCK_SLOTDECLARE_H

#include "slotrows.h"

#include "storage/lockdefs.h"

extern LeaseOutcome hl_slots_declare(LeaseRequest *req, SlotRows *s,
									 LOCKMODE *mode, bool *kept);
extern LeaseOutcome hl_slots_undeclare(const LeaseRequest *req, int have,
									   Lease *result, bool *found);

#endif							/* HOPLOCK_SLOTDECLARE_H */
