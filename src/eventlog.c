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
 *		But a mass expiry records its thousands of "expired" events as one
 *		row: the last term's event, whose columns earlier_* carry the
 *		others', numbered consecutively below it (HlEarlierEvents,
 *		events.c).  No other event is numbered between them, so a reader
 *		that unfolds the row where its number falls reads the log in
 *		number order.
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

#include "branch.h"
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
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/memutils.h"
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
	Anum_event_earlier_names,	/* these five: null, or all set */
	Anum_event_earlier_owners,
	Anum_event_earlier_generations,
	Anum_event_earlier_expires_at,
	Anum_event_earlier_values,
	Natts_event = Anum_event_earlier_values
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

/*
 * The columns of the events of "terms" (n of them, in this order) to
 * record in the row of the event that follows them: arrays allocated in
 * the current memory context.
 */
void
hl_eventlog_earlier(const Lease *terms, int n, HlEarlierEvents *earlier)
{
	Datum	   *names = palloc(n * sizeof(Datum));
	Datum	   *owners = palloc(n * sizeof(Datum));
	Datum	   *generations = palloc(n * sizeof(Datum));
	Datum	   *expires_at = palloc(n * sizeof(Datum));
	Datum	   *values = palloc(n * sizeof(Datum));
	bool	   *value_nulls = palloc(n * sizeof(bool));
	int			dims[1] = {n};
	int			lbs[1] = {1};

	for (int i = 0; i < n; i++)
	{
		names[i] = PointerGetDatum(terms[i].name);
		owners[i] = PointerGetDatum(terms[i].owner);
		generations[i] = Int64GetDatum(terms[i].generation);
		expires_at[i] = TimestampTzGetDatum(terms[i].expires_at);
		values[i] = PointerGetDatum(terms[i].value);
		value_nulls[i] = (terms[i].value == NULL);
	}
	earlier->n = n;
	earlier->names = PointerGetDatum(construct_array(names, n, TEXTOID, -1,
													 false, TYPALIGN_INT));
	earlier->owners = PointerGetDatum(construct_array(owners, n, TEXTOID, -1,
													  false, TYPALIGN_INT));
	earlier->generations =
		PointerGetDatum(construct_array(generations, n, INT8OID, 8,
										FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	earlier->expires_at =
		PointerGetDatum(construct_array(expires_at, n, TIMESTAMPTZOID, 8,
										FLOAT8PASSBYVAL, TYPALIGN_DOUBLE));
	earlier->values =
		PointerGetDatum(construct_md_array(values, value_nulls, 1, dims, lbs,
										   TEXTOID, -1, false, TYPALIGN_INT));
	pfree(names);
	pfree(owners);
	pfree(generations);
	pfree(expires_at);
	pfree(values);
	pfree(value_nulls);
}

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
		if (e->earlier != NULL)
		{
			values[Anum_event_earlier_names - 1] = e->earlier->names;
			values[Anum_event_earlier_owners - 1] = e->earlier->owners;
			values[Anum_event_earlier_generations - 1] = e->earlier->generations;
			values[Anum_event_earlier_expires_at - 1] = e->earlier->expires_at;
			values[Anum_event_earlier_values - 1] = e->earlier->values;
		}
		else
		{
			for (int a = Anum_event_earlier_names; a <= Anum_event_earlier_values; a++)
				nulls[a - 1] = true;
		}
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

/* How a row's columns earlier_* can be damaged */
typedef enum EarlierDamage
{
	DAMAGE_SOME_NULL,
	DAMAGE_TYPES,
	DAMAGE_LENGTHS,
	DAMAGE_NULL_ELEMENT,
	DAMAGE_TOO_MANY,
	DAMAGE_NUMBERS,
	DAMAGE_ORDER
} EarlierDamage;

/*
 * A row of the log whose earlier events cannot be read: as check_column,
 * an error rather than fewer events than there are.
 */
static void
earlier_damaged(int64 seq, EarlierDamage damage)
{
	const char *detail = NULL;

	switch (damage)
	{
		case DAMAGE_SOME_NULL:
			detail = gettext_noop("Some of its columns earlier_* are null, and some are not.");
			break;
		case DAMAGE_TYPES:
			detail = gettext_noop("Its columns earlier_* are not the one-dimensional arrays hoplock writes.");
			break;
		case DAMAGE_LENGTHS:
			detail = gettext_noop("Its columns earlier_* are arrays of different lengths.");
			break;
		case DAMAGE_NULL_ELEMENT:
			detail = gettext_noop("One of its earlier names, owners, generations or expiries is null.");
			break;
		case DAMAGE_TOO_MANY:
			detail = gettext_noop("It carries more events than hoplock writes to a row.");
			break;
		case DAMAGE_NUMBERS:
			detail = gettext_noop("It carries more events than there are numbers below its own.");
			break;
		case DAMAGE_ORDER:
			detail = gettext_noop("The numbers of the events it carries reach down to the row before it.");
			break;
	}
	ereport(ERROR,
			(errcode(ERRCODE_DATA_CORRUPTED),
			 errmsg("the row of event %lld of table \"hoplock_internal.event\" is damaged",
					(long long) seq),
			 errdetail_internal("%s", _(detail)),
			 errhint("The table was altered or damaged; delete the row or restore the table.")));
}

/* One of the arrays of earlier_*, of "n" elements (-1: whatever it has) */
static int
earlier_column(TupleTableSlot *slot, int attnum, int64 seq, Oid type,
			   int n, Datum **elems, bool **nulls, bool nulls_allowed)
{
	ArrayType  *array = DatumGetArrayTypeP(slot->tts_values[attnum - 1]);
	int			typlen = type == TEXTOID ? -1 : 8;
	bool		byval = type == TEXTOID ? false : FLOAT8PASSBYVAL;
	char		align = type == TEXTOID ? TYPALIGN_INT : TYPALIGN_DOUBLE;
	int			count;

	if (ARR_ELEMTYPE(array) != type || ARR_NDIM(array) != 1)
		earlier_damaged(seq, DAMAGE_TYPES);
	deconstruct_array(array, type, typlen, byval, align, elems, nulls, &count);
	if (n >= 0 && count != n)
		earlier_damaged(seq, DAMAGE_LENGTHS);
	for (int i = 0; i < count && !nulls_allowed; i++)
		if ((*nulls)[i])
			earlier_damaged(seq, DAMAGE_NULL_ELEMENT);
	return count;
}

/*
 * The events a row carries besides its own, its columns earlier_*
 * deconstructed
 */
typedef struct EarlierRead
{
	Datum	   *names;
	Datum	   *owners;
	Datum	   *generations;
	Datum	   *expires_at;
	Datum	   *values;
	bool	   *value_nulls;
} EarlierRead;

/* Does the row carry events besides its own: any of earlier_* set? */
static bool
carries_events(TupleTableSlot *slot)
{
	for (int a = Anum_event_earlier_names; a <= Anum_event_earlier_values; a++)
		if (!slot->tts_isnull[a - 1])
			return true;
	return false;
}

/*
 * Read the events row "slot" (numbered "seq") carries into "r", allocated
 * in the current memory context; returns how many (0: none).
 */
static int
read_earlier(TupleTableSlot *slot, int64 seq, EarlierRead *r)
{
	int			n;
	bool	   *nulls;

	if (!carries_events(slot))
		return 0;
	for (int a = Anum_event_earlier_names; a <= Anum_event_earlier_values; a++)
		if (slot->tts_isnull[a - 1])
			earlier_damaged(seq, DAMAGE_SOME_NULL);
	n = earlier_column(slot, Anum_event_earlier_names, seq, TEXTOID, -1,
					   &r->names, &nulls, false);
	/* what hoplock writes: a reader (the delivery) takes a row whole */
	if (n > HL_EVENTS_PER_ROW - 1)
		earlier_damaged(seq, DAMAGE_TOO_MANY);
	(void) earlier_column(slot, Anum_event_earlier_owners, seq, TEXTOID, n,
						  &r->owners, &nulls, false);
	(void) earlier_column(slot, Anum_event_earlier_generations, seq, INT8OID,
						  n, &r->generations, &nulls, false);
	(void) earlier_column(slot, Anum_event_earlier_expires_at, seq,
						  TIMESTAMPTZOID, n, &r->expires_at, &nulls, false);
	(void) earlier_column(slot, Anum_event_earlier_values, seq, TEXTOID, n,
						  &r->values, &r->value_nulls, true);
	/* their numbers, consecutive below the row's, must be numbers */
	if (seq >> HL_TAG_BITS < (int64) n + 1)
		earlier_damaged(seq, DAMAGE_NUMBERS);
	return n;
}

/* The number of the i-th of the n events a row numbered "seq" carries */
static inline int64
earlier_seq(int64 seq, int n, int i)
{
	return seq - ((int64) (n - i) << HL_TAG_BITS);
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
	MemoryContext row_context = NULL;
	bool		done = false;

	(void) hl_open(HL_REL_EVENT, AccessShareLock, true, &rel);
	slot = table_slot_create(rel.heap, NULL);
	ScanKeyInit(&key, Anum_event_seq, BTGreaterStrategyNumber, F_INT8GT,
				Int64GetDatum(after));
	scan = hl_index_beginscan(rel.heap, rel.index, snapshot, 1);
	index_rescan(scan, &key, 1, NULL, 0);
	while (!done && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		HlLoggedEvent e;
		EarlierRead r;
		int			n = 0;

		CHECK_FOR_INTERRUPTS();
		slot_getallattrs(slot);
		for (int i = 1; i < Anum_event_value; i++)
			check_column(slot, i);
		e.seq = DatumGetInt64(slot->tts_values[Anum_event_seq - 1]);
		e.event = DatumGetTextPP(slot->tts_values[Anum_event_event - 1]);

		/*
		 * First the events the row carries, in a context of their own
		 * (read_earlier refuses a row with some of earlier_* null).
		 */
		if (carries_events(slot))
		{
			MemoryContext old;

			if (row_context == NULL)
				row_context = AllocSetContextCreate(CurrentMemoryContext,
													"hoplock event row",
													ALLOCSET_DEFAULT_SIZES);
			old = MemoryContextSwitchTo(row_context);
			n = read_earlier(slot, e.seq, &r);
			MemoryContextSwitchTo(old);
		}
		for (int i = 0; i < n; i++)
		{
			HlLoggedEvent ee;

			ee.seq = earlier_seq(e.seq, n, i);
			if (ee.seq <= after)
				continue;
			if (ee.seq > through)
			{
				done = true;
				break;
			}
			if (ee.seq <= last)
				earlier_damaged(e.seq, DAMAGE_ORDER);
			ee.event = e.event;
			ee.name = DatumGetTextPP(r.names[i]);
			ee.owner = DatumGetTextPP(r.owners[i]);
			ee.generation = DatumGetInt64(r.generations[i]);
			ee.expires_at = DatumGetTimestampTz(r.expires_at[i]);
			ee.at = ee.expires_at;
			ee.value = r.value_nulls[i] ? NULL : DatumGetTextPP(r.values[i]);
			ee.free_at = 0;
			ee.row_left = n - i;
			last = ee.seq;
			if (!visit(&ee, arg))
			{
				done = true;
				break;
			}
		}
		if (done || e.seq > through)
			break;
		if (row_context != NULL)
			MemoryContextReset(row_context);
		e.row_left = 0;
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
	if (row_context != NULL)
		MemoryContextDelete(row_context);
	return last;
}

/*
 * The greatest number of an event up to "through" (0 if none), in
 * *newest.  Without "wait", returns false if maintenance holds the log.
 * "through" is a horizon (hl_event_horizon) or PG_INT64_MAX: neither falls
 * among the numbers a row carries below its own (a block of numbers is
 * published as one), so the greatest is a row's own.
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
