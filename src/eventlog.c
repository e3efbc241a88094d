/*-------------------------------------------------------------------------
 *
 * eventlog.c
 *		The event log, hoplock_internal.event: one row per event, with its
 *		number, written in the transaction of the change it records (below
 *		the executor, rowwrite.c, like the lease row), so that an event
 *		exists exactly when its change committed.  Read by number through
 *		its primary key (stream.c, delivery.c); rows the worker has sent and
 *		that are older than hoplock.event_retention are dropped by it.
 *
 *		And the one row of hoplock_internal.delivery: how far the worker has
 *		sent the log as NOTIFY, and the greatest number it dropped from it.
 *		Only the database's worker writes it, one transaction at a time.
 *
 *		Locking: writers take RowExclusiveLock on the table for the rest of
 *		their transaction, without waiting more than a call would for
 *		maintenance (LOCK TABLE, VACUUM FULL), which is contention,
 *		reported as such; readers take AccessShareLock only while they
 *		read, and wait for it like a query.  (The worker locks both tables
 *		without waiting before it reads them: delivery.c.)
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "eventlog.h"
#include "executor_compat.h"
#include "expiries.h"
#include "storage.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "commands/dbcommands.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* Columns of hoplock_internal.event */
enum
{
	Anum_event_seq = 1,
	Anum_event_event,
	Anum_event_name,
	Anum_event_owner,
	Anum_event_generation,
	Anum_event_expires_at,
	Anum_event_at,
	Anum_event_value,			/* may be null */
	Anum_event_free_at,			/* may be null */
	Natts_event = Anum_event_free_at
};

/* Columns of hoplock_internal.delivery */
enum
{
	Anum_delivery_delivered = 1,
	Anum_delivery_delivered_at,
	Anum_delivery_pruned_through,
	Anum_delivery_expiries_after,
	Natts_delivery = Anum_delivery_expiries_after
};

/* Record events in the log, in this transaction. */
void
hl_eventlog_record(const HlNewEvent *events, int nevents)
{
	HlRelation	rel;
	HeapTuple  *tuples = palloc(nevents * sizeof(HeapTuple));

	if (!hl_open(HL_REL_EVENT, RowExclusiveLock, false, &rel))
		hl_table_busy_error(HL_REL_EVENT);
	for (int i = 0; i < nevents; i++)
	{
		const HlNewEvent *e = &events[i];
		Datum		values[Natts_event];
		bool		nulls[Natts_event] = {0};

		values[Anum_event_seq - 1] = Int64GetDatum(e->seq);
		values[Anum_event_event - 1] = CStringGetTextDatum(e->event);
		values[Anum_event_name - 1] = PointerGetDatum(e->lease->name);
		values[Anum_event_owner - 1] = PointerGetDatum(e->lease->owner);
		values[Anum_event_generation - 1] = Int64GetDatum(e->lease->generation);
		values[Anum_event_expires_at - 1] = TimestampTzGetDatum(e->lease->expires_at);
		values[Anum_event_at - 1] = TimestampTzGetDatum(e->at);
		values[Anum_event_value - 1] = PointerGetDatum(e->lease->value);
		nulls[Anum_event_value - 1] = (e->lease->value == NULL);
		values[Anum_event_free_at - 1] = TimestampTzGetDatum(e->free_at);
		nulls[Anum_event_free_at - 1] = (e->free_at == 0);
		tuples[i] = heap_form_tuple(RelationGetDescr(rel.heap), values, nulls);
	}
	hl_row_insert_many(&rel, tuples, nevents);
	CommandCounterIncrement();
	hl_close(&rel, true);
	pfree(tuples);
}

/*
 * A row of the log that cannot be read: the table was altered or damaged.
 * Say so rather than return less than there is.
 */
static void
check_column(TupleTableSlot *slot, int attnum)
{
	if (slot->tts_isnull[attnum - 1])
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("a row of table \"hoplock_internal.event\" has a null in column \"%s\"",
						NameStr(TupleDescAttr(slot->tts_tupleDescriptor, attnum - 1)->attname)),
				 errhint("The table was altered or damaged; delete the row or restore the table.")));
}

