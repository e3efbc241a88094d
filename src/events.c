/*-------------------------------------------------------------------------
 *
 * events.c
 *		Lease events: queued by the change, numbered and recorded in the
 *		event log at the pre-commit of its transaction (eventlog.c), sent as
 *		a NOTIFY on hoplock.channel by the worker once that transaction has
 *		committed (delivery.c), and, with hoplock.log_events, written as a
 *		server log line at the commit.  A subtransaction that aborts takes
 *		its events with it.
 *
 *		No term change sends a NOTIFY itself: NOTIFY takes one lock for the
 *		whole cluster from pre-commit to the end of the commit, which would
 *		make every term change -- and every other NOTIFY in the cluster --
 *		wait for the one before.  (Without shared memory, hoplock not
 *		preloaded, there is no worker: the transaction sends its own, as
 *		1.1 did.)  The log lines wait in a list of this file's own until
 *		the commit, dropped with a subtransaction that aborts; at most
 *		MAX_LOGGED_EVENTS per transaction, the rest counted.
 *
 *		Names and owners are written as JSON strings in payloads and log
 *		lines, so that no name or owner, whatever it holds, can pass for
 *		more of the payload or of the log line than itself.
 *
 *		Every event has a number ("seq"), from the database's counter in
 *		shared memory: a hybrid clock with the branch's tag, like
 *		generations (branch.c, docs/forks-and-events.md), so that no copy of
 *		the data -- a promoted standby, a restore -- numbers an event as one
 *		a client saw before.  Numbers increase, and are in commit order for
 *		the events of one lease (its term lock serializes them).  They are
 *		taken at the pre-commit, so a number is in flight only while its
 *		commit is (a transaction that changed a term and stays open holds
 *		back no one).  Transactions of different leases may still finish
 *		their commits out of their numbers' order, so a transaction
 *		publishes the first number it took, in shared memory, until it
 *		ends: hl_event_horizon() tells a reader of
 *		the log up to which number nothing can still appear (stream.c,
 *		delivery.c).  Taking a number and publishing it happen under the
 *		database's own LWLock, so that no number is taken without being
 *		seen, and no database waits for another's.  When a transaction that
 *		took numbers ends, it wakes the worker and the readers in
 *		hoplock_watch (hl_wake_event_readers).  Without shared memory the
 *		sequence hoplock_internal.event_seq numbers them, as 1.1 did.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "branch.h"
#include "eventlog.h"
#include "events.h"
#include "hoplock.h"
#include "settings.h"
#include "shmem.h"
#include "slotkey.h"
#include "storage.h"

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
#include "utils/snapmgr.h"

/* Fraction of the NOTIFY queue above which events are not sent */
#define NOTIFY_QUEUE_LIMIT	0.5

/*
 * At most this many log lines per transaction: past it, the events are
 * counted, and one line at the commit says how many were left out (they
 * stay readable with hoplock_events).  Any session may set
 * hoplock.notify_renewals, so the number of events in one transaction is
 * the caller's to choose; the server log's volume is not.
 */
#define MAX_LOGGED_EVENTS	10000

/*
 * A log line waiting for its transaction to commit, or (line NULL) a count
 * of events of one subtransaction left out past MAX_LOGGED_EVENTS
 */
typedef struct PendingLine
{
	struct PendingLine *next;
	int			nest_level;		/* subtransaction that queued it */
	char	   *line;
	int64		left_out;
} PendingLine;

/* Newest first, in TopTransactionContext */
static PendingLine *pending_lines = NULL;
static int	pending_count = 0;	/* lines in pending_lines */

/*
 * This transaction published the first event number it took, in the
 * subtransaction of nesting level seq_published_level (an abort of that
 * subtransaction takes the number back with it).
 */
static bool seq_published = false;
static bool events_recorded = false;	/* this transaction took numbers */
static bool terms_recorded = false;	/* for events other than "renewed" */
static int	seq_published_level = 0;
static HlEventDb *seq_published_entry = NULL;	/* under whose lock */

/*
 * The branch this transaction's events are numbered on, read at its first
 * term change: the numbers are taken at pre-commit, where maintenance
 * holding the branch table must not fail the commit.
 */
static bool xact_branch_valid = false;
static int32 xact_branch_tag;
static int64 xact_branch_floor;

/*
 * An int64 in decimal (the delivery writes four in every payload, tens of
 * thousands a second in a mass expiry: not through snprintf)
 */
