/*-------------------------------------------------------------------------
 *
 * session.c
 *		Session-bound terms: hoplock_acquire(..., session_bound => true)
 *		binds the term to the acquiring backend (its pid and start time,
 *		stored in the lease row), and the term ends when that backend exits.
 *
 *		The backend remembers the names it bound, in a hash table, and from
 *		a before_shmem_exit callback ends those terms itself in one last
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
 *		Bindings are this file's own end-of-transaction work: the names a
 *		transaction bound are entered in the table before it commits
 *		(nothing is allocated at commit, where running out of memory would
 *		be a PANIC), and forgotten again if it aborts.  Whoever ends a term
 *		(this session, a force-release, another owner taking over a lapsed
 *		term), its name stays in the table until the table has grown to
 *		twice what it held after the last pruning: then every name whose
 *		row no longer binds this session is dropped, so the table stays
 *		within twice the terms still bound (one lookup per binding, spread
 *		out).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"
#include "shmem.h"

#include "access/xact.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

/* A name this session bound a term of */
typedef struct BoundName
{
	char		key[HL_MAX_NAME_BYTES + 1];	/* NUL-terminated; names hold
											 * no NUL */
	bool		committed;		/* its binding committed */
	LocalTransactionId bound_in;	/* the transaction that bound it last */
} BoundName;

static HTAB *bound = NULL;		/* in TopMemoryContext */
static int	uncommitted = 0;	/* entries with committed == false */

/* Prune the table when it holds this many entries (prune_bound) */
#define PRUNE_AT_LEAST	64
static long prune_at = PRUNE_AT_LEAST;
static bool exit_callbacks_registered = false;

static void
name_key(text *name, char *key)
{
	int			len = Min(VARSIZE_ANY_EXHDR(name), HL_MAX_NAME_BYTES);

	memset(key, 0, HL_MAX_NAME_BYTES + 1);
	memcpy(key, VARDATA_ANY(name), len);
}

/* on_shmem_exit: however the backend leaves, it is no longer a session */
static void
unregister_session(int code, Datum arg)
{
	hl_session_unregister();
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
	HASH_SEQ_STATUS status;
	BoundName  *entry;

	if (bound == NULL || hash_get_num_entries(bound) == 0 ||
		!OidIsValid(MyDatabaseId))
		return;

	hash_seq_init(&status, bound);
	while ((entry = hash_seq_search(&status)) != NULL)
		hl_post_session_end(cstring_to_text(entry->key), MyProcPid,
							MyStartTimestamp);

	AbortOutOfAnyTransaction();
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
		hash_destroy(bound);
		bound = NULL;
		return;
	}
	hash_seq_init(&status, bound);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		LeaseRequest req = {0};
		Lease		result;
		bool		found;

		req.op = LEASE_OP_SESSION_END;
		req.fn = "hoplock session exit";
		req.name = cstring_to_text(entry->key);
		req.session_pid = MyProcPid;
		req.session_start = MyStartTimestamp;
		req.busy_is_contention = true;
		(void) hl_lease_cas(&req, &result, &found);
	}
	PopActiveSnapshot();
	CommitTransactionCommand();
	hl_notify_after_commit();
	hash_destroy(bound);
	bound = NULL;
}

/*
 * Drop the names whose terms no longer bind this session: ended, or taken
 * over, by anyone.  Only committed bindings are looked at, and a row this
 * transaction wrote is left for later (the transaction may still roll
 * back, and its write with it).  So is a name this transaction bound again:
 * the lookup reads through the statement's snapshot, which does not see
 * what this statement wrote (several calls in one statement), and would
 * find the term before, ended.
 */
static void
prune_bound(void)
{
	HASH_SEQ_STATUS status;
	BoundName  *entry;

	hash_seq_init(&status, bound);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		Lease		lease;

		if (!entry->committed || entry->bound_in == hl_my_lxid())
			continue;
		if (hl_lease_lookup(cstring_to_text(entry->key), &lease))
		{
			if (TransactionIdIsCurrentTransactionId(lease.xmin))
				continue;
			if (lease.session_pid == MyProcPid &&
				lease.session_start == MyStartTimestamp)
				continue;
		}
		/* removing the entry just returned is allowed during a scan */
		(void) hash_search(bound, entry->key, HASH_REMOVE, NULL);
	}
	prune_at = Max(PRUNE_AT_LEAST, 2 * hash_get_num_entries(bound));
}

/*
 * This transaction binds lease "name" to this session: remember it, now,
 * so that nothing is left to allocate at commit.
 */
void
hl_session_bind(text *name)
{
	char		key[HL_MAX_NAME_BYTES + 1];
	BoundName  *entry;
	bool		found;

	if (bound == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = HL_MAX_NAME_BYTES + 1;
		ctl.entrysize = sizeof(BoundName);
		ctl.hcxt = TopMemoryContext;
		bound = hash_create("hoplock session-bound names", 16, &ctl,
							HASH_ELEM | HASH_STRINGS | HASH_CONTEXT);
	}
	if (!exit_callbacks_registered)
	{
		on_shmem_exit(unregister_session, (Datum) 0);
		before_shmem_exit(end_bound_terms, (Datum) 0);
		exit_callbacks_registered = true;
	}

	/* registered before the binding commits, so never seen unbound */
	hl_session_register();

	if (hash_get_num_entries(bound) >= prune_at)
		prune_bound();

	name_key(name, key);
	entry = hash_search(bound, key, HASH_ENTER, &found);
	if (!found)
	{
		entry->committed = false;
		uncommitted++;
	}
	entry->bound_in = hl_my_lxid();
}

static void
xact_callback(XactEvent event, void *arg)
{
	HASH_SEQ_STATUS status;
	BoundName  *entry;

	if (uncommitted == 0)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			hash_seq_init(&status, bound);
			while ((entry = hash_seq_search(&status)) != NULL)
				entry->committed = true;
			uncommitted = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			hash_seq_init(&status, bound);
			while ((entry = hash_seq_search(&status)) != NULL)
			{
				if (!entry->committed)
					(void) hash_search(bound, entry->key, HASH_REMOVE, NULL);
			}
			uncommitted = 0;
			break;
		default:
			break;
	}
}

void
hl_session_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
}
