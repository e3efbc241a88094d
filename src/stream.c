/*-------------------------------------------------------------------------
 *
 * stream.c
 *		Reading the event stream: hoplock_events (what is there after a
 *		number), hoplock_watch (the same, waiting for the first) and
 *		hoplock_position (where to resume from).
 *
 *		Every reader reads the log up to the horizon (events.c): the
 *		greatest number below which no transaction still running took one.
 *		Read before the snapshot, it makes a read complete: no event can
 *		appear later at or below the last number returned, so a client that
 *		resumes from it misses nothing.  A number a client resumes from must
 *		belong to this history (branch.c), and not be older than what the
 *		log still keeps: otherwise SQLSTATE HL001, so that the client reads
 *		the leases again instead of missing events silently.
 *
 *		hoplock_watch sleeps on its database's condition variable, which
 *		every transaction that took event numbers broadcasts when it ends
 *		(the horizon moves then); it holds no lock while it sleeps, and
 *		looks at its client every second, as hoplock_wait does.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "args.h"
#include "branch.h"
#include "compat.h"
#include "eventlog.h"
#include "events.h"
#include "hoplock.h"
#include "shmem.h"
#include "slotkey.h"

#include "access/xlog.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(hoplock_events);
PG_FUNCTION_INFO_V1(hoplock_watch);
PG_FUNCTION_INFO_V1(hoplock_position);

/* Look at the client this often while sleeping */
#define CLIENT_CHECK_MS		1000

#define RESUME_HINT \
	"Read the leases again (hoplock_leases) and resume from hoplock_position()."

/*
 * A standby cannot see which numbers the primary's running transactions
 * took, so it cannot tell which events may still appear below the ones it
 * has: a reader resuming from them could skip one for good.
 */
static void
check_primary(const char *fn)
{
	if (RecoveryInProgress())
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("%s cannot be read on a standby", fn),
				 errdetail("A standby cannot tell which event numbers the primary's running transactions hold."),
				 errhint("Read the events on the primary.")));
}

/*
 * A number from another copy of the data, or one this copy lost in a fork,
 * is not a place to resume from: what follows it here is not what followed
 * it where the client saw it.
 */
static void
check_in_history(int64 after)
{
	if (after == 0)
		return;
	if (after > hl_event_newest())
		ereport(ERROR,
				(errcode(ERRCODE_HL_NOT_IN_HISTORY),
				 errmsg("event number " INT64_FORMAT " is not in this history", after),
				 errdetail("It is newer than any event this database numbered."),
				 errhint(RESUME_HINT)));
	if (!hl_branch_value_in_history(after))
		ereport(ERROR,
				(errcode(ERRCODE_HL_NOT_IN_HISTORY),
				 errmsg("event number " INT64_FORMAT " is not in this history", after),
				 errdetail("It was numbered on another copy of the data, or in a part of its history that a promotion, a restore or a copy left behind."),
				 errhint(RESUME_HINT)));
}

/* Events after a number the log no longer reaches back to may be gone. */
static void
check_kept(int64 after, Snapshot snapshot)
{
	HlDelivery	d;

	if (after == 0)
		return;
	hl_delivery_read(snapshot, &d);
	if (after < d.pruned_through)
		ereport(ERROR,
				(errcode(ERRCODE_HL_NOT_IN_HISTORY),
				 errmsg("event number " INT64_FORMAT " is older than the oldest event kept", after),
				 errdetail("Events are kept for hoplock.event_retention after they were sent; events after that number may be gone."),
				 errhint(RESUME_HINT)));
}

/*
 * The columns of hoplock_event, which put_event fills: 1.1's
 * hoplock_events had the first six.
 */
static const Oid event_types[] = {
	INT8OID, TEXTOID, TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID, TEXTOID,
	TIMESTAMPTZOID, INT4OID
};

/* Put each event into the function's result */
static bool
put_event(const HlLoggedEvent *e, void *arg)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) arg;
	Datum		values[9];
	bool		nulls[9] = {0};
	int			slot;

	values[0] = Int64GetDatum(e->seq);
	values[1] = PointerGetDatum(e->event);
	/* a slot's event under its name (slotkey.h) */
	values[2] = PointerGetDatum(hl_slot_base(e->name, &slot));
	values[3] = PointerGetDatum(e->owner);
	values[4] = Int64GetDatum(e->generation);
	values[5] = TimestampTzGetDatum(e->at);
	/* (the value's, free_at's and slot's columns are 1.2's: absent while the SQL is 1.1's) */
	values[6] = PointerGetDatum(e->value);
	nulls[6] = (e->value == NULL);
	values[7] = TimestampTzGetDatum(e->free_at);
	nulls[7] = (e->free_at == 0);
	/* the slot of a lease with slots; NULL for a lease without */
	values[8] = Int32GetDatum(slot);
	nulls[8] = (slot == 0);
	Assert(rsinfo->setDesc->natts <= 9);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	return true;
}

/*
 * The events after "after", up to the horizon, into the result; returns
 * how many.
 */
