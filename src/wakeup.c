/*-------------------------------------------------------------------------
 *
 * wakeup.c
 *		The wake-ups a transaction owes the waiters of the leases it
 *		changed (wait.c sleeps on them).  The lease core queues one for a
 *		name whose term it ended, began over a lapsed one, announced as
 *		expired, or moved earlier; a fence that outlived its term queues a
 *		conditional one.
 *
 *		They are broadcast at commit and at abort (either way the lease may
 *		now be had), after the transaction's locks are released, or a
 *		woken waiter would find the term lock still taken.  Those queued
 *		in a subtransaction are broadcast when it aborts (ROLLBACK TO
 *		SAVEPOINT), after its locks are released: its change is gone, and
 *		the rest of the transaction may last long.  A prepared transaction
 *		keeps its locks: its wake-ups are dropped, and its waiters find the
 *		lease again by themselves (they look at least every second).
 *
 *		This file calls nothing of hoplock's but the wait table in shared
 *		memory (shmem.c): the lease core calls down into it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "shmem.h"
#include "wakeup.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

/*
 * Names whose waiters to wake when this transaction ends.  The key of a
 * name in the table of names waited for (a digest) is computed only then,
 * and only if anyone waits for any name at all: most term changes have no
 * waiter.
 */
typedef struct PendingWake
{
	struct PendingWake *next;
	text	   *name;
	TimestampTz lapsed_by;		/* only if the clock is past this; 0:
								 * always */
	SubTransactionId subid;		/* the subtransaction that queued it */
} PendingWake;

static PendingWake *pending_wakes = NULL;	/* in TopTransactionContext */

/* The subtransaction being aborted, until its locks are released */
static SubTransactionId aborting_subid = InvalidSubTransactionId;

static void
queue_wake(text *name, TimestampTz lapsed_by)
{
	PendingWake *item;

	if (hl_shared == NULL)
		return;
	/* so that the key can be computed without raising, at the end */
	hl_wait_key_prepare();
	item = MemoryContextAlloc(TopTransactionContext, sizeof(PendingWake));
	item->name = MemoryContextAlloc(TopTransactionContext,
									VARSIZE_ANY_EXHDR(name) + VARHDRSZ);
	SET_VARSIZE(item->name, VARSIZE_ANY_EXHDR(name) + VARHDRSZ);
	memcpy(VARDATA(item->name), VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	item->lapsed_by = lapsed_by;
	item->subid = GetCurrentSubTransactionId();
	item->next = pending_wakes;
	pending_wakes = item;
}

/*
 * Wake the waiters of lease "name" when this transaction ends, by commit or
 * abort.  Waking a name nobody waits for costs a look in a hash table, so
 * a lease changed twice in one transaction is simply woken twice.
 */
void
hl_wake_waiters_at_end(text *name)
{
	queue_wake(name, 0);
}

/*
 * The same, for a fence of a term that runs until "expires_at": only if
 * the transaction ends after that.  While the term runs, a waiter finds the
 * lease held, not fenced, and has nothing to try again.  (A renewal that
 * extended the term during the fence makes the wake-up needless, never
 * missing; one that moved the expiry earlier left waiters that the fence
 * kept out trying again every second.)
 */
void
hl_wake_waiters_if_lapsed_at_end(text *name, TimestampTz expires_at)
{
	queue_wake(name, Max(expires_at, 1));
}

/*
 * Broadcast one queued wake-up, if it is due and anyone waits ("waiting":
 * hl_names_waited_for(), asked after the locks were released).  Nothing
 * here may raise an error: the transaction has ended.  A key that cannot
 * be computed (an OpenSSL failure) wakes every waiter of the database
 * instead: a waiter that saw the lease held sleeps until its expiry.
 */
static void
broadcast(PendingWake *item, TimestampTz *now, bool waiting)
{
	HlWaitKey	key;

	if (!waiting)
		return;
	if (item->lapsed_by != 0)
	{
		if (*now == 0)
			*now = GetCurrentTimestamp();
		if (*now < item->lapsed_by)
			return;
	}
	if (hl_wait_key_try(item->name, &key))
		hl_wake_waiters(&key);
	else
		hl_wake_all_waiters(MyDatabaseId);
}

/*
 * After the top-level transaction's locks are released: wake the waiters.
 * After an aborting subtransaction's: wake those of the wake-ups it and
 * its children queued (subtransaction IDs grow), and forget them.
 * TopTransactionContext, where the items live, is still there.
 */
static void
resource_release_callback(ResourceReleasePhase phase, bool isCommit,
						  bool isTopLevel, void *arg)
{
	TimestampTz now = 0;
	bool		waiting;

	if (phase != RESOURCE_RELEASE_AFTER_LOCKS)
		return;
	waiting = pending_wakes != NULL && hl_names_waited_for();
	if (!isTopLevel)
	{
		PendingWake **link = &pending_wakes;

		/* not a portal's resources, say: the subtransaction's own */
		if (isCommit || aborting_subid == InvalidSubTransactionId)
			return;
		while (*link != NULL)
		{
			PendingWake *item = *link;

			if (item->subid >= aborting_subid)
			{
				broadcast(item, &now, waiting);
				*link = item->next;
			}
			else
				link = &item->next;
		}
		aborting_subid = InvalidSubTransactionId;
		return;
	}
	for (PendingWake *item = pending_wakes; item != NULL; item = item->next)
		broadcast(item, &now, waiting);
	pending_wakes = NULL;
	aborting_subid = InvalidSubTransactionId;
}

/*
 * A subtransaction aborts: its locks are released next, then
 * resource_release_callback wakes its waiters.
 */
static void
wakeup_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	if (event == SUBXACT_EVENT_ABORT_SUB)
		aborting_subid = mySubid;
}

static void
wakeup_xact_callback(XactEvent event, void *arg)
{
	/* a prepared transaction keeps its locks: nobody to wake yet */
	if (event == XACT_EVENT_PREPARE)
		pending_wakes = NULL;
}

/* Register the callbacks of this file's end-of-transaction work. */
void
hl_wakeup_init(void)
{
	RegisterXactCallback(wakeup_xact_callback, NULL);
	RegisterSubXactCallback(wakeup_subxact_callback, NULL);
	RegisterResourceReleaseCallback(resource_release_callback, NULL);
}
