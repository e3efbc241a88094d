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

#include "candidates.h"
#include "compat.h"
#include "lease.h"
#include "refusals.h"
#include "shmem.h"
#include "workers.h"

#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(hoplock_serve_this_database);
PG_FUNCTION_INFO_V1(hoplock_worker_status);
PG_FUNCTION_INFO_V1(hoplock_blocker);
PG_FUNCTION_INFO_V1(hoplock_stats);
PG_FUNCTION_INFO_V1(hoplock_refusals);
PG_FUNCTION_INFO_V1(hoplock_stats_reset);
PG_FUNCTION_INFO_V1(hoplock_candidates);

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
	WS_SESSIONS_ENDED,			/* 1.1.0 */
	WS_REASON,					/* 1.1.0 */
	WS_NCOLUMNS
};

/* Put a row of at most WS_NCOLUMNS values, as many as the SQL declares. */
static void
put_row(ReturnSetInfo *rsinfo, Datum *values, bool *nulls)
{
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
}

static const char *
stop_reason(HlStopReason stop)
{
	switch (stop)
	{
		case STOP_NONE:
			return NULL;
		case STOP_EXTENSION_DROPPED:
			return "the extension was dropped";
		case STOP_DATABASE_BUSY:
			return "a statement needs the database alone (DROP, RENAME, SET TABLESPACE, or a copy of it)";
		case STOP_NOT_WANTED:
			return "hoplock.databases does not list it";
	}
	return NULL;
}

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
 * and one per database the launcher would serve but cannot, with the
 * reason, for the view hoplock_workers.  The SQL of 1.0.0 declares the
 * first ten columns only.
 */
Datum
hoplock_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			ncolumns;

	hl_materialize_srf(fcinfo);
	if (hl_shared == NULL)
		PG_RETURN_VOID();
	ncolumns = rsinfo->setDesc->natts;
	if (ncolumns != WS_SESSIONS_ENDED && ncolumns != WS_NCOLUMNS)
		elog(ERROR, "hoplock_worker_status: unexpected %d columns", ncolumns);

	for (int i = 0; i < hl_shared->nslots; i++)
	{
		HlDbSlot   *slot = &hl_shared->slots[i];
		Oid			dboid;
		HlWorkerState state;
		HlStopReason stop;
		pid_t		pid;
		HlWorkerStats stats;
		Datum		values[WS_NCOLUMNS];
		bool		nulls[WS_NCOLUMNS];
		char	   *dbname;
		const char *reason;

		LWLockAcquire(slot->lock, LW_SHARED);
		dboid = slot->dboid;
		state = slot->state;
		stop = slot->stop;
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
		values[WS_SESSIONS_ENDED] = Int64GetDatum(stats.terminated);
		reason = state == WORKER_FAILING && stats.last_error[0] != '\0' ?
			stats.last_error : stop_reason(stop);
		values[WS_REASON] = reason ? CStringGetTextDatum(reason) : (Datum) 0;
		nulls[WS_REASON] = (reason == NULL);
		put_row(rsinfo, values, nulls);
	}

	/* databases without a worker, and why */
	if (ncolumns == WS_NCOLUMNS)
	{
		HlUnserved	unserved[HL_MAX_UNSERVED];
		int			n;

		LWLockAcquire(hl_shared->lock, LW_SHARED);
		n = hl_shared->nunserved;
		memcpy(unserved, hl_shared->unserved, n * sizeof(HlUnserved));
		LWLockRelease(hl_shared->lock);
		for (int i = 0; i < n; i++)
		{
			Datum		values[WS_NCOLUMNS];
			bool		nulls[WS_NCOLUMNS];
			char	   *dbname = get_database_name(unserved[i].dboid);

			memset(nulls, true, sizeof(nulls));
			values[WS_DATID] = ObjectIdGetDatum(unserved[i].dboid);
			nulls[WS_DATID] = false;
			if (dbname != NULL)
			{
				values[WS_DATNAME] = CStringGetTextDatum(dbname);
				nulls[WS_DATNAME] = false;
			}
			values[WS_STATE] = CStringGetTextDatum("unserved");
			nulls[WS_STATE] = false;
			values[WS_REASON] = CStringGetTextDatum(unserved[i].reason);
			nulls[WS_REASON] = false;
			put_row(rsinfo, values, nulls);
		}
	}
	PG_RETURN_VOID();
}

/* Columns of hoplock_internal.stats() */
enum
{
	ST_DATID,
	ST_DATNAME,
	ST_COUNTERS,				/* HL_NCOUNTERS of them */
	ST_STATS_RESET = ST_COUNTERS + HL_NCOUNTERS,
	ST_NCOLUMNS
};

