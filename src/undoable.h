/*-------------------------------------------------------------------------
 *
 * undoable.h
 *		A call of the lease code kept only if it began a term
 *		(undoable.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_UNDOABLE_H
#define HOPLOCK_UNDOABLE_H

#include "lease.h"

typedef LeaseOutcome (*HlUndoableCall) (LeaseRequest *req, Lease *result,
										bool *found, void *arg);

extern LeaseOutcome hl_undoable(HlUndoableCall call, LeaseRequest *req,
								Lease *result, bool *found, void *arg);

#endif							/* HOPLOCK_UNDOABLE_H */
