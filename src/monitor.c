/*-------------------------------------------------------------------------
 *
 * monitor.c
 *		The SQL-callable functions behind the views operators look at:
 *		hoplock_workers (the expiry workers, from shared memory) and the
 *		blocked_by column of hoplock_leases (who holds a lease up); and the
 *		one the install script calls to have this database served.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"
#include "shmem.h"

#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(hoplock_serve_this_database);
PG_FUNCTION_INFO_V1(hoplock_worker_status);
PG_FUNCTION_INFO_V1(hoplock_blocker);

/*
 * hoplock_internal.serve_this_database(): called by the install script, so
 * that the launcher starts this database's worker once CREATE EXTENSION
 * commits.
 */
Datum
hoplock_serve_this_database(PG_FUNCTION_ARGS)
{
	hl_wake_launcher_at_commit();
	PG_RETURN_VOID();
}

/*
 * hoplock_internal.blocker(name): the pid of a session holding the lease up
 * -- an open fence, or an uncommitted change --, or NULL.
 */
Datum
hoplock_blocker(PG_FUNCTION_ARGS)
{
	HlBlockerKind kind;
	int			pid = hl_lease_blocker(PG_GETARG_TEXT_PP(0), &kind);

	if (pid == 0)
		PG_RETURN_NULL();
	PG_RETURN_INT32(pid);
}

static const char *
worker_state_name(HlWorkerState state)
{
	switch (state)
	{
		case WORKER_FREE:
			return "free";
		case WORKER_STARTING:
			return "starting";
		case WORKER_SCANNING:
			return "scanning";
		case WORKER_ANNOUNCING:
			return "announcing";
		case WORKER_SLEEPING:
			return "sleeping";
		case WORKER_FAILING:
			return "failing";
		case WORKER_ABSENT:
			return "absent";
		case WORKER_STOPPED:
			return "stopped";
	}
	return "unknown";
}

/* Columns of hoplock_internal.worker_status() */
enum
{
	WS_DATID,
	WS_DATNAME,
	WS_PID,
	WS_STATE,
	WS_TRACKED,
	WS_NEXT_EXPIRY,
	WS_LAST_WAKEUP,
	WS_ANNOUNCED,
	WS_LAST_LAG,
	WS_STARTED_AT,
	WS_NCOLUMNS
};

static Datum
interval_datum(int64 usecs)
{
	Interval   *interval = palloc0(sizeof(Interval));

	interval->time = usecs;
	return IntervalPGetDatum(interval);
}

/* A timestamp column, NULL when 0 (never) */
static void
set_timestamp(Datum *values, bool *nulls, int col, TimestampTz ts)
{
	values[col] = TimestampTzGetDatum(ts);
	nulls[col] = (ts == 0);
}

/*
 * hoplock_internal.worker_status(): one row per database a worker serves,
 * for the view hoplock_workers.
 */
Datum
hoplock_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (hl_shared == NULL)
		PG_RETURN_VOID();

	for (int i = 0; i < hl_shared->nslots; i++)
	{
		HlDbSlot   *slot = &hl_shared->slots[i];
		Oid			dboid;
		HlWorkerState state;
		pid_t		pid;
		HlWorkerStats stats;
		Datum		values[WS_NCOLUMNS];
		bool		nulls[WS_NCOLUMNS];
		char	   *dbname;

		LWLockAcquire(slot->lock, LW_SHARED);
		dboid = slot->dboid;
		state = slot->state;
		pid = slot->pid;
		stats = slot->stats;
		LWLockRelease(slot->lock);
		if (!OidIsValid(dboid) || state == WORKER_ABSENT)
			continue;

		memset(nulls, false, sizeof(nulls));
		dbname = get_database_name(dboid);
		values[WS_DATID] = ObjectIdGetDatum(dboid);
		values[WS_DATNAME] = dbname ? CStringGetTextDatum(dbname) : (Datum) 0;
		nulls[WS_DATNAME] = (dbname == NULL);
		values[WS_PID] = Int32GetDatum(pid);
		nulls[WS_PID] = (pid == 0);
		values[WS_STATE] = CStringGetTextDatum(worker_state_name(state));
		values[WS_TRACKED] = Int64GetDatum(stats.tracked);
		set_timestamp(values, nulls, WS_NEXT_EXPIRY, stats.next_expiry);
		set_timestamp(values, nulls, WS_LAST_WAKEUP, stats.last_wakeup);
		values[WS_ANNOUNCED] = Int64GetDatum(stats.announced);
		values[WS_LAST_LAG] = interval_datum(stats.last_lag);
		nulls[WS_LAST_LAG] = (stats.announced == 0);
		set_timestamp(values, nulls, WS_STARTED_AT, stats.started_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