/*
 * hoplock_internal.stats(): the counters of each database a worker serves
 * (they live in its slot), for the view hoplock_stats.
 */
Datum
hoplock_stats(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int			reset_column;

	hl_materialize_srf(fcinfo);
	if (hl_shared == NULL)
		PG_RETURN_VOID();

	/*
	 * stats_reset is the last column the SQL declares; the SQL of 1.1.0
	 * declares the first eight counters only, before it.
	 */
	reset_column = rsinfo->setDesc->natts - 1;
	if (reset_column <= ST_COUNTERS || reset_column > ST_STATS_RESET)
		elog(ERROR, "hoplock_internal.stats() is declared with %d columns",
			 rsinfo->setDesc->natts);
	for (int i = 0; i < hl_shared->nslots; i++)
	{
		HlDbSlot   *slot = &hl_shared->slots[i];
		Datum		values[ST_NCOLUMNS];
		bool		nulls[ST_NCOLUMNS] = {0};
		Oid			dboid;
		TimestampTz reset;
		char	   *dbname;

		LWLockAcquire(slot->lock, LW_SHARED);
		dboid = slot->dboid;
		reset = slot->stats_reset;
		for (int c = 0; ST_COUNTERS + c < reset_column; c++)
			values[ST_COUNTERS + c] =
				Int64GetDatum((int64) pg_atomic_read_u64(&slot->counters[c]));
		LWLockRelease(slot->lock);
		if (!OidIsValid(dboid))
			continue;
		dbname = get_database_name(dboid);
		values[ST_DATID] = ObjectIdGetDatum(dboid);
		values[ST_DATNAME] = dbname ? CStringGetTextDatum(dbname) : (Datum) 0;
		nulls[ST_DATNAME] = (dbname == NULL);
		set_timestamp(values, nulls, reset_column, reset);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}

/* hoplock_stats_reset(): zero this database's counters */
Datum
hoplock_stats_reset(PG_FUNCTION_ARGS)
{
	HlDbSlot   *slot = hl_slot_for(MyDatabaseId);

	if (slot == NULL)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("hoplock keeps no counters for database \"%s\"",
						get_database_name(MyDatabaseId)),
				 errdetail("Counters are kept for the databases an expiry worker serves."),
				 errhint("Add hoplock to shared_preload_libraries, and see hoplock_workers.")));
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (slot->dboid == MyDatabaseId)
	{
		for (int c = 0; c < HL_NCOUNTERS; c++)
			pg_atomic_write_u64(&slot->counters[c], 0);
		slot->stats_reset = GetCurrentTimestamp();
	}
	LWLockRelease(slot->lock);
	hl_refusals_reset();
	PG_RETURN_VOID();
}

/*
 * hoplock_internal.candidates(): the sessions waiting in hoplock_wait for
 * this database's leases, for the view hoplock_candidates.
 */
Datum
hoplock_candidates(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HlCandidateRow *rows;
	int			n;

	hl_materialize_srf(fcinfo);
	n = hl_candidates_list(&rows);
	for (int i = 0; i < n; i++)
	{
		Datum		values[6];
		bool		nulls[6] = {0};
		char	   *role = GetUserNameFromId(rows[i].roleid, true);

		values[0] = PointerGetDatum(rows[i].name);
		values[1] = PointerGetDatum(rows[i].owner);
		values[2] = Int32GetDatum(rows[i].priority);
		values[3] = TimestampTzGetDatum(rows[i].since);
		values[4] = Int32GetDatum(rows[i].pid);
		values[5] = role ? CStringGetTextDatum(role) : (Datum) 0;
		nulls[5] = (role == NULL);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}

/*
 * hoplock_internal.refusals(): the terms of this database's leases with
 * refused fences and fenced writes counted (refusals.c), for the views
 * hoplock_history and hoplock_leases.
 */
Datum
hoplock_refusals(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HlRefusalRow *rows;
	int			n;

	hl_materialize_srf(fcinfo);
	n = hl_refusals_list(&rows);
	for (int i = 0; i < n; i++)
	{
		Datum		values[6];
		bool		nulls[6] = {0};

		values[0] = PointerGetDatum(rows[i].name);
		values[1] = Int64GetDatum(rows[i].generation);
		values[2] = Int64GetDatum(rows[i].fences);
		values[3] = Int64GetDatum(rows[i].writes);
		values[4] = TimestampTzGetDatum(rows[i].first_at);
		values[5] = TimestampTzGetDatum(rows[i].last_at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
