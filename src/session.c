/*-------------------------------------------------------------------------
 *
 * session.c
 *		Session-bound terms: hoplock_acquire(..., session_bound => true)
 *		binds the term to the acquiring backend (its pid and start time,
 *		stored in the lease row), and the term ends when that backend exits.
 *
 *		The backend remembers the names it bound (bound.c), and from a
 *		before_shmem_exit callback ends those terms itself in one last
 *		transaction, as PostgreSQL drops temporary tables.  That covers a
 *		disconnect, a client that dies, and pg_terminate_backend.  It also
 *		tells the expiry worker, which keeps trying whatever that
 *		transaction could not end (the lease fenced, or being changed, or
 *		the transaction failing).
 *
 *		A backend registers itself in shared memory before its first
 *		binding can commit, and an on_shmem_exit callback unregisters it
 *		however it leaves, even if its last transaction failed; the worker
 *		treats a row bound to a session that is not registered as ended.  A
 *		backend that crashes takes the server through a crash-restart,
 *		which empties the registry, so the worker then ends every term bound
 *		to a session from before.
 *
 *		The names are kept by bound.c, where the lease core enters them;
 *		this file is above the core, and calls it to end the terms.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "bound.h"
#include "compat.h"
#include "hoplock.h"
#include "lease.h"
#include "session.h"
#include "shmem.h"
#include "storage.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/snapmgr.h"

static bool exit_callbacks_registered = false;

/* on_shmem_exit: however the backend leaves, it is no longer a session */
static void
unregister_session(int code, Datum arg)
{
	hl_session_unregister();
}

static void
free_names(char **names, int count)
{
	for (int i = 0; i < count; i++)
		pfree(names[i]);
	pfree(names);
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
	char	  **names;
	int			count;

	if (!OidIsValid(MyDatabaseId))
		return;
	names = hl_bound_names(&count);
	if (count == 0)
		return;

	for (int i = 0; i < count; i++)
		hl_post_session_end(cstring_to_text(names[i]), MyProcPid,
							MyStartTimestamp);

	/* the abort forgets the names its transaction bound (bound.c) */
	AbortOutOfAnyTransaction();
	free_names(names, count);
	names = hl_bound_names(&count);
	if (count == 0)
		return;
	SetConfigOption("default_transaction_read_only", "off",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("synchronous_commit", "local",
					PGC_SUSET, PGC_S_OVERRIDE);
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());

	/*
	 * The extension dropped meanwhile, or waiting for ALTER EXTENSION
	 * UPDATE: nothing to end here (the worker ends the terms, if any, from
	 * the messages posted above once it can).
	 */
	if (!OidIsValid(get_extension_oid("hoplock", true)) ||
		!hl_extension_current())
	{
		PopActiveSnapshot();
		CommitTransactionCommand();
		hl_bound_forget_all();
		free_names(names, count);
		return;
	}
	for (int i = 0; i < count; i++)
	{
		LeaseRequest req = {0};
		Lease		result;
		bool		found;

		req.op = LEASE_OP_SESSION_END;
		req.fn = "hoplock session exit";
		req.name = cstring_to_text(names[i]);
		req.session_pid = MyProcPid;
		req.session_start = MyStartTimestamp;
		req.busy_is_contention = true;
		(void) hl_lease_cas(&req, &result, &found);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	hl_notify_after_commit();
	hl_bound_forget_all();
	free_names(names, count);
}

/*
 * This call may bind a term to this session (session_bound => true):
 * register the session, and the callbacks that end its terms when it
 * exits, before the binding can commit, so that it is never seen unbound.
 */
void
hl_session_prepare(void)
{
	if (!exit_callbacks_registered)
	{
		on_shmem_exit(unregister_session, (Datum) 0);
		before_shmem_exit(end_bound_terms, (Datum) 0);
		exit_callbacks_registered = true;
	}
	hl_session_register();
}
