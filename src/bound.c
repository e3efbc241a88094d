/*-------------------------------------------------------------------------
 *
 * bound.c
 *		The names of the terms this session bound to itself
 *		(hoplock_acquire(..., session_bound => true)): the lease core
 *		enters a name when it writes the binding, and session.c ends those
 *		terms when the backend exits.
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
 *		out).  DISCARD ALL (session.c) forgets at once the names it finds no
 *		longer bound here, and those whose terms it ends once its
 *		transaction commits.
 *
 *		It reads the lease table through the storage layer (store.c) and
 *		calls nothing above it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "bound.h"
#include "compat.h"
#include "hoplock.h"
#include "storage.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"

/* A name this session bound a term of */
typedef struct BoundName
{
	char		key[HL_MAX_NAME_BYTES + 1];	/* NUL-terminated; names hold
											 * no NUL */
	bool		committed;		/* its binding committed */
	LocalTransactionId bound_in;	/* the transaction that bound it last */
	bool		ending;			/* this transaction ends its term: forget it
								 * at commit */
} BoundName;

static HTAB *bound = NULL;		/* in TopMemoryContext */
static int	uncommitted = 0;	/* entries with committed == false */
static int	ending = 0;			/* entries with ending == true */

/* Prune the table when it holds this many entries (prune_bound) */
#define PRUNE_AT_LEAST	64
static long prune_at = PRUNE_AT_LEAST;

static void
name_key(text *name, char *key)
{
	int			len = Min(VARSIZE_ANY_EXHDR(name), HL_MAX_NAME_BYTES);

	memset(key, 0, HL_MAX_NAME_BYTES + 1);
	memcpy(key, VARDATA_ANY(name), len);
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
		if (entry->ending)
			ending--;
		(void) hash_search(bound, entry->key, HASH_REMOVE, NULL);
	}
	prune_at = Max(PRUNE_AT_LEAST, 2 * hash_get_num_entries(bound));
}

/*
 * This transaction binds lease "name" to this session: remember it, now,
 * so that nothing is left to allocate at commit.  The caller registered the
 * session first (hl_session_prepare).
 */
void
hl_bound_add(text *name)
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

	if (hash_get_num_entries(bound) >= prune_at)
		prune_bound();

	name_key(name, key);
	entry = hash_search(bound, key, HASH_ENTER, &found);
	if (!found)
	{
		entry->committed = false;
		entry->ending = false;
		uncommitted++;
	}
	entry->bound_in = hl_my_lxid();
}

/*
 * Forget "name" (NUL-terminated) now: its lease row, as just read, binds
 * no term to this session.  A binding this transaction made is kept (it
 * is not what the row says until it commits).
 */
void
hl_bound_forget(const char *name)
{
	BoundName  *entry;

	if (bound == NULL)
		return;
	entry = hash_search(bound, name, HASH_FIND, NULL);
	if (entry == NULL || !entry->committed ||
		entry->bound_in == hl_my_lxid())
		return;
	if (entry->ending)
		ending--;
	(void) hash_search(bound, name, HASH_REMOVE, NULL);
}

/*
 * This transaction ended the term of "name" bound to this session: forget
 * the name if it commits.
 */
void
hl_bound_forget_at_commit(const char *name)
{
	BoundName  *entry;

	if (bound == NULL)
		return;
	entry = hash_search(bound, name, HASH_FIND, NULL);
	if (entry == NULL || !entry->committed || entry->ending ||
		entry->bound_in == hl_my_lxid())
		return;
	entry->ending = true;
	ending++;
}

/*
 * The names bound, committed or not (*count of them), in TopMemoryContext
 * (the caller may abort its transaction meanwhile, and frees them); NULL
 * if there are none.
 */
char	  **
hl_bound_names(int *count)
{
	HASH_SEQ_STATUS status;
	BoundName  *entry;
	char	  **names;
	int			n = 0;

	*count = 0;
	if (bound == NULL || hash_get_num_entries(bound) == 0)
		return NULL;
	names = MemoryContextAlloc(TopMemoryContext,
							   sizeof(char *) * hash_get_num_entries(bound));
	hash_seq_init(&status, bound);
	while ((entry = hash_seq_search(&status)) != NULL)
		names[n++] = MemoryContextStrdup(TopMemoryContext, entry->key);
	*count = n;
	return names;
}

/* Forget every name: the session ended its terms */
void
hl_bound_forget_all(void)
{
	if (bound != NULL)
		hash_destroy(bound);
	bound = NULL;
	uncommitted = 0;
	ending = 0;
}

static void
bound_xact_callback(XactEvent event, void *arg)
{
	HASH_SEQ_STATUS status;
	BoundName  *entry;

	if (uncommitted == 0 && ending == 0)
		return;
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			hash_seq_init(&status, bound);
			while ((entry = hash_seq_search(&status)) != NULL)
			{
				/* removing the entry just returned is allowed */
				if (entry->ending)
					(void) hash_search(bound, entry->key, HASH_REMOVE, NULL);
				else
					entry->committed = true;
			}
			uncommitted = 0;
			ending = 0;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			hash_seq_init(&status, bound);
			while ((entry = hash_seq_search(&status)) != NULL)
			{
				if (!entry->committed)
					(void) hash_search(bound, entry->key, HASH_REMOVE, NULL);
				else
					entry->ending = false;
			}
			uncommitted = 0;
			ending = 0;
			break;
		default:
			break;
	}
}

/* Register the callbacks of this file's end-of-transaction work. */
void
hl_bound_init(void)
{
	RegisterXactCallback(bound_xact_callback, NULL);
}
