/*-------------------------------------------------------------------------
 *
 * wait.c
 *		hoplock_wait: acquire, or sleep until the lease can be had and try
 *		again, until the timeout.
 *
 *		Sleeping is on a condition variable in shared memory of the lease's
 *		name alone (shmem.c): the waiters of a name are woken by changes of
 *		that name, never by those of another, whoever chose it.  It is
 *		broadcast at the end of every transaction that held the lease's
 *		term lock in ExclusiveLock (a release, a force-release, a new term,
 *		a forget), when the worker announces an expiry, when a renewal
 *		moves the expiry earlier, and at the end of a fence that outlived
 *		the term it fenced (only then could it have kept a waiter out).  A
 *		renewal, or a fence of a running term, wakes nobody: a waiter costs
 *		nothing while its lease does not change hands.  A sleeper also
 *		wakes by itself when the holder's term lapses, so an expiry needs no
 *		worker.  Woken waiters race through the ordinary compare-and-swap;
 *		one wins, the others sleep again.  A waiter that found the lease
 *		free but could not take it (a term change or fence in flight, the
 *		table locked) tries again at least every second.
 *
 *		A sleeping waiter holds no lock: an attempt that fails gives back
 *		every lock it took, so that it holds up neither DDL on the lease
 *		table nor the calls that would queue behind that DDL.
 *
 *		The sleep is the condition variable's: interruptible, so query
 *		cancel, statement_timeout and pg_terminate_backend end it, and
 *		transaction abort and backend exit take the sleeper off the list.
 *		A waiter whose client has gone takes no lease: it looks at the
 *		connection every second while it sleeps, after each wake-up, and
 *		once it has the lease, before its transaction commits, and ends
 *		the backend as PostgreSQL does when the client has gone.
 *
 *		The wake-ups a transaction owes are queued by the lease core and
 *		broadcast at its end by wakeup.c.
 *
 *		A waiter with preempt => true that finds the lease held by a term
 *		of lower priority than its own asks the worker, once per term, to
 *		ask the holder to step down to it (the worker writes the request:
 *		this transaction stays open while it waits).
 *
 *		Without shared_preload_libraries there is no shared memory: then
 *		hoplock_wait polls with exponential backoff, and says so once per
 *		session.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "candidates.h"
#include "compat.h"
#include "hoplock.h"
#include "lease.h"
#include "shmem.h"
#include "slots.h"
#include "wait.h"

#include "access/xact.h"
#include "common/int.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#define POLL_FIRST_MS	10
#define POLL_MAX_MS		1000
/* Cap on a sleep when the lease was free but could not be had */
#define SLEEP_MAX_MS	1000
/* Sleep while the lease table is locked by maintenance */
#define BUSY_SLEEP_MS	10
/* Look at the client this often while sleeping */
#define CLIENT_CHECK_MS	1000

static bool polling_notice_given = false;

/*
 * End the backend, as PostgreSQL ends one whose client went
 * (client_connection_check_interval, whether set or not), if its client
 * has gone: FATAL "connection to client lost", the transaction aborted.
 */
static void
check_client(void)
{
	if (!hl_client_gone())
		return;
	ClientConnectionLost = true;
	InterruptPending = true;
	CHECK_FOR_INTERRUPTS();
	/* interrupts held off: end the call at least */
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("connection to client lost")));
}

/*
 * Sleep on "cv" (prepared) until it is broadcast, or "until".  Every
 * CLIENT_CHECK_MS meanwhile, look at the client, and sleep on: that is no
 * wake-up, and costs one poll of the socket.
 */
static void
sleep_on(ConditionVariable *cv, TimestampTz until)
{
	for (;;)
	{
		long		ms = Min(hl_ms_until(GetCurrentTimestamp(), until),
							 CLIENT_CHECK_MS);

		if (!ConditionVariableTimedSleep(cv, ms, PG_WAIT_EXTENSION))
		{
			hl_count(HL_COUNT_WAKEUPS);
			return;
		}
		if (GetCurrentTimestamp() >= until)
			return;
		check_client();

		/*
		 * The check may have reset the latch (pq_check_connection does),
		 * which a broadcast since the sleep timed out had set: set it again,
		 * and the sleep finds out at once whether one came (if none did, it
		 * sleeps on without returning).
		 */
		SetLatch(MyLatch);
	}
}

/*
 * The loop of hl_lease_wait, sleeping on "cv" (NULL: polling).
 */
