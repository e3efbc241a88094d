/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The expiry worker: one background worker per database that has
 *		hoplock, started by the launcher.  It sleeps until the next
 *		deadline, then, for each lease due, reads the row and either
 *		announces the lapsed term ("expired", through the same
 *		compare-and-swap as every call) or, if the term was renewed,
 *		schedules it again at its new expiry.  It also ends the
 *		session-bound terms of sessions that are gone.
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
 *		The mailbox is read before each round's snapshot is taken: a
 *		message is posted after its transaction committed, so the round
 *		sees every term it was told of, even when it rescans.
 *
 *		Work is done in short transactions, at most BATCH leases each.
 *		The loop is worker_spi's: latch, SIGHUP reload, SIGTERM exits
 *		cleanly (code 0: not restarted by the postmaster; the launcher
 *		decides), an ERROR exits with code 1 and the postmaster restarts
 *		it after bgw_restart_time.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"
#include "schedule.h"

#include "access/xact.h"
#include "commands/async.h"
#include "commands/dbcommands.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/guc.h"
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

static HoplockDbSlot *my_slot;
static HoplockWorkerArg my_arg;
static char *my_dbname;
static Schedule *schedule;
static List *session_ends = NIL;	/* of SessionEnd, in TopMemoryContext */
static bool need_scan = true;

/* Is this slot still ours (the launcher may have given it to a successor)? */
static bool
slot_is_mine(void)
{
	return my_slot->dboid == my_arg.dboid &&
		my_slot->generation == my_arg.generation;
}

static void
set_state(HoplockWorkerState state)
{
	SpinLockAcquire(&my_slot->mutex);
	if (slot_is_mine())
		my_slot->state = state;
	SpinLockRelease(&my_slot->mutex);
}

static bool
stop_requested(void)
{
	HoplockStopReason stop;

	SpinLockAcquire(&my_slot->mutex);
	stop = slot_is_mine() ? my_slot->stop : STOP_NOT_WANTED;
	SpinLockRelease(&my_slot->mutex);
	return stop != STOP_NONE || ShutdownRequestPending;
}

static void
detach(int code, Datum arg)
{
	SpinLockAcquire(&my_slot->mutex);
	if (slot_is_mine() && my_slot->pid == MyProcPid)
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
	MemoryContext old;
	SessionEnd *end;
	ListCell   *lc;

	foreach(lc, session_ends)
	{
		end = (SessionEnd *) lfirst(lc);
		if (end->pid == pid && end->start == start &&
			VARSIZE_ANY_EXHDR(end->name) == namelen &&
			memcmp(VARDATA_ANY(end->name), name, namelen) == 0)
			return;
	}

	old = MemoryContextSwitchTo(TopMemoryContext);
	end = palloc(sizeof(SessionEnd));
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
	int64		rows;
	bool		stopped;
} FullScan;

static bool
scan_row(const Lease *lease, void *arg)
{
	FullScan   *scan = (FullScan *) arg;

	/* DROP DATABASE waits only 5 s for us: look up now and then */
	if (++scan->rows % 1000 == 0 && stop_requested())
	{
		scan->stopped = true;
		return false;
	}

	if (lease->state != LEASE_STATE_HELD)
		return true;

	/* no hoplock function writes such a name: the table was written to */
	if (VARSIZE_ANY_EXHDR(lease->name) > HOPLOCK_MAX_NAME_BYTES)
		return true;

	/* a term bound to a session that is gone */
	if (lease->session_pid != 0 &&
		!hoplock_session_alive(lease->session_pid, lease->session_start))
		remember_session_end(VARDATA_ANY(lease->name),
							 VARSIZE_ANY_EXHDR(lease->name),
							 lease->session_pid, lease->session_start);

	/* the schedule keeps the earliest, whatever order the rows come in */
	schedule_add(schedule, VARDATA_ANY(lease->name),
				 VARSIZE_ANY_EXHDR(lease->name), lease->expires_at);
	return true;
}

/* Read the whole table into a fresh schedule. */
static void
full_scan(void)
{
	FullScan	scan;

	set_state(WORKER_SCANNING);
	schedule_reset(schedule, hoplock_max_tracked);
	memset(&scan, 0, sizeof(scan));
	lease_scan(scan_row, &scan);
	need_scan = scan.stopped;
}

/* ---------------------------------------------------------------------
 * One round: read the mailbox, look at what is due
 * ---------------------------------------------------------------------
 */

/*
 * Take every message from the mailbox into "msgs" (palloc'd in the current
 * context); returns how many.
 */
static int
read_mailbox(HoplockMessage **msgs)
{
	HoplockMessage msg;
	bool		overflowed = false;
	int			n = 0;
	int			max = 16;

	*msgs = palloc(max * sizeof(HoplockMessage));
	while (hoplock_take(my_slot, &msg, &overflowed))
	{
		if (n == max)
		{
			max *= 2;
			*msgs = repalloc(*msgs, max * sizeof(HoplockMessage));
		}
		(*msgs)[n++] = msg;
	}
	if (overflowed)
		need_scan = true;
	return n;
}

static void
apply_messages(HoplockMessage *msgs, int n)
{
	for (int i = 0; i < n; i++)
	{
		if (msgs[i].kind == HOPLOCK_MSG_DEADLINE)
			schedule_add(schedule, msgs[i].name, msgs[i].namelen,
						 msgs[i].expires_at);
		else
			remember_session_end(msgs[i].name, msgs[i].namelen,
								 msgs[i].session_pid, msgs[i].session_start);
	}
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
	else if (outcome == LEASE_CONTENDED)
	{
		/* being changed right now, or the table is locked: look again */
		schedule_add(schedule, name, namelen,
					 GetCurrentTimestamp() + RETRY_DELAY_US);
	}
	else if (found && result.state == LEASE_STATE_HELD)
		schedule_add(schedule, name, namelen, result.expires_at);
}

