/*-------------------------------------------------------------------------
 *
 * session.c
 *		Session-bound terms: hoplock_acquire(..., session_bound => true)
 *		binds the term to the acquiring backend (its pid and start time,
 *		stored in the lease row), and the term ends when that backend exits.
 *
 *		The backend remembers the names it bound (once the binding
 *		commits) and, from a before_shmem_exit callback, ends those terms
 *		itself in one last transaction, as PostgreSQL drops temporary
 *		tables.  That covers a disconnect, a client that dies, and
 *		pg_terminate_backend.  It also tells the expiry worker, which
 *		keeps trying whatever that transaction could not end (the lease
 *		fenced, or being changed, or the transaction failing).
 *
 *		A backend registers itself in shared memory before its first
 *		binding can commit; the worker treats a row bound to a session
 *		that is not registered as ended.  A backend that crashes takes the
 *		server through a crash-restart, which empties the registry, so the
 *		worker then ends every term bound to a session from before.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

/* Names of the terms this session bound, in TopMemoryContext */
static List *bound_names = NIL;
static bool exit_callback_registered = false;

static void
leave_to_worker(text *name)
{
	HoplockMessage msg;

	if (hoplock_shared == NULL)
		return;
	memset(&msg, 0, offsetof(HoplockMessage, name));
	msg.kind = HOPLOCK_MSG_SESSION_END;
	msg.session_pid = MyProcPid;
	msg.session_start = MyStartTimestamp;
	msg.namelen = VARSIZE_ANY_EXHDR(name);
	memcpy(msg.name, VARDATA_ANY(name), msg.namelen);
	hoplock_post(&msg);
}

/*
 * before_shmem_exit callback: end the terms still bound to this session.
 *
 * First tell the worker, whose compare-and-swap does nothing for a term
 * that is no longer bound to this session: an error in the transaction
 * below turns into FATAL this late, and nothing after it would run.  Then
 * end them here, at once.  Any transaction this backend was in has to go
 * first, as in RemoveTempRelationsCallback; and this last transaction must
 * not depend on the session's settings, nor wait for a standby (interrupts
 * are held: nothing could cancel the wait).
 */
static void
end_bound_terms(int code, Datum arg)
{
	ListCell   *lc;

	if (bound_names == NIL || !OidIsValid(MyDatabaseId))
	{
		hoplock_session_unregister();
		return;
	}

	foreach(lc, bound_names)
		leave_to_worker((text *) lfirst(lc));

	AbortOutOfAnyTransaction();
	SetConfigOption("default_transaction_read_only", "off",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("synchronous_commit", "local",
					PGC_SUSET, PGC_S_OVERRIDE);
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	foreach(lc, bound_names)
	{
		LeaseRequest req = {0};
		Lease		result;
		bool		found;

		req.op = LEASE_OP_SESSION_END;
		req.fn = "hoplock session exit";
		req.name = (text *) lfirst(lc);
		req.session_pid = MyProcPid;
		req.session_start = MyStartTimestamp;
		(void) lease_cas(&req, &result, &found);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	hoplock_notify_after_commit();

	bound_names = NIL;
	hoplock_session_unregister();
}

/*
 * Called at commit of a transaction that bound lease "name" to this
 * session.
 */
void
hoplock_session_bind(text *name)
{
	MemoryContext old;
	ListCell   *lc;

	foreach(lc, bound_names)
	{
		if (text_equal((text *) lfirst(lc), name))
			return;
	}

	old = MemoryContextSwitchTo(TopMemoryContext);
	bound_names = lappend(bound_names,
						  PG_DETOAST_DATUM_COPY(PointerGetDatum(name)));
	MemoryContextSwitchTo(old);

	if (!exit_callback_registered)
	{
		before_shmem_exit(end_bound_terms, (Datum) 0);
		exit_callback_registered = true;
	}
}
