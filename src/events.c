/*-------------------------------------------------------------------------
 *
 * events.c
 *		Lease events: a NOTIFY on hoplock.channel with a JSON payload, and,
 *		with hoplock.log_events, a server log line.
 *
 *		Both take effect only if the transaction commits: NOTIFY is
 *		transactional by itself, and the log lines wait in a list of this
 *		file's own until the commit (as async.c keeps its notifications),
 *		dropped with a subtransaction that aborts.
 *
 *		Names and owners are written as JSON strings in both, so that no
 *		name or owner, whatever it holds, can pass for more of the payload
 *		or of the log line than itself.
 *
 *		Every event has a number ("seq"), from the database's sequence
 *		hoplock_internal.event_seq: increasing, and in commit order for the
 *		events of one lease (its term lock serializes them).  Transactions
 *		of different leases may commit out of their numbers' order, so a
 *		transaction publishes the first number it took, in shared memory,
 *		until it ends: hl_event_horizon() tells a reader of the history up to
 *		which number nothing can still appear (see hoplock_events).
 *		Taking a number and publishing it happen under one LWLock, the
 *		sequence being locked beforehand, so that no number is taken
 *		without being seen.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"
#include "shmem.h"

#include "access/xact.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "commands/sequence.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/proc.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/memutils.h"

/* Fraction of the NOTIFY queue above which events are not sent */
#define NOTIFY_QUEUE_LIMIT	0.5

/* A log line waiting for its transaction to commit */
typedef struct PendingLine
{
	struct PendingLine *next;
	int			nest_level;		/* subtransaction that queued it */
	char	   *line;
} PendingLine;

/* Newest first, in TopTransactionContext */
static PendingLine *pending_lines = NULL;

/*
 * This transaction published the first event number it took, in the
 * subtransaction of nesting level seq_published_level (an abort of that
 * subtransaction takes the number back with it).
 */
static bool seq_published = false;
static int	seq_published_level = 0;

/* An instant as JSON writes it, always in UTC */
static void
append_timestamp(StringInfo buf, TimestampTz ts)
{
	char		text[MAXDATELEN + 1];
	const int	utc = 0;

	JsonEncodeDateTime(text, TimestampTzGetDatum(ts), TIMESTAMPTZOID, &utc);
	escape_json(buf, text);
}

/*
 * The payload:
 * {"seq": N, "event": "...", "name": "...", "owner": "...", "generation": N,
 *  "expires_at": "2026-01-01T00:00:00.000000+00:00"}
 *
 * expires_at is always in UTC, whatever the session's TimeZone, so that
 * every listener gets the same text for the same event.
 */
static char *
build_payload(const char *event, const char *name, const char *owner,
			  const Lease *lease, int64 seq)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfo(&buf, "{\"seq\": " INT64_FORMAT ", \"event\": ", seq);
	escape_json(&buf, event);
	appendStringInfoString(&buf, ", \"name\": ");
	escape_json(&buf, name);
	appendStringInfoString(&buf, ", \"owner\": ");
	escape_json(&buf, owner);
	appendStringInfo(&buf, ", \"generation\": " INT64_FORMAT, lease->generation);
	appendStringInfoString(&buf, ", \"expires_at\": ");
	append_timestamp(&buf, lease->expires_at);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * The log line: hoplock: lease "name" acquired, generation N, owner
 * "owner", expires at ...; name and owner as JSON strings.
 */
static void
queue_log_line(const char *event, const char *name, const char *owner,
			   const Lease *lease)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	StringInfoData buf;
	PendingLine *item = palloc(sizeof(PendingLine));

	initStringInfo(&buf);
	appendStringInfoString(&buf, "hoplock: lease ");
	escape_json(&buf, name);
	appendStringInfo(&buf, " %s, generation " INT64_FORMAT ", owner ",
					 event, lease->generation);
	escape_json(&buf, owner);
	appendStringInfo(&buf, ", expires at %s",
					 timestamptz_to_str(lease->expires_at));

	item->line = buf.data;
	item->nest_level = GetCurrentTransactionNestLevel();
	item->next = pending_lines;
	pending_lines = item;
	MemoryContextSwitchTo(old);
}

/*
 * The next event number.  Its transaction publishes the first one it takes
 * until it ends.
 */
static int64
next_seq(void)
{
	Oid			seqid = hl_sequence_oid("event_seq");
	int64		seq;

	/* locked now, so that nextval does not wait under the LWLock */
	if (!hl_lock_relation_briefly(seqid, RowExclusiveLock))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not lock sequence \"hoplock_internal.event_seq\""),
				 errhint("The call changed nothing; try it again.")));
	if (hl_shared == NULL)
		return nextval_internal(seqid, false);

	LWLockAcquire(hl_shared->seq_lock, LW_EXCLUSIVE);
	seq = nextval_internal(seqid, false);
	if (!seq_published)
	{
		HlSeqEntry *entry = &hl_shared->seqs[hl_proc_index()];

		entry->dboid = MyDatabaseId;
		entry->first_seq = seq;
		seq_published = true;
		seq_published_level = GetCurrentTransactionNestLevel();
	}
	LWLockRelease(hl_shared->seq_lock);
	return seq;
}