/* End the terms of sessions that ended; keep those still contended. */
static void
end_sessions(void)
{
	List	   *left = NIL;
	ListCell   *lc;
	int			n = 0;
	MemoryContext old;

	foreach(lc, session_ends)
	{
		SessionEnd *end = (SessionEnd *) lfirst(lc);
		LeaseRequest req = {0};
		Lease		result;
		bool		found;
		bool		keep = true;

		if (n++ < BATCH)
		{
			req.op = LEASE_OP_SESSION_END;
			req.fn = "hoplock worker";
			req.name = end->name;
			req.session_pid = end->pid;
			req.session_start = end->start;
			keep = (lease_cas(&req, &result, &found) == LEASE_CONTENDED);
		}
		old = MemoryContextSwitchTo(TopMemoryContext);
		if (keep)
			left = lappend(left, end);
		else
		{
			pfree(end->name);
			pfree(end);
		}
		MemoryContextSwitchTo(old);
	}
	list_free(session_ends);
	session_ends = left;
}

/* Should the table be read again now? */
static bool
horizon_reached(TimestampTz now)
{
	TimestampTz horizon = schedule_horizon(schedule);
	TimestampTz next;

	/*
	 * Only once everything up to the horizon is done: leases due exactly at
	 * the horizon may share it with some that were left out, and a rescan
	 * before they are done would only find them again.
	 */
	return horizon <= now &&
		(!schedule_next(schedule, &next) || next > horizon);
}

/*
 * One transaction's worth of work.  Returns true if more is due right now;
 * sets *gone if the extension is no longer installed.
 */
static bool
run_once(bool *gone)
{
	MemoryContext round_context;
	MemoryContext old;
	HoplockMessage *msgs;
	int			nmsgs;
	TimestampTz now;
	int			n = 0;
	int64		announced = 0;
	int64		lag = -1;
	char		name[HOPLOCK_MAX_NAME_BYTES + 1];
	int			namelen;
	TimestampTz when;
	bool		more = false;

	round_context = AllocSetContextCreate(TopMemoryContext, "hoplock round",
										  ALLOCSET_DEFAULT_SIZES);
	old = MemoryContextSwitchTo(round_context);
	nmsgs = read_mailbox(&msgs);
	MemoryContextSwitchTo(old);

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "announcing lease expiries");

	if (!lease_table_exists())
		*gone = true;
	else
	{
		if (need_scan || horizon_reached(GetCurrentTimestamp()))
			full_scan();
		apply_messages(msgs, nmsgs);

		set_state(WORKER_ANNOUNCING);
		now = GetCurrentTimestamp();
		while (n < BATCH && !stop_requested() &&
			   schedule_take_due(schedule, now, name, &namelen, &when))
		{
			look_at(name, namelen, &announced, &lag);
			n++;
		}
		more = (n == BATCH);
		if (session_ends != NIL)
			end_sessions();
	}

	PopActiveSnapshot();
	CommitTransactionCommand();
	hoplock_notify_after_commit();
	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(false);
	MemoryContextDelete(round_context);

	SpinLockAcquire(&my_slot->mutex);
	if (slot_is_mine())
	{
		my_slot->announced += announced;
		if (lag >= 0)
			my_slot->last_lag = lag;
		my_slot->tracked = schedule_count(schedule);
	}
	SpinLockRelease(&my_slot->mutex);
	return more || list_length(session_ends) > BATCH;
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

	if (wake > now)
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 ms_until(now, wake), PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
}

void
hoplock_worker_main(Datum arg)
{
	bool		gone = false;
	bool		mine;

	memcpy(&my_arg, MyBgworkerEntry->bgw_extra, sizeof(HoplockWorkerArg));

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();

	if (hoplock_shared == NULL || DatumGetInt32(arg) < 0 ||
		DatumGetInt32(arg) >= hoplock_shared->nslots)
		proc_exit(0);
	my_slot = &hoplock_shared->slots[DatumGetInt32(arg)];

	/* an earlier worker of this slot, restarted after the slot moved on */
	SpinLockAcquire(&my_slot->mutex);
	mine = slot_is_mine();
	SpinLockRelease(&my_slot->mutex);
	if (!mine)
		proc_exit(0);

	BackgroundWorkerInitializeConnectionByOid(my_arg.dboid, InvalidOid, 0);

	/*
	 * The worker writes whatever the database's defaults say, like
	 * autovacuum: a read-only or serializable default would only make it
	 * fail and restart every second.
	 */
	SetConfigOption("default_transaction_read_only", "off",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);

	SpinLockAcquire(&my_slot->mutex);
	if (slot_is_mine())
	{
		my_slot->pid = MyProcPid;
		my_slot->latch = MyLatch;
		my_slot->state = WORKER_STARTING;
		my_slot->started_at = GetCurrentTimestamp();
		my_slot->next_wakeup = 0;
	}
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
		if (slot_is_mine())
		{
			my_slot->state = WORKER_ABSENT;
			my_slot->pid = 0;
			my_slot->latch = NULL;
		}
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
		if (ConfigReloadPending)
		{
			int			old_max = hoplock_max_tracked;

			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			if (hoplock_max_tracked != old_max)
				need_scan = true;
		}
		if (stop_requested())
			break;

		SpinLockAcquire(&my_slot->mutex);
		my_slot->next_wakeup = 0;	/* awake: no need to wake us */
		my_slot->last_wakeup = GetCurrentTimestamp();
		SpinLockRelease(&my_slot->mutex);

		if (run_once(&gone))
			continue;
		if (gone)
			break;
		sleep_until_due();
	}

	set_state(WORKER_STOPPED);
	proc_exit(0);
}