/*
 * Visit the events numbered above "after" and up to "through", in number
 * order, as "snapshot" sees them, until "visit" returns false.  Returns the
 * number of the last one visited (0 if none).
 */
int64
hl_eventlog_scan(int64 after, int64 through, Snapshot snapshot,
				 HlEventVisitor visit, void *arg)
{
	HlRelation	rel;
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	int64		last = 0;

	(void) hl_open(HL_REL_EVENT, AccessShareLock, true, &rel);
	slot = table_slot_create(rel.heap, NULL);
	ScanKeyInit(&key, Anum_event_seq, BTGreaterStrategyNumber, F_INT8GT,
				Int64GetDatum(after));
	scan = hl_index_beginscan(rel.heap, rel.index, snapshot, 1);
	index_rescan(scan, &key, 1, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		HlLoggedEvent e;

		CHECK_FOR_INTERRUPTS();
		slot_getallattrs(slot);
		for (int i = 1; i < Anum_event_value; i++)
			check_column(slot, i);
		e.seq = DatumGetInt64(slot->tts_values[Anum_event_seq - 1]);
		if (e.seq > through)
			break;
		e.event = DatumGetTextPP(slot->tts_values[Anum_event_event - 1]);
		e.name = DatumGetTextPP(slot->tts_values[Anum_event_name - 1]);
		e.owner = DatumGetTextPP(slot->tts_values[Anum_event_owner - 1]);
		e.generation = DatumGetInt64(slot->tts_values[Anum_event_generation - 1]);
		e.expires_at = DatumGetTimestampTz(slot->tts_values[Anum_event_expires_at - 1]);
		e.at = DatumGetTimestampTz(slot->tts_values[Anum_event_at - 1]);
		e.value = slot->tts_isnull[Anum_event_value - 1] ? NULL :
			DatumGetTextPP(slot->tts_values[Anum_event_value - 1]);
		e.free_at = slot->tts_isnull[Anum_event_free_at - 1] ? 0 :
			DatumGetTimestampTz(slot->tts_values[Anum_event_free_at - 1]);
		last = e.seq;
		if (!visit(&e, arg))
			break;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	hl_close(&rel, false);
	return last;
}

/*
 * The greatest number of an event up to "through" (0 if none), in
 * *newest.  Without "wait", returns false if maintenance holds the log.
 */
bool
hl_eventlog_newest(int64 through, Snapshot snapshot, bool wait,
				   int64 *newest)
{
	HlRelation	rel;
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;

	*newest = 0;
	if (!hl_open(HL_REL_EVENT, AccessShareLock, wait, &rel))
		return false;
	slot = table_slot_create(rel.heap, NULL);
	ScanKeyInit(&key, Anum_event_seq, BTLessEqualStrategyNumber, F_INT8LE,
				Int64GetDatum(through));
	scan = hl_index_beginscan(rel.heap, rel.index, snapshot, 1);
	index_rescan(scan, &key, 1, NULL, 0);
	if (index_getnext_slot(scan, BackwardScanDirection, slot))
	{
		bool		isnull;
		Datum		d = slot_getattr(slot, Anum_event_seq, &isnull);

		if (!isnull)
			*newest = DatumGetInt64(d);
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	hl_close(&rel, false);
	return true;
}

/*
 * The delivery row as "snapshot" sees it; found false (and zeros) if there
 * is none: nothing was sent yet.
 */
void
hl_delivery_read(Snapshot snapshot, HlDelivery *d)
{
	HlRelation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;

	memset(d, 0, sizeof(*d));
	(void) hl_open(HL_REL_DELIVERY, AccessShareLock, true, &rel);
	scan = table_beginscan(rel.heap, snapshot, 0, NULL);
	if ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		TupleDesc	desc = RelationGetDescr(rel.heap);
		bool		isnull;
		Datum		v;

		d->found = true;
		d->tid = tuple->t_self;
		v = heap_getattr(tuple, Anum_delivery_delivered, desc, &isnull);
		d->delivered = isnull ? 0 : DatumGetInt64(v);
		v = heap_getattr(tuple, Anum_delivery_delivered_at, desc, &isnull);
		d->delivered_at = isnull ? 0 : DatumGetTimestampTz(v);
		v = heap_getattr(tuple, Anum_delivery_pruned_through, desc, &isnull);
		d->pruned_through = isnull ? 0 : DatumGetInt64(v);
		v = heap_getattr(tuple, Anum_delivery_expiries_after, desc, &isnull);
		d->has_expiries_after = !isnull;
		d->expiries_after = isnull ? 0 : DatumGetInt64(v);
		d->read_expiries_after = d->has_expiries_after;
		d->read_expiries_after_value = d->expiries_after;
	}
	table_endscan(scan);
	hl_close(&rel, false);
}

/*
 * Write the delivery row as "d" says, in this transaction (the worker's):
 * update the row read, or insert the first one.
 */
void
hl_delivery_write(HlDelivery *d)
{
	HlRelation	rel;
	Datum		values[Natts_delivery];
	bool		nulls[Natts_delivery] = {0};
	HeapTuple	tuple;

	if (!hl_open(HL_REL_DELIVERY, RowExclusiveLock, false, &rel))
		hl_table_busy_error(HL_REL_DELIVERY);
	values[Anum_delivery_delivered - 1] = Int64GetDatum(d->delivered);
	values[Anum_delivery_delivered_at - 1] = TimestampTzGetDatum(d->delivered_at);
	values[Anum_delivery_pruned_through - 1] = Int64GetDatum(d->pruned_through);
	values[Anum_delivery_expiries_after - 1] = Int64GetDatum(d->expiries_after);
	nulls[Anum_delivery_expiries_after - 1] = !d->has_expiries_after;
	tuple = heap_form_tuple(RelationGetDescr(rel.heap), values, nulls);

	/*
	 * Backends keep what they read of expiries_after
	 * (hl_eventlog_expiry_pending): tell them, at the commit, that it
	 * changed.
	 */
	if (d->has_expiries_after != d->read_expiries_after ||
		(d->has_expiries_after &&
		 d->expiries_after != d->read_expiries_after_value))
		CacheInvalidateRelcache(rel.heap);
	if (d->found)
	{
		TM_Result	tm = hl_row_update(&rel, &d->tid, tuple);

		if (tm != TM_Ok)
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not record how far the events of database \"%s\" were sent",
							get_database_name(MyDatabaseId)),
					 errdetail("Another transaction changed table \"hoplock_internal.delivery\".")));
		d->tid = tuple->t_self;
	}
	else
	{
		hl_row_insert(&rel, tuple);
		d->tid = tuple->t_self;
		d->found = true;
	}
	CommandCounterIncrement();
	hl_close(&rel, true);
}

