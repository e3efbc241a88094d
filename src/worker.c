/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The expiry worker: one background worker per database that has
 *		hoplock, started by the launcher.  It sleeps until the next
 *		deadline, then, for each lease due, reads the row and either
 *		announces the lapsed term ("expired", through the same
 *		compare-and-swap as every call) or, if the term was renewed,
 *		schedules it again at its new expiry.
 *
 *		Deadlines come from backends through the slot's mailbox (see
 *		shmem.c): a new term, or a renewal that moves the expiry earlier,
 *		posts one at commit and wakes the worker if it would otherwise
 *		sleep past it.  Renewals that move it later post nothing; the worker
 *		finds out when it looks.  The whole table is read at start (which
 *		also announces terms that lapsed while the server was down), when
 *		the mailbox overflowed, and when the schedule reaches its horizon.
 *		No index on expires_at is needed, so renewals stay HOT.
 *
 *		Work is done in short transactions, at most BATCH leases each.
 *		The loop is worker_spi's: latch, SIGHUP reload, SIGTERM exits
 *		cleanly (code 0: not restarted), an ERROR exits with code 1 and the
 *		postmaster restarts it after bgw_restart_time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"
#include "schedule.h"

#include "access/xact.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* Leases looked at per transaction */
#define BATCH 500

/* A lease being changed right now is looked at again this much later */
#define RETRY_DELAY_US	(10 * 1000)

/* A session that ended without ending its bound term */
typedef struct SessionEnd
{
	text	   *name;
	int32		pid;
	TimestampTz start;
} SessionEnd;

static int	my_slotno;
static HoplockDbSlot *my_slot;
static char *my_dbname;
static Schedule *schedule;
static List *session_ends = NIL;	/* of SessionEnd, in TopMemoryContext */
static bool need_scan = true;

static void
set_state(HoplockWorkerState state)
{
	SpinLockAcquire(&my_slot->mutex);
	my_slot->state = state;
	SpinLockRelease(&my_slot->mutex);
}

static void
detach(int code, Datum arg)
{
	SpinLockAcquire(&my_slot->mutex);
	if (my_slot->pid == MyProcPid)
	{
		my_slot->pid = 0;
		my_slot->latch = NULL;
		my_slot->next_wakeup = 0;
	}
	SpinLockRelease(&my_slot->mutex);
	ereport(LOG,
			(errmsg("hoplock worker for database \"%s\" stopped", my_dbname)));
}

static void
remember_session_end(const char *name, int namelen, int32 pid,
					 TimestampTz start)
{
	MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);
	SessionEnd *end = palloc(sizeof(SessionEnd));

	end->name = cstring_to_text_with_len(name, namelen);
	end->pid = pid;
	end->start = start;
	session_ends = lappend(session_ends, end);
	MemoryContextSwitchTo(old);
}

/* ---------------------------------------------------------------------
 * The full scan
 * ---------------------------------------------------------------------
 */
typedef struct FullScan
{
	TimestampTz sessions_before;	/* sessions older than this are gone */
	TimestampTz horizon;		/* second pass: only deadlines before this */
	int64		count;			/* terms seen */
	int64		ndeadlines;
	int64		maxdeadlines;
	TimestampTz *deadlines;		/* first pass: every deadline */
} FullScan;

static void
scan_row(const Lease *lease, void *arg)
{
	FullScan  *state = (FullScan *) arg;

	if (lease->state != LEASE_STATE_HELD)
		return;

	/* a term bound to a session that no longer exists */
	if (state->deadlines != NULL && lease->session_pid != 0 &&
		lease->session_start < state->sessions_before)
		remember_session_end(VARDATA_ANY(lease->name),
							 VARSIZE_ANY_EXHDR(lease->name),
							 lease->session_pid, lease->session_start);

	if (lease->expires_at >= state->horizon)
		return;
	schedule_add(schedule, VARDATA_ANY(lease->name),
				 VARSIZE_ANY_EXHDR(lease->name), lease->expires_at);

	if (state->deadlines != NULL)
	{
		if (state->ndeadlines == state->maxdeadlines)
		{
			state->maxdeadlines *= 2;
			state->deadlines = repalloc_huge(state->deadlines,
											 state->maxdeadlines * sizeof(TimestampTz));
		}
		state->deadlines[state->ndeadlines++] = lease->expires_at;
	}
}

static int
compare_timestamps(const void *a, const void *b)
{
	TimestampTz ta = *(const TimestampTz *) a;
	TimestampTz tb = *(const TimestampTz *) b;

	return (ta > tb) - (ta < tb);
}