static bool
wait_loop(LeaseRequest *req, TimestampTz deadline, ConditionVariable *cv,
		  Lease *result)
{
	MemoryContext loop_context;
	MemoryContext old;
	long		poll_ms = POLL_FIRST_MS;
	bool		acquired = false;
	bool		waited = false;
	int64		preempted = 0;	/* the term asked to step down, if any */

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

		/* woken: is there still someone to take the lease for? */
		if (waited)
			check_client();

		/* ready to sleep before looking, or a wake-up could be missed */
		if (cv != NULL)
			ConditionVariablePrepareToSleep(cv);

		MemoryContextReset(loop_context);
		old = MemoryContextSwitchTo(loop_context);
		outcome = hl_slots_cas(req, &seen, &found);
		MemoryContextSwitchTo(old);
		if (outcome == LEASE_DONE)
		{
			/*
			 * The term begins when this transaction commits: not for a
			 * client that has gone meanwhile (the check ends the
			 * transaction, and the backend).
			 */
			check_client();

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

		if (req->preempt && found && hl_lease_is_held(&seen, now) &&
			seen.priority < req->priority && seen.generation != preempted)
		{
			hl_post_preempt(req->name);
			preempted = seen.generation;
		}

		/*
		 * Held by another: sleep until its term lapses, unless woken before
		 * (a release, an announced expiry, a renewal moving the expiry
		 * earlier).  Kept by the hold of a term released early: until the
		 * hold is over, unless woken before (its end announced, or forced).
		 * Free but not to be had (a term change or a fence in flight): until
		 * it is woken, or a second at most.  Nothing seen: the table was
		 * locked, and nobody will say when not.
		 */
		wake = deadline;
		if (found && hl_lease_is_held(&seen, now))
			wake = Min(wake, seen.expires_at);
		else if (found && hl_lease_in_hold(&seen, now))
			wake = Min(wake, seen.hold_until);
		ms = hl_ms_until(now, wake);
		if (!found && outcome == LEASE_CONTENDED)
			ms = Min(ms, BUSY_SLEEP_MS);
		else if (!(found && (hl_lease_is_held(&seen, now) ||
							 hl_lease_in_hold(&seen, now))))
			ms = Min(ms, SLEEP_MAX_MS);

		if (!waited)
		{
			hl_count(HL_COUNT_WAITS);
			waited = true;
		}
		if (cv != NULL)
			sleep_on(cv, TimestampTzPlusMilliseconds(now, ms));
		else
		{
			/* at most POLL_MAX_MS, so the client is looked at as often */
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(ms, poll_ms), PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
			poll_ms = Min(poll_ms * 2, POLL_MAX_MS);
		}
		CHECK_FOR_INTERRUPTS();
	}

	MemoryContextDelete(loop_context);
	return acquired;
}

/*
 * The condition variable to sleep on for lease "name", this backend
 * entered among its waiters; NULL to poll.
 */
static ConditionVariable *
start_waiting(text *name)
{
	HlWaitKey	key;
	ConditionVariable *cv;

	if (hl_shared == NULL)
	{
		if (!polling_notice_given)
		{
			ereport(NOTICE,
					(errmsg("hoplock_wait is polling for lease changes"),
					 errdetail("hoplock is not in shared_preload_libraries, so it cannot be woken when the lease is released."),
					 errhint("Add hoplock to shared_preload_libraries and restart the server.")));
			polling_notice_given = true;
		}
		return NULL;
	}
	hl_wait_key(name, &key);
	cv = hl_wait_register(&key);
	/* none: the table of names waited for is full; poll, then */
	if (cv == NULL)
		elog(DEBUG1, "hoplock_wait is polling for lease \"%s\"",
			 text_to_cstring(name));
	return cv;
}

/*
 * Try the acquire; if it fails, sleep until the lease may be free, or the
 * deadline.  Returns true with *result when the lease was acquired.
 *
 * The waiter sleeps on the condition variable of its lease's name, which
 * it enters for the call, and leaves however the call ends: an error
 * here, a FATAL at exit (shmem.c).
 *
 * A waiter whose client has gone takes no lease: it looks at the
 * connection at least every CLIENT_CHECK_MS while it sleeps, after every
 * sleep, and once more when it has the lease, before the term can begin
 * (at commit); if the client has gone it ends like a backend with
 * client_connection_check_interval set.  (PostgreSQL 13 has no such
 * check: see hl_client_gone.)
 */
bool
hl_lease_wait(LeaseRequest *req, int64 timeout, Lease *result)
{
	TimestampTz deadline;
	ConditionVariable *volatile cv;
	volatile bool acquired = false;

	req->busy_is_contention = true;
	deadline = GetCurrentTimestamp();
	if (pg_add_s64_overflow(deadline, timeout, &deadline) ||
		!IS_VALID_TIMESTAMP(deadline))
		deadline = DT_NOEND;

	cv = start_waiting(req->name);
	PG_TRY();
	{
		/* a candidate from now on: a freed lease goes to the first */
		hl_candidate_enter(req->name, req->owner, req->priority, req->ttl,
						   req->min_hold,
						   req->session_bound, req->value, req->preempt,
						   Max(req->slots, 1));
		acquired = wait_loop(req, deadline, cv, result);
	}
	PG_FINALLY();
	{
		hl_wait_unregister();
		hl_candidate_leave(acquired);
	}
	PG_END_TRY();
	return acquired;
}