static void
append_int64(StringInfo buf, int64 value)
{
	char		digits[MAXINT8LEN + 1];

	(void) pg_lltoa(value, digits);
	appendStringInfoString(buf, digits);
}

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
 * A lease row's name as JSON: a slot's key (slotkey.h) as its name and
 * "slot": k, for a name with slots only.
 */
static void
slot_name_json(StringInfo buf, const char *key)
{
	int			slot;
	int			len = strlen(key);
	int			base = hl_slot_split(key, len, &slot);

	if (base == len)
	{
		escape_json(buf, key);
		return;
	}
	escape_json(buf, pnstrdup(key, base));
	appendStringInfo(buf, ", \"slot\": %d", slot);
}

/*
 * The payload:
 * {"seq": N, "seq_text": "N", "event": "...", "name": "...", "owner": "...",
 *  "generation": N, "generation_text": "N",
 *  "expires_at": "2026-01-01T00:00:00.000000+00:00"}
 * ("slot": k after the name, for a term of one of a lease's slots) and, when the holder proclaimed one (hoplock_proclaim, or value => at
 * acquire), "value": "..." before the closing brace; a "released" event
 * of a term released during its hold (min_hold), "free_at": "..." last,
 * the instant the hold frees the name.
 *
 * The numbers are above 2^53, where JavaScript's JSON.parse (and older jq)
 * lose digits: each comes as a string too.  expires_at is always in UTC,
 * whatever the session's TimeZone, so that every listener gets the same
 * text for the same event.
 */
char *
hl_event_payload(const char *event, const char *name, const char *owner,
				 int64 generation, TimestampTz expires_at, int64 seq,
				 const char *value, TimestampTz free_at)
{
	StringInfoData buf;

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"seq\": ");
	append_int64(&buf, seq);
	appendStringInfoString(&buf, ", \"seq_text\": \"");
	append_int64(&buf, seq);
	appendStringInfoString(&buf, "\", \"event\": ");
	escape_json(&buf, event);
	appendStringInfoString(&buf, ", \"name\": ");
	slot_name_json(&buf, name);
	appendStringInfoString(&buf, ", \"owner\": ");
	escape_json(&buf, owner);
	appendStringInfoString(&buf, ", \"generation\": ");
	append_int64(&buf, generation);
	appendStringInfoString(&buf, ", \"generation_text\": \"");
	append_int64(&buf, generation);
	appendStringInfoChar(&buf, '"');
	appendStringInfoString(&buf, ", \"expires_at\": ");
	append_timestamp(&buf, expires_at);
	if (value != NULL)
	{
		appendStringInfoString(&buf, ", \"value\": ");
		escape_json(&buf, value);
	}
	if (free_at != 0)
	{
		appendStringInfoString(&buf, ", \"free_at\": ");
		append_timestamp(&buf, free_at);
	}
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
	int			level = GetCurrentTransactionNestLevel();
	MemoryContext old;
	StringInfoData buf;
	PendingLine *item;

	if (pending_count >= MAX_LOGGED_EVENTS)
	{
		if (pending_lines == NULL || pending_lines->line != NULL ||
			pending_lines->nest_level != level)
		{
			item = MemoryContextAllocZero(TopTransactionContext,
										  sizeof(PendingLine));
			item->nest_level = level;
			item->next = pending_lines;
			pending_lines = item;
		}
		pending_lines->left_out++;
		return;
	}

	old = MemoryContextSwitchTo(TopTransactionContext);
	item = palloc0(sizeof(PendingLine));
	initStringInfo(&buf);
	appendStringInfoString(&buf, "hoplock: lease ");
	slot_name_json(&buf, name);
	appendStringInfo(&buf, " %s, generation " INT64_FORMAT ", owner ",
					 event, lease->generation);
	escape_json(&buf, owner);
	appendStringInfo(&buf, ", expires at %s",
					 timestamptz_to_str(lease->expires_at));

	item->line = buf.data;
	item->nest_level = level;
	item->next = pending_lines;
	pending_lines = item;
	pending_count++;
	MemoryContextSwitchTo(old);
}

/*
 * Entry 0 of hl_shared->evdbs is the overflow: the databases that find no
 * entry of their own (more of them numbering events at once, with
 * transactions in flight, than there are entries) share it, so that no
 * database is ever refused a number.  It also keeps the greatest number
 * of every entry given to another database, so that a database's numbers
 * go on growing whichever entry it takes them from.
 */