static int64
read_events(FunctionCallInfo fcinfo, int64 after)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int64		horizon;
	Snapshot	snapshot;
	int64		before = tuplestore_tuple_count(rsinfo->setResult);
	int64		n;

	/* the horizon first, then a snapshot that sees all that came before */
	horizon = hl_event_horizon();
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	check_kept(after, snapshot);
	(void) hl_eventlog_scan(after, horizon, snapshot, put_event, rsinfo);
	UnregisterSnapshot(snapshot);
	n = tuplestore_tuple_count(rsinfo->setResult) - before;
	return n;
}

/*
 * hoplock_events(since): the events after number "since", in number order,
 * up to the horizon.
 */
Datum
hoplock_events(PG_FUNCTION_ARGS)
{
	int64		since = PG_GETARG_INT64(0);

	check_primary("hoplock_events");
	check_in_history(since);
	hl_materialize_srf_as(fcinfo, "hoplock_event", event_types,
						  lengthof(event_types), 6);
	(void) read_events(fcinfo, since);
	PG_RETURN_VOID();
}

/* End the backend, as PostgreSQL ends one whose client went, if it has. */
static void
check_client(void)
{
	if (!hl_client_gone())
		return;
	ClientConnectionLost = true;
	InterruptPending = true;
	CHECK_FOR_INTERRUPTS();
	ereport(ERROR,
			(errcode(ERRCODE_CONNECTION_FAILURE),
			 errmsg("connection to client lost")));
}

static void watch_loop(FunctionCallInfo fcinfo, int64 after,
					   TimestampTz deadline, ConditionVariable *cv);

/*
 * hoplock_watch(after, timeout): the events after number "after", as soon
 * as there are any, waiting up to "timeout" for the first; none if it
 * passes.
 */
Datum
hoplock_watch(PG_FUNCTION_ARGS)
{
	int64		after;
	int64		timeout;
	TimestampTz deadline;
	ConditionVariable *volatile cv;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"after\" must not be null"),
				 errhint("Pass 0 to read from the oldest event kept.")));
	after = PG_GETARG_INT64(0);
	if (after < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("event number " INT64_FORMAT " is negative", after),
				 errhint("Pass 0 to read from the oldest event kept.")));
	timeout = hl_arg_timeout(fcinfo, 1);
	check_primary("hoplock_watch");
	check_in_history(after);

	deadline = GetCurrentTimestamp();
	if (pg_add_s64_overflow(deadline, timeout, &deadline) ||
		deadline > END_TIMESTAMP)
		deadline = END_TIMESTAMP;

	hl_materialize_srf_as(fcinfo, "hoplock_event", event_types,
						  lengthof(event_types), lengthof(event_types));
	cv = hl_watch_register(MyDatabaseId);
	PG_TRY();
	{
		watch_loop(fcinfo, after, deadline, cv);
	}
	PG_FINALLY();
	{
		if (cv != NULL)
			hl_wait_unregister();
	}
	PG_END_TRY();
	PG_RETURN_VOID();
}

/*
 * Read the events after "after" into the result, waiting on "cv" (NULL:
 * polling) until there are some or "deadline" passes.
 */
static void
watch_loop(FunctionCallInfo fcinfo, int64 after, TimestampTz deadline,
		   ConditionVariable *cv)
{
	for (;;)
	{
		TimestampTz now;

		/* ready to sleep before looking, or a wake-up could be missed */
		if (cv != NULL)
			ConditionVariablePrepareToSleep(cv);
		if (read_events(fcinfo, after) > 0)
			break;
		now = GetCurrentTimestamp();
		if (now >= deadline)
			break;
		if (cv != NULL)
			(void) ConditionVariableTimedSleep(cv,
											   Min(hl_ms_until(now, deadline),
												   CLIENT_CHECK_MS),
											   PG_WAIT_EXTENSION);
		else
		{
			/* not preloaded: nothing wakes it; look again every 10 ms */
			(void) WaitLatch(MyLatch,
							 WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
							 Min(hl_ms_until(now, deadline), 10),
							 PG_WAIT_EXTENSION);
			ResetLatch(MyLatch);
		}
		CHECK_FOR_INTERRUPTS();
		check_client();
	}
	if (cv != NULL)
		ConditionVariableCancelSleep();
}

/*
 * hoplock_position(): the number a reader may resume from -- the newest
 * event at or below the horizon, so that every event up to it has
 * committed and none can still appear below it.  A client that takes it,
 * then reads the leases, then follows the stream from it misses no change
 * (an event it gets may already show in what it read: the generation
 * tells).  0 if the log is empty.
 */
Datum
hoplock_position(PG_FUNCTION_ARGS)
{
	int64		horizon;
	Snapshot	snapshot;
	int64		position;
	HlDelivery	d;

	check_primary("hoplock_position");
	horizon = hl_event_horizon();
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	(void) hl_eventlog_newest(horizon, snapshot, true, &position);
	if (position == 0)
	{
		/* the log is empty: after what it dropped, if anything */
		hl_delivery_read(snapshot, &d);
		position = Min(d.pruned_through, horizon);
	}
	UnregisterSnapshot(snapshot);
	PG_RETURN_INT64(position);
}
