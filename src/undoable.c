/*-------------------------------------------------------------------------
 *
 * undoable.c
 *		A call of the lease code made in a subtransaction of its own and
 *		kept only if its outcome is LEASE_DONE; otherwise rolled back,
 *		with every row it wrote and every lock it took.
 *
 *		For the calls of slots.c that write the name's own row -- the
 *		row recording N, the removal of the rows of another N -- before
 *		they know whether they will begin a term: one that then finds no
 *		slot to take (another candidate comes first, a slot is being
 *		changed) would otherwise leave that write in flight, and the
 *		name's lock held, for the rest of its transaction.  A waiter
 *		sleeps in that transaction: every other caller of the name would
 *		find it being changed until the sleeper's timeout, while a slot
 *		is free.  An acquire that returns NULL changes nothing, too.
 *
 *		Only the first use of a name (or of another N) pays for the
 *		subtransaction: the calls of a name that records N already write
 *		nothing before the slot's term.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "subxact.h"
#include "undoable.h"

#include "access/xact.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

/*
 * Make call(req, result, found, arg) in a subtransaction: released (its writes
 * and locks the caller's transaction's) if it returns LEASE_DONE, rolled
 * back otherwise, and if it raises (the error raised again, with the
 * subtransaction gone: a caller's own savepoint, in PL/pgSQL say, finds
 * its own).  *result is built in the caller's memory context.
 */
LeaseOutcome
hl_undoable(HlUndoableCall call, LeaseRequest *req, Lease *result,
			bool *found, void *arg)
{
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile LeaseOutcome outcome = LEASE_CONTENDED;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(context);
	PG_TRY();
	{
		outcome = call(req, result, found, arg);
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		edata = hl_subxact_caught(context, owner);
		ReThrowError(edata);
	}
	PG_END_TRY();
	if (outcome == LEASE_DONE)
		ReleaseCurrentSubTransaction();
	else
		RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(context);
	CurrentResourceOwner = owner;
	return outcome;
}