#define OVERFLOW_EVDB	0

/*
 * This database's entry of event numbers in shared memory, claimed for it
 * if "claim" (the overflow entry if none can be had); NULL if it has none
 * and "claim" is false.  The caller checks, under the entry's lock, that
 * it is still this database's (or the overflow): an entry that has
 * nothing in flight can be given to another database meanwhile.
 */
static HlEventDb *
event_db(bool claim)
{
	static int	cached = -1;
	HlEventDb  *found = NULL;
	HlEventDb  *spare = NULL;
	int			spare_index = -1;

	if (cached > OVERFLOW_EVDB && hl_shared->evdbs[cached].dboid == MyDatabaseId)
		return &hl_shared->evdbs[cached];

	LWLockAcquire(hl_shared->seq_lock, LW_EXCLUSIVE);
	for (int i = OVERFLOW_EVDB + 1; i < hl_shared->nevdbs && found == NULL; i++)
	{
		if (hl_shared->evdbs[i].dboid == MyDatabaseId)
		{
			found = &hl_shared->evdbs[i];
			cached = i;
		}
	}
	for (int i = OVERFLOW_EVDB + 1; claim && found == NULL && i < hl_shared->nevdbs; i++)
	{
		HlEventDb  *e = &hl_shared->evdbs[i];
		bool		busy = false;

		if (e->dboid == InvalidOid)
		{
			spare = e;
			spare_index = i;
			break;
		}
		/* the least recently used of those with nothing in flight */
		LWLockAcquire(e->lock, LW_SHARED);
		for (int p = 0; p < hl_shared->nprocs && !busy; p++)
			busy = hl_shared->seqs[p].first_seq != 0 &&
				hl_shared->seqs[p].dboid == e->dboid;
		LWLockRelease(e->lock);
		if (!busy && (spare == NULL || e->last_used < spare->last_used))
		{
			spare = e;
			spare_index = i;
		}
	}
	if (found == NULL && spare != NULL)
	{
		HlEventDb  *overflow = &hl_shared->evdbs[OVERFLOW_EVDB];
		int64		floor;

		/*
		 * The overflow keeps the last number of the database that had the
		 * entry; a number taken here from now on is above it, and above
		 * every one this database took before, in this server run or an
		 * earlier one: those were taken earlier, less than HL_BRANCH_MARGIN
		 * ahead of the clock.
		 */
		LWLockAcquire(spare->lock, LW_EXCLUSIVE);

		/*
		 * Look again, now that no number can be taken from it: a backend
		 * of its database may have taken one since it was looked at.
		 */
		if (spare->dboid != InvalidOid)
		{
			for (int p = 0; p < hl_shared->nprocs; p++)
			{
				if (hl_shared->seqs[p].first_seq != 0 &&
					hl_shared->seqs[p].dboid == spare->dboid)
				{
					LWLockRelease(spare->lock);
					LWLockRelease(hl_shared->seq_lock);
					return claim ? &hl_shared->evdbs[OVERFLOW_EVDB] : NULL;
				}
			}
		}
		LWLockAcquire(overflow->lock, LW_EXCLUSIVE);
		overflow->last_c = Max(overflow->last_c, spare->last_c);
		floor = overflow->last_c;
		LWLockRelease(overflow->lock);
		spare->dboid = MyDatabaseId;
		spare->last_c = Max(GetCurrentTimestamp() + HL_BRANCH_MARGIN, floor);
		spare->last_used = GetCurrentTimestamp();
		LWLockRelease(spare->lock);
		found = spare;
		cached = spare_index;
	}
	LWLockRelease(hl_shared->seq_lock);
	if (found == NULL && claim)
		found = &hl_shared->evdbs[OVERFLOW_EVDB];
	return found;
}

/*
 * The next "count" event numbers, consecutive -- c, c + 1, ... shifted,
 * one tag -- so that no other number of this database falls between them;
 * returns the last.  c is the greatest of the database's last plus one,
 * the clock and the branch floor (branch.c).  Its transaction publishes
 * the first number it takes until it ends.  Without shared memory, the
 * sequence numbers them, as 1.1 did (one at a time: "count" is 1 there).
 */