/*
 * Drop up to "limit" events numbered up to "through" and recorded before
 * "older_than", in this transaction; returns how many, and raises
 * *pruned_through to the greatest number dropped.
 */
int64
hl_eventlog_prune(int64 through, TimestampTz older_than, int limit,
				  int64 *pruned_through)
{
	HlRelation	rel;
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	int64		dropped = 0;

	if (!hl_open(HL_REL_EVENT, RowExclusiveLock, false, &rel))
		hl_table_busy_error(HL_REL_EVENT);
	slot = table_slot_create(rel.heap, NULL);
	ScanKeyInit(&key, Anum_event_seq, BTLessEqualStrategyNumber, F_INT8LE,
				Int64GetDatum(through));
	scan = hl_index_beginscan(rel.heap, rel.index, GetActiveSnapshot(), 1);
	index_rescan(scan, &key, 1, NULL, 0);
	while (dropped < limit &&
		   index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		at;
		Datum		seq;

		CHECK_FOR_INTERRUPTS();
		seq = slot_getattr(slot, Anum_event_seq, &isnull);
		if (isnull)
			continue;
		at = slot_getattr(slot, Anum_event_at, &isnull);
		/* in number order, which is time order but for 1.1's numbers */
		if (!isnull && DatumGetTimestampTz(at) >= older_than)
			continue;
		if (hl_row_delete(&rel, &slot->tts_tid) == TM_Ok)
		{
			dropped++;
			*pruned_through = Max(*pruned_through, DatumGetInt64(seq));
		}
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	hl_close(&rel, dropped > 0);
	return dropped;
}

/*
 * What this backend last read of the delivery row's expiries_after: -1
 * not read (or dropped by an invalidation of the table, which the worker
 * sends when it sets or clears it), 0 none, 1 set (expiries_after_seen).
 */
static int	expiries_after_known = -1;
static int64 expiries_after_seen = 0;
static uint64 expiries_after_untrusted = 0; /* hl_expiries_untrusted_count()
											 * when it was read */
static Oid	delivery_relid = InvalidOid;
static bool delivery_callback = false;

static void
delivery_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == delivery_relid)
		expiries_after_known = -1;
}