/*
 * The greatest event number below which no transaction of this database
 * that is still running took one (PG_INT64_MAX if none is running).  Read
 * it before taking the snapshot that reads the history.
 */
int64
hl_event_horizon(void)
{
	int64		horizon = PG_INT64_MAX;
	int			me;
	Oid			seqid;
	Datum		last;
	Oid			save_userid;
	int			save_sec_context;
	FunctionCallInfo fcinfo;

	if (hl_shared == NULL)
		return horizon;

	/*
	 * First the last number handed out: a number taken after this is above
	 * it.  A number taken before it was published together with its taking
	 * (under seq_lock), so the scan below sees its transaction if that is
	 * still running.  (The sequence is the extension's, read as its owner
	 * would: callers have no rights on it.)
	 */
	seqid = hl_sequence_oid("event_seq");
	GetUserIdAndSecContext(&save_userid, &save_sec_context);
	SetUserIdAndSecContext(BOOTSTRAP_SUPERUSERID,
						   save_sec_context | SECURITY_LOCAL_USERID_CHANGE);
	fcinfo = palloc0(SizeForFunctionCallInfo(1));
	InitFunctionCallInfoData(*fcinfo, NULL, 1, InvalidOid, NULL, NULL);
	fcinfo->args[0].value = ObjectIdGetDatum(seqid);
	fcinfo->args[0].isnull = false;
	last = pg_sequence_last_value(fcinfo);
	SetUserIdAndSecContext(save_userid, save_sec_context);
	horizon = fcinfo->isnull ? 0 : DatumGetInt64(last);
	pfree(fcinfo);

	me = hl_proc_index();
	LWLockAcquire(hl_shared->seq_lock, LW_SHARED);
	for (int i = 0; i < hl_shared->nprocs; i++)
	{
		HlSeqEntry *entry = &hl_shared->seqs[i];

		if (i != me && entry->first_seq != 0 && entry->dboid == MyDatabaseId)
			horizon = Min(horizon, entry->first_seq - 1);
	}
	LWLockRelease(hl_shared->seq_lock);
	return horizon;
}

static void
unpublish_seq(void)
{
	if (!seq_published)
		return;
	LWLockAcquire(hl_shared->seq_lock, LW_EXCLUSIVE);
	hl_shared->seqs[hl_proc_index()].first_seq = 0;
	LWLockRelease(hl_shared->seq_lock);
	seq_published = false;
}

/*
 * Queue one event for the lease as it stands after the change; returns its
 * number.
 */
int64
hl_event(const char *event, const Lease *lease)
{
	char	   *name = text_to_cstring(lease->name);
	char	   *owner = text_to_cstring(lease->owner);
	int64		seq = next_seq();

	/*
	 * A NOTIFY queue that is nearly full (a listener that stopped reading,
	 * any role's flood) would make this transaction fail at commit, and
	 * with it every change of every lease: the event is dropped instead,
	 * and stays readable from the history (hoplock_events).
	 */
	if (DatumGetFloat8(DirectFunctionCall1(pg_notification_queue_usage,
										   (Datum) 0)) < NOTIFY_QUEUE_LIMIT)
		Async_Notify(hl_channel, build_payload(event, name, owner, lease, seq));
	else
		ereport(WARNING,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("hoplock did not send the \"%s\" event of lease \"%s\": the NOTIFY queue is nearly full",
						event, name),
				 errdetail("Event number " INT64_FORMAT " can be read with hoplock_events().", seq),
				 errhint("A session that listens but does not read, or sits in a long transaction, holds the queue: see pg_notification_queue_usage().")));
	if (hl_log_events)
		queue_log_line(event, name, owner, lease);
	return seq;
}

/* Write the lines, oldest first; nothing here allocates. */
static void
write_lines(PendingLine *item)
{
	if (item == NULL)
		return;
	write_lines(item->next);
	ereport(LOG, (errmsg_internal("%s", item->line)));
}

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			/* visible to every snapshot from now on */
			unpublish_seq();
			write_lines(pending_lines);
			pending_lines = NULL;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			unpublish_seq();
			pending_lines = NULL;
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

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (pending_lines != NULL && pending_lines->nest_level >= level)
			pending_lines = pending_lines->next;
		/* its numbers are gone: nothing of ours can appear below them */
		if (seq_published && seq_published_level >= level)
			unpublish_seq();
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (PendingLine *item = pending_lines;
			 item != NULL && item->nest_level >= level; item = item->next)
			item->nest_level = level - 1;
		if (seq_published && seq_published_level >= level)
			seq_published_level = level - 1;
	}
}

void
hl_events_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
}