static int64
next_seq(int count)
{
	TimestampTz now;
	int32		tag;
	int64		floor;
	int64		c;
	bool		busy;
	HlEventDb  *entry;
	int64		seq;

	Assert(count >= 1 && (count == 1 || hl_shared != NULL));
	if (hl_shared == NULL)
	{
		Oid			seqid = hl_sequence_oid("event_seq");

		if (!hl_lock_relation_briefly(seqid, RowExclusiveLock))
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("could not lock sequence \"hoplock_internal.event_seq\""),
					 errhint("The call changed nothing; try it again.")));
		return nextval_internal(seqid, false);
	}

	if (xact_branch_valid)
	{
		tag = xact_branch_tag;
		floor = xact_branch_floor;
	}
	else if (!hl_branch_tag(GetCurrentTimestamp(), &tag, &floor, &busy))
		hl_table_busy_error(HL_REL_BRANCH);
	for (;;)
	{
		entry = event_db(true);
		LWLockAcquire(entry->lock, LW_EXCLUSIVE);
		if (entry->dboid == MyDatabaseId ||
			entry == &hl_shared->evdbs[OVERFLOW_EVDB])
			break;
		LWLockRelease(entry->lock);
	}
	/*
	 * From the overflow, a margin above the clock, as from an entry just
	 * claimed: a database without an entry of its own reads its horizon
	 * as the overflow's last or the clock and the margin (see
	 * hl_event_horizon).  The clock is read under the entry's lock, so
	 * that a reader that held the lock before and read the clock there
	 * sees this number above its own clock.
	 */
	now = GetCurrentTimestamp();
	if (entry == &hl_shared->evdbs[OVERFLOW_EVDB])
		c = Max(entry->last_c + 1, now + HL_BRANCH_MARGIN);
	else
		c = Max(entry->last_c + 1, now);
	c = Max(c, floor);
	if (c > HL_MAX_C - (count - 1))
	{
		LWLockRelease(entry->lock);
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("hoplock's values are exhausted"),
				 errdetail("Event numbers are numbered by the microsecond up to the year 2142.")));
	}
	entry->last_c = c + (count - 1);
	entry->last_used = now;
	seq = (c << HL_TAG_BITS) | tag;
	if (!seq_published)
	{
		HlSeqEntry *mine = &hl_shared->seqs[hl_proc_index()];

		mine->dboid = MyDatabaseId;
		mine->first_seq = seq;
		seq_published = true;
		seq_published_level = GetCurrentTransactionNestLevel();
		seq_published_entry = entry;
	}
	LWLockRelease(entry->lock);
	return ((c + (count - 1)) << HL_TAG_BITS) | tag;
}

/*
 * The greatest event number below which no transaction of this database
 * that is still running took one (PG_INT64_MAX if none is running).  Read
 * it before taking the snapshot that reads the history.
 */
int64
hl_event_horizon(void)
{
	HlEventDb  *overflow;
	HlEventDb  *entry = NULL;
	int64		horizon;
	int64		c;
	int			me;

	if (hl_shared == NULL)
		return PG_INT64_MAX;
	overflow = &hl_shared->evdbs[OVERFLOW_EVDB];

	/*
	 * No database claims an entry meanwhile (seq_lock), and no number is
	 * taken or published, from this database's entry or from the overflow,
	 * while both are held.  A number taken afterwards is above what is
	 * read here: from the entry, above its last; from the overflow, above
	 * the overflow's last and a margin above the clock, read later than
	 * this clock (next_seq reads it under the lock); from an entry claimed
	 * later, above both too (event_db).  A number taken before and still
	 * in flight was published with its taking, under the lock held here,
	 * and bounds the horizon below.
	 */
	LWLockAcquire(hl_shared->seq_lock, LW_SHARED);
	for (int i = OVERFLOW_EVDB + 1; i < hl_shared->nevdbs; i++)
	{
		if (hl_shared->evdbs[i].dboid == MyDatabaseId)
		{
			entry = &hl_shared->evdbs[i];
			break;
		}
	}
	if (entry != NULL)
		LWLockAcquire(entry->lock, LW_SHARED);
	LWLockAcquire(overflow->lock, LW_SHARED);

	/* what the overflow may still give this database: above this */
	c = Max(overflow->last_c, GetCurrentTimestamp() + HL_BRANCH_MARGIN - 1);
	/* and its own entry: above its last */
	if (entry != NULL)
		c = Min(c, entry->last_c);
	horizon = (c << HL_TAG_BITS) | HL_TAG_MASK;

	me = hl_proc_index();
	for (int i = 0; i < hl_shared->nprocs; i++)
	{
		HlSeqEntry *other = &hl_shared->seqs[i];

		if (i != me && other->first_seq != 0 && other->dboid == MyDatabaseId)
			horizon = Min(horizon, other->first_seq - 1);
	}
	LWLockRelease(overflow->lock);
	if (entry != NULL)
		LWLockRelease(entry->lock);
	LWLockRelease(hl_shared->seq_lock);
	return horizon;
}

