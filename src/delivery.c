/*-------------------------------------------------------------------------
 *
 * delivery.c
 *		Sending the event log as NOTIFY, after the commits that recorded
 *		the events: the database's worker does it, in number order, up to
 *		HL_DELIVERY_BATCH events per transaction (and the rest of a row
 *		that carries many, a mass expiry's, whole: eventlog.c, so up to
 *		twice that), and records in the same transaction how far it got
 *		(hoplock_internal.delivery).  So:
 *
 *		- a term change takes none of the cluster-wide lock that NOTIFY
 *		  takes from pre-commit to the end of its commit: only the
 *		  delivery does, once per batch;
 *		- nothing committed is left unsent: after a crash of the worker or
 *		  the server, sending resumes from the recorded position (a batch
 *		  whose commit was lost is sent again: a client drops numbers it
 *		  has seen);
 *		- a change that rolled back sends nothing: its events are not
 *		  there;
 *		- events go out in number order and never past the horizon (an
 *		  event that can still appear below it).
 *
 *		The delivery's commit is asynchronous (synchronous_commit = off):
 *		it holds NOTIFY's lock for no WAL flush and no standby, and losing
 *		it means sending a batch again, which is allowed.  Above half of
 *		the NOTIFY queue, sending pauses (a listener that stopped reading
 *		holds the queue) and goes on when there is room: nothing is
 *		dropped.
 *
 *		Events sent are kept for hoplock.event_retention, then dropped
 *		(hl_prune_events), and the greatest number dropped is recorded, so
 *		that a reader resuming from below it is told.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "branch.h"
#include "compat.h"
#include "delivery.h"
#include "eventlog.h"
#include "events.h"
#include "settings.h"
#include "shmem.h"
#include "storage.h"

#include "access/xact.h"
#include "commands/async.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/guc.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"


/* Fraction of the NOTIFY queue above which sending pauses */
#define NOTIFY_QUEUE_LIMIT	0.5

/*
 * Events dropped per transaction: small enough that a batch holds up the
 * next delivery only briefly; the worker runs batches back to back while
 * there is more to drop.
 */
#define PRUNE_BATCH			2000

typedef struct SendState
{
	int			sent;
	MemoryContext payload_context;	/* one event's payload at a time */
} SendState;

static bool
send_one(const HlLoggedEvent *e, void *arg)
{
	SendState  *state = (SendState *) arg;
	MemoryContext old;
	char	   *payload;

	StaticAssertStmt(HL_EVENTS_PER_ROW == HL_DELIVERY_BATCH,
					 "a row of many events is a delivery's batch");

	old = MemoryContextSwitchTo(state->payload_context);
	payload = hl_event_payload(text_to_cstring(e->event),
							   text_to_cstring(e->name),
							   text_to_cstring(e->owner),
							   e->generation, e->expires_at, e->seq,
							   e->value ? text_to_cstring(e->value) : NULL,
							   e->free_at);
	MemoryContextSwitchTo(old);
	Async_Notify(hl_channel, payload);
	/* (Async_Notify keeps a copy of its own) */
	MemoryContextReset(state->payload_context);
	/* a row of many events (a mass expiry's) goes in one batch, whole */
	return ++state->sent < HL_DELIVERY_BATCH || e->row_left > 0;
}

static void
begin(const char *activity)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
}

static void
finish(void)
{
	PopActiveSnapshot();
	CommitTransactionCommand();
	hl_notify_after_commit();
	pgstat_report_activity(STATE_IDLE, NULL);
}

/*
 * Lock the tables for this transaction, without waiting more than a call
 * would; false if maintenance holds one of them.
 */
static bool
lock_tables(HlRel event_mode_rel, LOCKMODE event_mode)
{
	HlRelation	rel;

	if (!hl_open(event_mode_rel, event_mode, false, &rel))
		return false;
	hl_close(&rel, true);
	if (!hl_open(HL_REL_DELIVERY, RowExclusiveLock, false, &rel))
		return false;
	hl_close(&rel, true);
	return true;
}

/*
 * Send the next batch of committed events, in a transaction of its own.
 * Says whether there may be more to send at once, or why it could not
 * send now.
 */
