/*-------------------------------------------------------------------------
 *
 * wait.c
 *		hoplock_wait: acquire, or sleep until the lease can be had and try
 *		again, until the timeout.
 *
 *		Sleeping is on a condition variable in shared memory, one of
 *		HL_WAIT_BUCKETS chosen by the lease's name.  It is broadcast at the
 *		end of every transaction that held the lease's term lock (a
 *		release, a force-release, a new term, a fence), and when the worker
 *		announces an expiry.  A sleeper also wakes by itself when the
 *		holder's term lapses, so an expiry needs no worker.  Woken waiters
 *		race through the ordinary compare-and-swap; one wins, the others
 *		sleep again.
 *
 *		A sleeping waiter holds no lock: an attempt that fails gives back
 *		every lock it took, so that it holds up neither DDL on the lease
 *		table nor the calls that would queue behind that DDL.
 *
 *		The sleep is the condition variable's: interruptible, so query
 *		cancel, statement_timeout and pg_terminate_backend end it, and
 *		transaction abort and backend exit take the sleeper off the list.
 *
 *		The wake-ups of a transaction are this file's own end-of-transaction
 *		work: broadcast at commit and at abort (either way the lease may now
 *		be had), after the transaction's locks are released, or a woken
 *		waiter would find the term lock still taken.
 *
 *		Without shared_preload_libraries there is no shared memory: then
 *		hoplock_wait polls with exponential backoff, and says so once per
 *		session.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"
#include "shmem.h"

#include "access/xact.h"
#include "common/int.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#define POLL_FIRST_MS	10
#define POLL_MAX_MS		1000
/* Cap on a sleep with nothing known to wake it */
#define SLEEP_MAX_MS	1000
/* Sleep while the lease table is locked by maintenance */
#define BUSY_SLEEP_MS	10

static bool polling_notice_given = false;

/* Condition variables to broadcast when this transaction ends */
typedef struct PendingWake
{
	struct PendingWake *next;
	ConditionVariable *cv;
} PendingWake;

static PendingWake *pending_wakes = NULL;	/* in TopTransactionContext */

/*
 * Try the acquire; if it fails, sleep until the lease may be free, or the
 * deadline.  Returns true with *result when the lease was acquired.
 */
bool
hl_lease_wait(LeaseRequest *req, int64 timeout, Lease *result)
{
	TimestampTz deadline;
	ConditionVariable *cv = hl_wait_cv(req->name);
	MemoryContext loop_context;
	MemoryContext old;
	long		poll_ms = POLL_FIRST_MS;
	bool		acquired = false;
	bool		waited = false;

	req->busy_is_contention = true;
	deadline = GetCurrentTimestamp();
	if (pg_add_s64_overflow(deadline, timeout, &deadline) ||
		!IS_VALID_TIMESTAMP(deadline))
		deadline = DT_NOEND;

	if (cv == NULL && !polling_notice_given)
	{
		ereport(NOTICE,
				(errmsg("hoplock_wait is polling for lease changes"),
				 errdetail("hoplock is not in shared_preload_libraries, so it cannot be woken when the lease is released."),
				 errhint("Add hoplock to shared_preload_libraries and restart the server.")));
		polling_notice_given = true;
	}

	loop_context = AllocSetContextCreate(CurrentMemoryContext,
										 "hoplock_wait",
										 ALLOCSET_SMALL_SIZES);
	for (;;)
	{
		Lease		seen;
		bool		found;
		LeaseOutcome outcome;
		TimestampTz now;
		TimestampTz wake;
		long		ms;

		/* ready to sleep before looking, or a wake-up could be missed */
		if (cv != NULL)
			ConditionVariablePrepareToSleep(cv);

		MemoryContextReset(loop_context);
		old = MemoryContextSwitchTo(loop_context);
		outcome = hl_lease_cas(req, &seen, &found);
		MemoryContextSwitchTo(old);
		if (outcome == LEASE_DONE)
		{
			/* copy the result out of the loop's context */
			*result = seen;
			result->name = req->name;
			result->owner = req->owner;
			acquired = true;
			break;
		}

		now = GetCurrentTimestamp();
		if (now >= deadline)
			break;

		/* the holder's term lapses by itself: be there when it does */
		wake = deadline;
		if (found && hl_lease_is_held(&seen, now))
			wake = Min(wake, seen.expires_at);
		ms = hl_ms_until(now, wake);
		/* nothing seen: the table was locked, and nobody will say when not */
		if (!found && outcome == LEASE_CONTENDED)
			ms = Min(ms, BUSY_SLEEP_MS);

		if (!waited)
		{
			hl_count(HL_COUNT_WAITS);
			waited = true;
		}
		if (cv != NULL)
		{
			if (!ConditionVariableTimedSleep(cv, Min(ms, SLEEP_MAX_MS),
											 PG_WAIT_EXTENSION))
				hl_count(HL_COUNT_WAKEUPS);
		}
		else
		{
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(ms, poll_ms), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			poll_ms = Min(poll_ms * 2, POLL_MAX_MS);
		}
		CHECK_FOR_INTERRUPTS();
	}

	if (cv != NULL)
		ConditionVariableCancelSleep();
	MemoryContextDelete(loop_context);
	return acquired;
}

/*
 * Wake the waiters of lease "name" when this transaction ends, by commit or
 * abort.  Broadcasting a condition variable nobody sleeps on costs next to
 * nothing, so a lease changed twice in one transaction is simply woken
 * twice.
 */
void
hl_wake_waiters_at_end(text *name)
{
	PendingWake *item;

	if (hl_shared == NULL)
		return;
	item = MemoryContextAlloc(TopTransactionContext, sizeof(PendingWake));
	item->cv = hl_wait_cv(name);
	item->next = pending_wakes;
	pending_wakes = item;
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
	for (PendingWake *item = pending_wakes; item != NULL; item = item->next)
		ConditionVariableBroadcast(item->cv);
	pending_wakes = NULL;
}

static void
xact_callback(XactEvent event, void *arg)
{
	/* a prepared transaction keeps its locks: nobody to wake yet */
	if (event == XACT_EVENT_PREPARE)
		pending_wakes = NULL;
}

void
hl_wait_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterResourceReleaseCallback(resource_release_callback, NULL);
}