/*
 * The greatest event number this database may have handed out: above it,
 * a number is of no event (PG_INT64_MAX without shared memory).
 */
int64
hl_event_newest(void)
{
	HlEventDb  *entry;
	int64		newest;

	if (hl_shared == NULL)
		return PG_INT64_MAX;
	for (;;)
	{
		entry = event_db(false);
		if (entry == NULL)
			entry = &hl_shared->evdbs[OVERFLOW_EVDB];
		LWLockAcquire(entry->lock, LW_SHARED);
		if (entry->dboid == MyDatabaseId ||
			entry == &hl_shared->evdbs[OVERFLOW_EVDB])
			break;
		LWLockRelease(entry->lock);
	}
	newest = entry->last_c;
	LWLockRelease(entry->lock);
	/* numbers taken from the overflow before the entry was claimed */
	LWLockAcquire(hl_shared->evdbs[OVERFLOW_EVDB].lock, LW_SHARED);
	newest = Max(newest, hl_shared->evdbs[OVERFLOW_EVDB].last_c);
	LWLockRelease(hl_shared->evdbs[OVERFLOW_EVDB].lock);

	/*
	 * A database without an entry yet (none of its numbers taken in this
	 * server run): every number taken before is below the clock and the
	 * margin, and every one taken from now on above them.
	 */
	newest = Max(newest, GetCurrentTimestamp() + HL_BRANCH_MARGIN);
	return (newest << HL_TAG_BITS) | HL_TAG_MASK;
}

static void
unpublish_seq(void)
{
	if (!seq_published)
		return;
	LWLockAcquire(seq_published_entry->lock, LW_EXCLUSIVE);
	hl_shared->seqs[hl_proc_index()].first_seq = 0;
	LWLockRelease(seq_published_entry->lock);
	seq_published = false;
	seq_published_entry = NULL;
}

/*
 * When the event happened, as hoplock_events reports it: a term's
 * beginning, its renewal, or its end (a lease that ends carries the
 * instant it ended in expires_at).
 */
static TimestampTz
event_time(const char *event, const Lease *lease)
{
	if (strcmp(event, "acquired") == 0)
		return lease->acquired_at;
	if (strcmp(event, "renewed") == 0)
		return lease->renewed_at;
	return lease->expires_at;
}

/*
 * When the hold of a term released early frees its name, for its
 * "released" event (lease.c leaves hold_until set only if the release
 * keeps the hold); 0: not such an event.
 */
static TimestampTz
event_free_at(const char *event, const Lease *lease)
{
	if (strcmp(event, "released") == 0 && lease->hold_until > lease->expires_at)
		return lease->hold_until;
	return 0;
}

/* The events of a transaction, newest first, in TopTransactionContext */
typedef struct PendingEvent
{
	struct PendingEvent *next;
	int			nest_level;		/* subtransaction that queued it */
	const char *event;
	Lease		lease;
	HlEarlierEvents earlier;	/* recorded with it (n 0: none) */
} PendingEvent;

static PendingEvent *pending_events = NULL;

/*
 * Send one event at this commit (no worker).  A NOTIFY queue that is
 * nearly full (a listener that stopped reading, any role's flood) would
 * make the transaction fail at commit, and with it every change of every
 * lease: the NOTIFY is dropped instead, and the event stays readable from
 * the log.
 */
static void
notify_now(const PendingEvent *item, int64 seq)
{
	char	   *name = text_to_cstring(item->lease.name);
	char	   *owner = text_to_cstring(item->lease.owner);

	if (DatumGetFloat8(DirectFunctionCall1(pg_notification_queue_usage,
										   (Datum) 0)) < NOTIFY_QUEUE_LIMIT)
		Async_Notify(hl_channel,
					 hl_event_payload(item->event, name, owner,
									  item->lease.generation,
									  item->lease.expires_at, seq,
									  item->lease.value ?
									  text_to_cstring(item->lease.value) :
									  NULL,
									  event_free_at(item->event, &item->lease)));
	else
		ereport(WARNING,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("hoplock did not send the \"%s\" event of lease \"%s\": the NOTIFY queue is nearly full",
						item->event, name),
				 errdetail("Event number " INT64_FORMAT " can be read with hoplock_events().", seq),
				 errhint("A session that listens but does not read, or sits in a long transaction, holds the queue: see pg_notification_queue_usage().")));
}