/*
 * Read the whole table into the schedule.  If there are more running terms
 * than the schedule holds, keep the earliest ones: a second pass takes
 * those before the horizon, the capacity-th deadline.
 */
static void
full_scan(void)
{
	FullScan	state;

	set_state(WORKER_SCANNING);
	schedule_reset(schedule, hoplock_max_tracked);

	memset(&state, 0, sizeof(state));
	state.sessions_before = hoplock_shared->init_time;
	state.horizon = DT_NOEND;
	state.maxdeadlines = 1024;
	state.deadlines = palloc(state.maxdeadlines * sizeof(TimestampTz));
	lease_scan(scan_row, &state);

	if (state.ndeadlines > hoplock_max_tracked)
	{
		qsort(state.deadlines, state.ndeadlines, sizeof(TimestampTz),
			  compare_timestamps);
		state.horizon = state.deadlines[hoplock_max_tracked - 1];
		schedule_reset(schedule, hoplock_max_tracked);
		schedule_set_horizon(schedule, state.horizon);
		pfree(state.deadlines);
		state.deadlines = NULL;
		lease_scan(scan_row, &state);
	}
	else
		pfree(state.deadlines);
	need_scan = false;
}

/* ---------------------------------------------------------------------
 * One round: read the mailbox, look at what is due
 * ---------------------------------------------------------------------
 */
static void
read_mailbox(void)
{
	HoplockMessage msg;
	bool		overflowed = false;

	while (hoplock_take(my_slot, &msg, &overflowed))
	{
		if (msg.kind == HOPLOCK_MSG_DEADLINE)
			schedule_add(schedule, msg.name, msg.namelen, msg.expires_at);
		else
			remember_session_end(msg.name, msg.namelen, msg.session_pid,
								 msg.session_start);
	}
	if (overflowed)
		need_scan = true;
}

/* Announce one lease if its term lapsed; otherwise schedule it again. */
static void
look_at(const char *name, int namelen, int64 *announced, int64 *lag)
{
	LeaseRequest req = {0};
	Lease		result;
	bool		found;
	LeaseOutcome outcome;

	req.op = LEASE_OP_EXPIRE;
	req.fn = "hoplock worker";
	req.name = cstring_to_text_with_len(name, namelen);
	outcome = lease_cas(&req, &result, &found);

	if (outcome == LEASE_DONE)
	{
		(*announced)++;
		*lag = GetCurrentTimestamp() - result.expires_at;
	}
	else if (found && result.state == LEASE_STATE_HELD)
	{
		if (outcome == LEASE_CONTENDED)
			schedule_add(schedule, name, namelen,
						 GetCurrentTimestamp() + RETRY_DELAY_US);
		else
			schedule_add(schedule, name, namelen, result.expires_at);
	}
}

/* End the terms of sessions that ended; keep those still contended. */
static void
end_sessions(void)
{
	List	   *left = NIL;
	ListCell   *lc;
	int			n = 0;

	foreach(lc, session_ends)
	{
		SessionEnd *end = (SessionEnd *) lfirst(lc);
		LeaseRequest req = {0};
		Lease		result;
		bool		found;

		if (n++ >= BATCH)
		{
			left = lappend(left, end);
			continue;
		}
		req.op = LEASE_OP_SESSION_END;
		req.fn = "hoplock worker";
		req.name = end->name;
		req.session_pid = end->pid;
		req.session_start = end->start;
		if (lease_cas(&req, &result, &found) == LEASE_CONTENDED)
		{
			MemoryContext old = MemoryContextSwitchTo(TopMemoryContext);

			left = lappend(left, end);
			MemoryContextSwitchTo(old);
		}
	}
	session_ends = left;
}

/*
 * One transaction's worth of work.  Returns true if more is due right now;
 * sets *gone if the extension is no longer installed.
 */
static bool
run_once(bool *gone)
{
	TimestampTz now;
	int			n = 0;
	int64		announced = 0;
	int64		lag = -1;
	char		name[HOPLOCK_MAX_NAME_BYTES + 1];
	int			namelen;
	TimestampTz when;
	bool		more = false;

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "announcing lease expiries");

	if (!lease_table_exists())
		*gone = true;
	else
	{
		read_mailbox();
		now = GetCurrentTimestamp();
		if (schedule_horizon(schedule) <= now)
			need_scan = true;
		if (need_scan)
			full_scan();

		set_state(WORKER_ANNOUNCING);
		now = GetCurrentTimestamp();
		while (n < BATCH &&
			   schedule_take_due(schedule, now, name, &namelen, &when))
		{
			look_at(name, namelen, &announced, &lag);
			n++;
		}
		more = (n == BATCH);
		if (session_ends != NIL)
		{
			end_sessions();
			more = more || list_length(session_ends) > BATCH;
		}
	}

	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(false);

	SpinLockAcquire(&my_slot->mutex);
	my_slot->announced += announced;
	if (lag >= 0)
		my_slot->last_lag = lag;
	my_slot->tracked = schedule_count(schedule);
	SpinLockRelease(&my_slot->mutex);
	return more;
}

