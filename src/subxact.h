/*-------------------------------------------------------------------------
 *
 * subxact.h
 *		The catch block of an internal subtransaction: what every PG_CATCH
 *		around BeginInternalSubTransaction does first.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SUBXACT_H
#define HOPLOCK_SUBXACT_H

#include "postgres.h"

#include "access/xact.h"
#include "utils/resowner.h"

/*
 * In a PG_CATCH block: copy the error into "context", clear it, roll back
 * and release the subtransaction, and return to "context" and "owner" (as
 * they were before BeginInternalSubTransaction).  The caller reports or
 * rethrows the error, and frees it.
 */
static inline ErrorData *
hl_subxact_caught(MemoryContext context, ResourceOwner owner)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(context);
	edata = CopyErrorData();
	FlushErrorState();
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(context);
	CurrentResourceOwner = owner;
	return edata;
}

#endif							/* HOPLOCK_SUBXACT_H */
