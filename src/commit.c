/*-------------------------------------------------------------------------
 *
 * commit.c
 *		Work that must wait for the end of the transaction: it would be
 *		wrong to do it for changes that roll back, or too early before they
 *		are visible to others.
 *
 *		- log lines of events (hoplock.log_events), written after commit;
 *		- deadlines for the expiry worker, posted after commit, when the
 *		  worker can read the new term;
 *		- session-bound terms this backend began, remembered after commit;
 *		- requests to the launcher and workers (CREATE/DROP EXTENSION);
 *		- waking hoplock_wait sleepers of a lease whose term lock this
 *		  transaction held: at commit *and* at abort, since either way
 *		  the lease may now be had, and only once the locks are released
 *		  (a resource-release callback after the lock phase), or the
 *		  woken waiter would find the term lock still taken.
 *
 *		The list lives in TopTransactionContext.  A subtransaction that
 *		aborts drops the commit-only items it queued, as async.c drops its
 *		notifications; wake-ups stay.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/resowner.h"

typedef enum PendingKind
{
	PENDING_LOG,
	PENDING_DEADLINE,
	PENDING_BIND,
	PENDING_WAKE_LAUNCHER,
	PENDING_STOP_WORKER,
	PENDING_WAKE_WAITERS		/* also on abort */
} PendingKind;

typedef struct Pending
{
	struct Pending *next;
	PendingKind kind;
	int			nest_level;		/* subtransaction that queued it */
	text	   *name;
	TimestampTz expires_at;
	Oid			dboid;
	char	   *message;
	ConditionVariable *cv;		/* PENDING_WAKE_WAITERS */
} Pending;

/* Newest first; reset at the end of every transaction */
static Pending *pending = NULL;

/* Wake-ups of the ending transaction, run after its locks are released */
static Pending *wake_after_locks = NULL;

static Pending *
queue(PendingKind kind)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	Pending    *item = palloc0(sizeof(Pending));

	item->kind = kind;
	item->nest_level = GetCurrentTransactionNestLevel();
	item->next = pending;
	pending = item;
	MemoryContextSwitchTo(old);
	return item;
}

static text *
copy_name(text *name)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	text	   *copy = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(name));

	MemoryContextSwitchTo(old);
	return copy;
}

void
at_commit_log(const char *message)
{
	Pending    *item = queue(PENDING_LOG);

	item->message = MemoryContextStrdup(TopTransactionContext, message);
}

void
at_commit_deadline(text *name, TimestampTz expires_at)
{
	Pending    *item;

	if (hoplock_shared == NULL)
		return;
	item = queue(PENDING_DEADLINE);
	item->name = copy_name(name);
	item->expires_at = expires_at;
}

void
at_commit_bind_session(text *name)
{
	Pending    *item = queue(PENDING_BIND);

	item->name = copy_name(name);
}

void
at_commit_wake_launcher(Oid dboid)
{
	Pending    *item;

	if (hoplock_shared == NULL)
		return;
	item = queue(PENDING_WAKE_LAUNCHER);
	item->dboid = dboid;
}

void
at_commit_stop_worker(Oid dboid)
{
	Pending    *item;

	if (hoplock_shared == NULL)
		return;
	item = queue(PENDING_STOP_WORKER);
	item->dboid = dboid;
}

/*
 * Broadcasting a condition variable nobody sleeps on costs next to nothing,
 * so a lease changed twice in one transaction is simply woken twice.
 */
void
at_end_wake_waiters(text *name)
{
	if (hoplock_shared == NULL)
		return;
	queue(PENDING_WAKE_WAITERS)->cv = hoplock_wait_cv(name);
}

static void
post_deadline(Pending *item)
{
	HoplockMessage msg;

	msg.kind = HOPLOCK_MSG_DEADLINE;
	msg.expires_at = item->expires_at;
	msg.session_pid = 0;
	msg.session_start = 0;
	msg.namelen = VARSIZE_ANY_EXHDR(item->name);
	memcpy(msg.name, VARDATA_ANY(item->name), msg.namelen);
	hoplock_post(&msg);
}

/* Carry out the list, oldest item first. */
static void
run_pending(bool committed)
{
	Pending    *oldest_first = NULL;

	while (pending != NULL)
	{
		Pending    *next = pending->next;

		pending->next = oldest_first;
		oldest_first = pending;
		pending = next;
	}

	for (Pending *item = oldest_first, *next; item != NULL; item = next)
	{
		next = item->next;
		if (item->kind == PENDING_WAKE_WAITERS)
		{
			item->next = wake_after_locks;
			wake_after_locks = item;
			continue;
		}
		if (!committed)
			continue;
		switch (item->kind)
		{
			case PENDING_LOG:
				ereport(LOG, (errmsg_internal("%s", item->message)));
				break;
			case PENDING_DEADLINE:
				post_deadline(item);
				break;
			case PENDING_BIND:
				hoplock_session_bind(item->name);
				break;
			case PENDING_WAKE_LAUNCHER:
				hoplock_wake_launcher(item->dboid);
				break;
			case PENDING_STOP_WORKER:
				hoplock_stop_worker(item->dboid, STOP_EXTENSION_DROPPED);
				break;
			case PENDING_WAKE_WAITERS:
				break;
		}
	}
}

/*
 * After the top-level transaction's locks are released: wake the waiters.
 * TopTransactionContext, where the items live, is still there.
 */
static void
resource_release_callback(ResourceReleasePhase phase, bool isCommit,
						  bool isTopLevel, void *arg)
{
	if (phase != RESOURCE_RELEASE_AFTER_LOCKS || !isTopLevel)
		return;
	for (Pending *item = wake_after_locks; item != NULL; item = item->next)
		ConditionVariableBroadcast(item->cv);
	wake_after_locks = NULL;
}

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			run_pending(true);
			pending = NULL;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
			run_pending(false);
			pending = NULL;
			break;
		case XACT_EVENT_PREPARE:
			/*
			 * A renewal that moved the expiry earlier can be prepared (term
			 * changes cannot: they NOTIFY).  Its deadline is only a
			 * reminder to look, so post it now.
			 */
			for (Pending *item = pending; item != NULL; item = item->next)
			{
				if (item->kind == PENDING_DEADLINE)
					post_deadline(item);
			}
			pending = NULL;
			wake_after_locks = NULL;
			break;
		default:
			break;
	}
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();
	Pending   **link = &pending;

	if (event != SUBXACT_EVENT_ABORT_SUB && event != SUBXACT_EVENT_COMMIT_SUB)
		return;

	/* items of this subtransaction (and its committed children) come first */
	while (*link != NULL && (*link)->nest_level >= level)
	{
		Pending    *item = *link;

		if (event == SUBXACT_EVENT_ABORT_SUB && item->kind != PENDING_WAKE_WAITERS)
		{
			*link = item->next;
			continue;
		}
		item->nest_level = level - 1;
		link = &item->next;
	}
}

void
hoplock_commit_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
	RegisterResourceReleaseCallback(resource_release_callback, NULL);
}
