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
 *		DISCARD ALL ends them too, in its own transaction, as it releases
 *		the session's advisory locks: a pooler resets a server connection
 *		so before it serves the next client (PgBouncer's server_reset_query
 *		in session pooling mode), so a term bound to a session whose
 *		client has gone ends then.
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
#include "subxact.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/resowner.h"
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
 * End the term of "name" if it is still bound to this session ("fn" names
 * the caller in messages).  A term another transaction is changing right
 * now is contention, never a wait.
 */
static LeaseOutcome
end_own_term(const char *name, const char *fn)
{
	LeaseRequest req = {0};
	Lease		result;
	bool		found;

	req.op = LEASE_OP_SESSION_END;
	req.fn = fn;
	req.name = cstring_to_text(name);
	req.session_pid = MyProcPid;
	req.session_start = MyStartTimestamp;
	req.busy_is_contention = true;
	return hl_lease_cas(&req, &result, &found);
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
	HlRelation	rel;

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

	/*
	 * A term attached to a keepalive is read with it, and that reading
	 * raises, not contends, if the keepalive table is locked (maintenance):
	 * then leave the terms to the worker, told above.  The lock is kept, so
	 * that the readings below find it taken.
	 */
	if (!hl_open(HL_REL_KEEPALIVE, AccessShareLock, false, &rel))
	{
		PopActiveSnapshot();
		CommitTransactionCommand();
		free_names(names, count);
		return;
	}
	hl_close(&rel, true);
	for (int i = 0; i < count; i++)
		(void) end_own_term(names[i], "hoplock session exit");
	PopActiveSnapshot();
	CommitTransactionCommand();
	hl_notify_after_commit();
	hl_bound_forget_all();
	free_names(names, count);
}

/*
 * DISCARD ALL has reset the session: end the terms bound to it, in the
 * statement's transaction (DISCARD ALL cannot run in a transaction block,
 * so this transaction does nothing else).  Nothing here may fail the
 * statement a pooler relies on: the terms are ended in a subtransaction,
 * and a failure is a WARNING -- the terms then end at the session's exit,
 * or at their ttl.  A term another transaction is changing right now is
 * left alone the same way (contention, never a wait), and its name stays
 * remembered; the names of the terms ended here are forgotten once this
 * transaction commits, and those found bound no more (released, ended by
 * anyone) at once, so that the next DISCARD ALL neither looks at them again
 * nor warns of them.
 */
void
hl_session_discard(void)
{
	char	  **names;
	int			count;
	LeaseOutcome *outcomes;
	MemoryContext oldcontext = CurrentMemoryContext;
	ResourceOwner oldowner = CurrentResourceOwner;

	names = hl_bound_names(&count);
	if (count == 0)
		return;
	if (RecoveryInProgress() ||
		!OidIsValid(get_extension_oid("hoplock", true)))
	{
		/* nothing of this database's can be bound */
		free_names(names, count);
		return;
	}
	if (XactReadOnly || !hl_extension_current())
	{
		ereport(WARNING,
				(errmsg("DISCARD ALL did not end the terms bound to this session"),
				 XactReadOnly ?
				 errdetail("The transaction is read-only.") :
				 errdetail("The SQL objects of extension \"hoplock\" are not the version the library loaded needs."),
				 errhint("The terms end when this session does, or when their ttl lapses.")));
		free_names(names, count);
		return;
	}

	/*
	 * Nor may it wait for a synchronous standby, as the session's exit does
	 * not (end_bound_terms): a pooler's reset would hang while the standby
	 * is away, whatever synchronous_commit the session had chosen (DISCARD
	 * ALL has just reset it).  A standby promoted without this commit finds
	 * the terms running until their ttl.  Set for this transaction alone,
	 * before the subtransaction: its commit waits even if the subtransaction
	 * rolled back.
	 */
	if (synchronous_commit > SYNCHRONOUS_COMMIT_LOCAL_FLUSH)
		(void) set_config_option("synchronous_commit", "local",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);

	outcomes = palloc(sizeof(LeaseOutcome) * count);
	BeginInternalSubTransaction(NULL);
	PG_TRY();
	{
		bool		pushed = false;

		if (!ActiveSnapshotSet())
		{
			PushActiveSnapshot(GetTransactionSnapshot());
			pushed = true;
		}
		for (int i = 0; i < count; i++)
			outcomes[i] = end_own_term(names[i], "DISCARD ALL");
		if (pushed)
			PopActiveSnapshot();
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(oldcontext);
		CurrentResourceOwner = oldowner;

		/* nothing below can fail */
		for (int i = 0; i < count; i++)
		{
			if (outcomes[i] == LEASE_REFUSED)
				hl_bound_forget(names[i]);
			else if (outcomes[i] == LEASE_DONE)
				hl_bound_forget_at_commit(names[i]);
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		edata = hl_subxact_caught(oldcontext, oldowner);
		ereport(WARNING,
				(errcode(edata->sqlerrcode),
				 errmsg("DISCARD ALL did not end the terms bound to this session: %s",
						edata->message),
				 errhint("The terms end when this session does, or when their ttl lapses.")));
		FreeErrorData(edata);
	}
	PG_END_TRY();
	pfree(outcomes);
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