/*
 * Queue one event for the lease as it stands after the change, and with
 * it the "nearlier" events of the same kind of the terms "earlier", to be
 * numbered just below it and recorded in its row (eventlog.c).  It is
 * numbered and written to the event log when its transaction commits
 * (flush_events), so that a number is in flight only while its commit
 * is: a transaction that changed a term and stays open holds back no
 * one's events.  The worker sends it as a NOTIFY once that commit is
 * done (delivery.c).  The log is locked here, so that maintenance
 * holding it is reported by the call, not at its commit.
 */
static void
queue_event(const char *event, const Lease *lease, const Lease *earlier,
			int nearlier)
{
	MemoryContext old;
	PendingEvent *item;

	if (pending_events == NULL &&
		!hl_lock_table(HL_REL_EVENT, RowExclusiveLock, NULL, NULL))
		hl_table_busy_error(HL_REL_EVENT);
	if (!xact_branch_valid && hl_shared != NULL)
	{
		bool		busy;

		if (!hl_branch_tag(GetCurrentTimestamp(), &xact_branch_tag,
						   &xact_branch_floor, &busy))
			hl_table_busy_error(HL_REL_BRANCH);
		xact_branch_valid = true;
	}

	old = MemoryContextSwitchTo(TopTransactionContext);
	item = palloc0(sizeof(PendingEvent));
	item->event = pstrdup(event);
	item->lease = *lease;
	item->lease.name = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(lease->name));
	item->lease.owner = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(lease->owner));
	item->lease.value = lease->value == NULL ? NULL :
		(text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(lease->value));
	if (nearlier > 0)
		hl_eventlog_earlier(earlier, nearlier, &item->earlier);
	item->nest_level = GetCurrentTransactionNestLevel();
	item->next = pending_events;
	pending_events = item;
	MemoryContextSwitchTo(old);

	if (hl_log_events)
	{
		for (int i = 0; i < nearlier; i++)
			queue_log_line(event, text_to_cstring(earlier[i].name),
						   text_to_cstring(earlier[i].owner), &earlier[i]);
		queue_log_line(event, text_to_cstring(lease->name),
					   text_to_cstring(lease->owner), lease);
	}
}

void
hl_event(const char *event, const Lease *lease)
{
	queue_event(event, lease, NULL, 0);
}

/*
 * Queue the "expired" events of the terms of a mass expiry
 * (massexpiry.c), in this order.  They are numbered consecutively at the
 * pre-commit and recorded HL_EVENTS_PER_ROW to a row of the log, the last
 * term's event carrying the others': a row and an index entry per
 * thousand, in the commit that announces them, and one row for each of
 * the delivery's transactions to read.  Without shared memory (no worker,
 * no mass expiry), one by one.
 */
void
hl_event_expired_many(const Lease *terms, int n)
{
	if (hl_shared == NULL)
	{
		for (int i = 0; i < n; i++)
			hl_event("expired", &terms[i]);
		return;
	}
	for (int done = 0; done < n; done += HL_EVENTS_PER_ROW)
	{
		int			k = Min(HL_EVENTS_PER_ROW, n - done);

		queue_event("expired", &terms[done + k - 1], &terms[done], k - 1);
	}
}

/*
 * Number and record the transaction's events, oldest first, at its
 * pre-commit.  Without shared memory (hoplock not preloaded, so no
 * worker) the transaction also sends them itself, as 1.1 did.
 */