HlDeliveryResult
hl_deliver(void)
{
	HlDelivery	d;
	int64		horizon;
	int64		last;
	Snapshot	snapshot;
	SendState	state = {0};

	begin("hoplock: sending events");
	(void) set_config_option("synchronous_commit", "off",
							 PGC_SUSET, PGC_S_SESSION, GUC_ACTION_LOCAL,
							 true, 0, false);
	if (!lock_tables(HL_REL_EVENT, AccessShareLock))
	{
		finish();
		return HL_DELIVERY_BUSY;
	}

	/* the horizon first, then a snapshot that sees all that came before */
	horizon = hl_event_horizon();
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	hl_delivery_read(snapshot, &d);

	if (DatumGetFloat8(DirectFunctionCall1(pg_notification_queue_usage,
										   (Datum) 0)) >= NOTIFY_QUEUE_LIMIT)
	{
		UnregisterSnapshot(snapshot);
		finish();
		return HL_DELIVERY_PAUSED;
	}

	state.payload_context = AllocSetContextCreate(CurrentMemoryContext,
												  "hoplock event payload",
												  ALLOCSET_DEFAULT_SIZES);
	last = hl_eventlog_scan(d.delivered, horizon, snapshot, send_one, &state);
	MemoryContextDelete(state.payload_context);
	UnregisterSnapshot(snapshot);
	if (state.sent > 0)
	{
		d.delivered = last;
		d.delivered_at = GetCurrentTimestamp();
		hl_delivery_write(&d);
	}
	finish();
	if (state.sent > 0)
	{
		hl_count_by(HL_COUNT_EVENTS_DELIVERED, state.sent);
		hl_count(HL_COUNT_DELIVERIES);
	}
	return state.sent >= HL_DELIVERY_BATCH ? HL_DELIVERY_MORE : HL_DELIVERY_DONE;
}

/*
 * Drop the events sent more than hoplock.event_retention ago, up to
 * PRUNE_BATCH of them.  Returns true if there may be more to drop now.
 */
bool
hl_prune_events(void)
{
	HlDelivery	d;
	TimestampTz older_than;
	int64		through;
	int64		pruned_through;
	int64		dropped;
	bool		let_go = false;

	begin("hoplock housekeeping: dropping events sent");
	if (!lock_tables(HL_REL_EVENT, RowExclusiveLock))
	{
		finish();				/* maintenance: next time */
		return false;
	}
	hl_delivery_read(GetActiveSnapshot(), &d);
	older_than = GetCurrentTimestamp() - (int64) hl_event_retention * USECS_PER_SEC;
	/*
	 * Numbers are clocked (their c is at least the clock when they were
	 * taken): one taken after older_than is above this.
	 */
	through = older_than > 0 && older_than <= HL_MAX_C ?
		Min(d.delivered, (older_than << HL_TAG_BITS) | HL_TAG_MASK) : 0;
	/*
	 * Not the events of a mass expiry whose rows are not all written
	 * (massexpiry.c), unless the mark is older than the retention itself:
	 * a mark a restore brought without the rows it is about, say.  Then it
	 * is let go (a restart after that may announce those terms again).
	 */
	if (d.has_expiries_after && hl_value_c(d.expiries_after) < older_than)
	{
		d.has_expiries_after = false;
		d.expiries_after = 0;
		let_go = true;
	}
	else if (d.has_expiries_after)
		through = Min(through, d.expiries_after);
	pruned_through = d.pruned_through;
	dropped = through > 0 ?
		hl_eventlog_prune(through, older_than, PRUNE_BATCH, &pruned_through) : 0;
	if ((dropped > 0 && pruned_through > d.pruned_through) || let_go)
	{
		d.pruned_through = Max(d.pruned_through, pruned_through);
		if (!d.found)
			d.delivered_at = GetCurrentTimestamp();
		hl_delivery_write(&d);
	}
	finish();
	return dropped >= PRUNE_BATCH;
}

/*
 * Rows of the event log were deleted or truncated by SQL, in this
 * transaction (a superuser's maintenance): a reader resuming from a number
 * below them must be told (HL001), not handed what follows as if nothing
 * were missing.  Record the horizon as dropped through: every number
 * below it was committed (or rolled back) already, and every number taken
 * from now on is above it.  (A TRUNCATE waited for every transaction
 * writing the log; rows a DELETE removed above a number still in flight
 * are not covered.)  Nothing to record before the worker sent anything.
 */
void
hl_delivery_note_removal(void)
{
	HlDelivery	d;
	Snapshot	latest;
	int64		through;

	if (hl_shared == NULL)
		return;
	through = Min(hl_event_horizon(), hl_event_newest());
	latest = RegisterSnapshot(GetLatestSnapshot());
	hl_delivery_read(latest, &d);
	UnregisterSnapshot(latest);
	if (!d.found || through <= d.pruned_through)
		return;
	d.pruned_through = through;
	hl_delivery_write(&d);
}
