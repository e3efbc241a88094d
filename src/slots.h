/*-------------------------------------------------------------------------
 *
 * slots.h
 *		Leases with slots (slots => N): up to N terms of a name at once,
 *		each in a slot of its own (slots.c; storage in slotkey.h).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SLOTS_H
#define HOPLOCK_SLOTS_H

#include "lease.h"

extern LeaseOutcome hl_slots_cas(LeaseRequest *req, Lease *result,
								 bool *found);
extern bool hl_slots_holder(text *name, const Lease *row, Lease *lease);

#endif							/* HOPLOCK_SLOTS_H */