static void
flush_events(void)
{
	PendingEvent *oldest = NULL;
	HlNewEvent *events;
	int			n = 0;
	bool		pushed;
	MemoryContext old;

	if (pending_events == NULL)
		return;

	/* dropped in this very transaction: its log went with it */
	if (!hl_table_exists(HL_REL_EVENT))
	{
		pending_events = NULL;
		return;
	}

	while (pending_events != NULL)
	{
		PendingEvent *item = pending_events;

		pending_events = item->next;
		item->next = oldest;
		oldest = item;
	}
	for (PendingEvent *item = oldest; item != NULL; item = item->next)
		n++;

	/*
	 * The statement's snapshot is gone by pre-commit; writing a table with
	 * a TOAST table wants one held (as the truncation of ON COMMIT DELETE
	 * ROWS tables and deferred triggers have one of their own).
	 */
	pushed = !ActiveSnapshotSet();
	if (pushed)
		PushActiveSnapshot(GetTransactionSnapshot());

	/*
	 * What writing the rows allocates goes with the transaction: the
	 * memory current at pre-commit is the caller's, which a procedure's
	 * COMMIT keeps for its whole run (its SPI context grew by the size of
	 * the rows at every commit).
	 */
	old = MemoryContextSwitchTo(TopTransactionContext);
	events = palloc(n * sizeof(HlNewEvent));
	n = 0;
	for (PendingEvent *item = oldest; item != NULL; item = item->next)
	{
		HlNewEvent *e = &events[n++];

		e->seq = next_seq(item->earlier.n + 1);
		e->earlier = item->earlier.n > 0 ? &item->earlier : NULL;
		e->event = item->event;
		e->lease = &item->lease;
		e->at = event_time(item->event, &item->lease);
		e->free_at = event_free_at(item->event, &item->lease);
		events_recorded = true;
		if (strcmp(item->event, "renewed") != 0)
			terms_recorded = true;
		if (hl_shared == NULL)
			notify_now(item, e->seq);
	}
	hl_eventlog_record(events, n);
	pfree(events);
	MemoryContextSwitchTo(old);
	if (pushed)
		PopActiveSnapshot();
}

/*
 * This transaction took event numbers and has ended: its events are
 * visible (or gone), and the horizon may have moved past them.  Wake the
 * worker, which sends them, and hoplock_watch's sleepers.
 */
static void
events_ended(void)
{
	if (!events_recorded)
		return;
	events_recorded = false;
	hl_wake_event_readers(MyDatabaseId, terms_recorded);
	terms_recorded = false;
}

/*
 * Write the committed transaction's lines, oldest first (the list, newest
 * first, is turned around in place), then how many were left out.
 */
static void
write_lines(void)
{
	PendingLine *oldest = NULL;
	int64		left_out = 0;

	while (pending_lines != NULL)
	{
		PendingLine *item = pending_lines;

		pending_lines = item->next;
		item->next = oldest;
		oldest = item;
	}
	for (PendingLine *item = oldest; item != NULL; item = item->next)
	{
		if (item->line != NULL)
			ereport(LOG, (errmsg_internal("%s", item->line)));
		left_out += item->left_out;
	}
	if (left_out > 0)
		ereport(LOG,
				(errmsg("hoplock: " INT64_FORMAT " more events of this transaction were not logged",
						left_out),
				 errdetail("hoplock.log_events logs at most %d events of one transaction; hoplock_events() returns them all.",
						   MAX_LOGGED_EVENTS)));
	pending_count = 0;
}

static void
forget_lines(void)
{
	pending_lines = NULL;
	pending_count = 0;
}

static void
events_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			flush_events();
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			xact_branch_valid = false;
			/* visible to every snapshot from now on */
			unpublish_seq();
			events_ended();
			write_lines();
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			xact_branch_valid = false;
			unpublish_seq();
			events_ended();
			forget_lines();
			pending_events = NULL;
			break;
		default:
			break;
	}
}

static void
events_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (pending_events != NULL && pending_events->nest_level >= level)
			pending_events = pending_events->next;
		while (pending_lines != NULL && pending_lines->nest_level >= level)
		{
			if (pending_lines->line != NULL)
				pending_count--;
			pending_lines = pending_lines->next;
		}
		/* its numbers are gone: nothing of ours can appear below them */
		if (seq_published && seq_published_level >= level)
		{
			unpublish_seq();
			hl_wake_event_readers(MyDatabaseId, false);
		}
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (PendingEvent *item = pending_events;
			 item != NULL && item->nest_level >= level; item = item->next)
			item->nest_level = level - 1;
		for (PendingLine *item = pending_lines;
			 item != NULL && item->nest_level >= level; item = item->next)
			item->nest_level = level - 1;
		if (seq_published && seq_published_level >= level)
			seq_published_level = level - 1;
	}
}

/* Register the callbacks of this file's end-of-transaction work. */
void
hl_events_init(void)
{
	RegisterXactCallback(events_xact_callback, NULL);
	RegisterSubXactCallback(events_subxact_callback, NULL);
}