/* The visitor of hl_eventlog_expiry_pending() */
typedef struct ExpiredSearch
{
	text	   *name;
	int64		generation;
	bool		found;
} ExpiredSearch;

static bool
find_expired(const HlLoggedEvent *e, void *arg)
{
	ExpiredSearch *s = (ExpiredSearch *) arg;

	if (e->generation == s->generation &&
		VARSIZE_ANY_EXHDR(e->event) == 7 &&
		memcmp(VARDATA_ANY(e->event), "expired", 7) == 0 &&
		VARSIZE_ANY_EXHDR(e->name) == VARSIZE_ANY_EXHDR(s->name) &&
		memcmp(VARDATA_ANY(e->name), VARDATA_ANY(s->name),
			   VARSIZE_ANY_EXHDR(s->name)) == 0)
	{
		s->found = true;
		return false;
	}
	return true;
}

/*
 * Was the expiry of term "generation" of "name" recorded by a mass expiry
 * whose lease rows may not all be written: an "expired" event of it
 * numbered above the delivery row's expiries_after?  For a writer of the
 * term's row, holding its lock, while the expiry set (expiries.c) cannot
 * say: after a start of shared memory, until the worker has looked.
 * Every such batch committed before that start, so the latest snapshot
 * sees all of it.
 */
bool
hl_eventlog_expiry_pending(text *name, int64 generation)
{
	ExpiredSearch s;
	Snapshot	latest;

	/*
	 * A mark set since it was read must be seen: one is set only by a
	 * worker whose set is trusted, and no longer trusted since.
	 */
	if (expiries_after_untrusted != hl_expiries_untrusted_count())
		expiries_after_known = -1;
	if (expiries_after_known == 0)
		return false;
	latest = RegisterSnapshot(GetLatestSnapshot());
	if (expiries_after_known < 0)
	{
		HlDelivery	d;
		HlRelation	rel;

		if (!delivery_callback)
		{
			CacheRegisterRelcacheCallback(delivery_invalidate, (Datum) 0);
			delivery_callback = true;
		}
		expiries_after_untrusted = hl_expiries_untrusted_count();
		pg_memory_barrier();
		(void) hl_open(HL_REL_DELIVERY, AccessShareLock, true, &rel);
		delivery_relid = RelationGetRelid(rel.heap);
		hl_close(&rel, false);
		hl_delivery_read(latest, &d);
		expiries_after_known = d.has_expiries_after ? 1 : 0;
		expiries_after_seen = d.expiries_after;
		if (expiries_after_known == 0)
		{
			UnregisterSnapshot(latest);
			return false;
		}
	}
	s.name = name;
	s.generation = generation;
	s.found = false;
	(void) hl_eventlog_scan(expiries_after_seen, PG_INT64_MAX, latest,
							find_expired, &s);
	UnregisterSnapshot(latest);
	return s.found;
}