/*
 * Sleep until the next deadline, the horizon, or hoplock.naptime, unless
 * the mailbox has something first.
 */
static void
sleep_until_due(void)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz wake = now + (int64) hoplock_naptime * USECS_PER_SEC;
	TimestampTz next;
	bool		has_next = schedule_next(schedule, &next);
	int64		us;

	if (has_next)
		wake = Min(wake, next);
	wake = Min(wake, schedule_horizon(schedule));
	if (session_ends != NIL)
		wake = Min(wake, now + RETRY_DELAY_US);

	SpinLockAcquire(&my_slot->mutex);
	if (my_slot->head != my_slot->tail || my_slot->overflowed)
	{
		/* something arrived since we last looked: look again first */
		SpinLockRelease(&my_slot->mutex);
		return;
	}
	my_slot->next_wakeup = wake;
	my_slot->next_expiry = has_next ? next : 0;
	my_slot->state = WORKER_SLEEPING;
	SpinLockRelease(&my_slot->mutex);

	us = wake - now;
	if (us > 0)
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 (long) Min((us + 999) / 1000, (int64) INT_MAX),
						 PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}

void
hoplock_worker_main(Datum arg)
{
	Oid			dboid;
	bool		gone = false;
	HoplockStopReason stop = STOP_NONE;

	my_slotno = DatumGetInt32(arg);
	memcpy(&dboid, MyBgworkerEntry->bgw_extra, sizeof(Oid));

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	if (hoplock_shared == NULL || my_slotno < 0 ||
		my_slotno >= hoplock_shared->nslots)
		proc_exit(0);
	my_slot = &hoplock_shared->slots[my_slotno];
	if (my_slot->dboid != dboid)
		proc_exit(0);			/* the launcher gave the slot away */

	BackgroundWorkerInitializeConnectionByOid(dboid, InvalidOid, 0);

	SpinLockAcquire(&my_slot->mutex);
	my_slot->pid = MyProcPid;
	my_slot->latch = MyLatch;
	my_slot->state = WORKER_STARTING;
	my_slot->started_at = GetCurrentTimestamp();
	my_slot->next_wakeup = 0;
	SpinLockRelease(&my_slot->mutex);

	/* a database without the extension: leave quietly, the launcher notes it */
	StartTransactionCommand();
	gone = !lease_table_exists();
	my_dbname = MemoryContextStrdup(TopMemoryContext,
									get_database_name(MyDatabaseId));
	CommitTransactionCommand();
	if (gone)
	{
		ereport(DEBUG1,
				(errmsg_internal("hoplock is not installed in database \"%s\"",
								 my_dbname)));
		SpinLockAcquire(&my_slot->mutex);
		my_slot->state = WORKER_ABSENT;
		my_slot->pid = 0;
		my_slot->latch = NULL;
		SpinLockRelease(&my_slot->mutex);
		proc_exit(0);
	}

	before_shmem_exit(detach, (Datum) 0);
	ereport(LOG,
			(errmsg("hoplock worker for database \"%s\" started", my_dbname)));

	schedule = schedule_create(TopMemoryContext, hoplock_max_tracked);

	for (;;)
	{
		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			break;
		if (ConfigReloadPending)
		{
			int			old_max = hoplock_max_tracked;

			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (hoplock_max_tracked != old_max)
				need_scan = true;
		}

		SpinLockAcquire(&my_slot->mutex);
		stop = my_slot->stop;
		my_slot->next_wakeup = 0;	/* awake: no need to wake us */
		my_slot->last_wakeup = GetCurrentTimestamp();
		SpinLockRelease(&my_slot->mutex);
		if (stop != STOP_NONE)
			break;

		if (run_once(&gone))
			continue;
		if (gone)
			break;
		sleep_until_due();
	}

	set_state(gone || stop == STOP_EXTENSION_DROPPED ? WORKER_ABSENT : WORKER_STOPPED);
	proc_exit(0);
}
