/*-------------------------------------------------------------------------
 *
 * history.c
 *		The history of terms, hoplock_internal.history: one row per term,
 *		written when it begins and when it ends (never by a renewal), with
 *		the numbers of its first and last events, so that "who led, and how
 *		often does leadership flap?" has an answer, and a client can read
 *		the events it missed (hoplock_events).  The newest
 *		hoplock.history_size terms are kept; the expiry worker drops older
 *		ones that ended.
 *
 *		Rows are written directly (rowwrite.c), in the transaction of the
 *		change they record, under the lease row's compare-and-swap: two
 *		transactions never write the same term's row at once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(hoplock_events);

/* Columns of hoplock_internal.history */
enum
{
	Anum_history_name = 1,
	Anum_history_generation,
	Anum_history_owner,
	Anum_history_role,
	Anum_history_acquired_at,
	Anum_history_begin_seq,
	Anum_history_ended_at,
	Anum_history_end_seq,
	Anum_history_how,
	Natts_history = Anum_history_how
};

static void
open_history(HlRelation *rel)
{
	if (!hl_open(HL_REL_HISTORY, RowExclusiveLock, false, rel))
		hl_table_busy_error(HL_REL_HISTORY);
}

/*
 * Lock the history and the event sequence for writing, waiting no more
 * than the lease table would (maintenance may hold them); false if busy.
 * The locks last until the transaction ends.
 */
bool
hl_history_lock(void)
{
	HlRelation	rel;

	if (hl_history_size > 0)
	{
		if (!hl_open(HL_REL_HISTORY, RowExclusiveLock, false, &rel))
			return false;
		hl_close(&rel, false);
	}
	return hl_lock_relation_briefly(hl_sequence_oid("event_seq"),
									RowExclusiveLock);
}

/* The row of term (name, generation), as the dirty snapshot sees it. */
static bool
fetch_term(HlRelation *rel, text *name, int64 generation, ItemPointer tid,
		   TupleTableSlot *slot)
{
	ScanKeyData keys[2];
	IndexScanDesc scan;
	SnapshotData dirty;
	bool		found;

	InitDirtySnapshot(dirty);
	ScanKeyInit(&keys[0], Anum_history_name, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(name));
	ScanKeyInit(&keys[1], Anum_history_generation, BTEqualStrategyNumber,
				F_INT8EQ, Int64GetDatum(generation));
	scan = hl_index_beginscan(rel->heap, rel->index, &dirty, 2);
	index_rescan(scan, keys, 2, NULL, 0);
	found = index_getnext_slot(scan, ForwardScanDirection, slot);
	if (found)
	{
		*tid = slot->tts_tid;
		slot_getallattrs(slot);
	}
	index_endscan(scan);
	return found;
}

/* A term began: its row, with the number of its "acquired" event. */
void
hl_history_begin(const Lease *term, int64 seq)
{
	HlRelation	rel;
	Datum		values[Natts_history];
	bool		nulls[Natts_history] = {0};

	if (hl_history_size <= 0)
		return;
	open_history(&rel);
	values[Anum_history_name - 1] = PointerGetDatum(term->name);
	values[Anum_history_generation - 1] = Int64GetDatum(term->generation);
	values[Anum_history_owner - 1] = PointerGetDatum(term->owner);
	values[Anum_history_role - 1] = NameGetDatum(&term->owner_role);
	values[Anum_history_acquired_at - 1] = TimestampTzGetDatum(term->acquired_at);
	values[Anum_history_begin_seq - 1] = Int64GetDatum(seq);
	nulls[Anum_history_ended_at - 1] = true;
	nulls[Anum_history_end_seq - 1] = true;
	nulls[Anum_history_how - 1] = true;
	hl_row_insert(&rel, heap_form_tuple(RelationGetDescr(rel.heap), values, nulls));
	CommandCounterIncrement();
	hl_close(&rel, true);
}

/*
 * A term ended, at "ended_at", "how" (released, expired, force-released,
 * session ended, taken over, deleted, written over), with the number of
 * its last event.  A term whose row is gone (beyond hoplock.history_size,
 * or begun before the history existed) gets one now.
 */
void
hl_history_end(const Lease *term, TimestampTz ended_at, int64 seq,
			   const char *how)
{
	HlRelation	rel;
	TupleTableSlot *slot;
	ItemPointerData tid;
	Datum		values[Natts_history];
	bool		nulls[Natts_history] = {0};

	if (hl_history_size <= 0)
		return;
	open_history(&rel);
	slot = table_slot_create(rel.heap, NULL);
	values[Anum_history_name - 1] = PointerGetDatum(term->name);
	values[Anum_history_generation - 1] = Int64GetDatum(term->generation);
	values[Anum_history_owner - 1] = PointerGetDatum(term->owner);
	values[Anum_history_role - 1] = NameGetDatum(&term->owner_role);
	values[Anum_history_acquired_at - 1] = TimestampTzGetDatum(term->acquired_at);
	values[Anum_history_begin_seq - 1] = Int64GetDatum(0);
	values[Anum_history_ended_at - 1] = TimestampTzGetDatum(ended_at);
	values[Anum_history_end_seq - 1] = Int64GetDatum(seq);
	values[Anum_history_how - 1] = CStringGetTextDatum(how);

	if (fetch_term(&rel, term->name, term->generation, &tid, slot))
	{
		TM_Result	tm;

		/* keep what the row says of the term's beginning */
		values[Anum_history_owner - 1] = slot->tts_values[Anum_history_owner - 1];
		values[Anum_history_role - 1] = slot->tts_values[Anum_history_role - 1];
		values[Anum_history_acquired_at - 1] = slot->tts_values[Anum_history_acquired_at - 1];
		values[Anum_history_begin_seq - 1] = slot->tts_values[Anum_history_begin_seq - 1];
		tm = hl_row_update(&rel, &tid,
						   heap_form_tuple(RelationGetDescr(rel.heap), values, nulls));
		if (tm != TM_Ok)
			elog(ERROR, "could not record the end of term " INT64_FORMAT " of lease \"%s\" (result %d)",
				 term->generation, text_to_cstring(term->name), (int) tm);
	}
	else
		hl_row_insert(&rel, heap_form_tuple(RelationGetDescr(rel.heap), values, nulls));
	CommandCounterIncrement();
	ExecDropSingleTupleTableSlot(slot);
	hl_close(&rel, true);
}

/* A row of the history, as hl_history_prune sorts them */
typedef struct HistoryRow
{
	int64		begin_seq;
	bool		ended;
	ItemPointerData tid;
} HistoryRow;

static int
compare_rows(const void *a, const void *b)
{
	int64		sa = ((const HistoryRow *) a)->begin_seq;
	int64		sb = ((const HistoryRow *) b)->begin_seq;

	return (sa > sb) - (sa < sb);
}

/*
 * The expiry worker: drop the oldest ended terms beyond
 * hoplock.history_size, at most "batch" of them.  Returns how many.
 */
int
hl_history_prune(int batch)
{
	HlRelation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;
	HistoryRow *rows;
	int			nrows = 0;
	int			maxrows = 1024;
	int			dropped = 0;

	if (!hl_open(HL_REL_HISTORY, RowExclusiveLock, false, &rel))
		return 0;
	rows = palloc(maxrows * sizeof(HistoryRow));
	slot = table_slot_create(rel.heap, NULL);
	scan = table_beginscan(rel.heap, GetActiveSnapshot(), 0, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		d;

		CHECK_FOR_INTERRUPTS();
		if (nrows == maxrows)
		{
			maxrows *= 2;
			rows = repalloc_huge(rows, (Size) maxrows * sizeof(HistoryRow));
		}
		d = slot_getattr(slot, Anum_history_begin_seq, &isnull);
		rows[nrows].begin_seq = isnull ? 0 : DatumGetInt64(d);
		(void) slot_getattr(slot, Anum_history_ended_at, &isnull);
		rows[nrows].ended = !isnull;
		rows[nrows].tid = slot->tts_tid;
		nrows++;
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);

	if (nrows > hl_history_size)
	{
		int			excess = nrows - hl_history_size;

		qsort(rows, nrows, sizeof(HistoryRow), compare_rows);
		for (int i = 0; i < nrows && excess > 0 && dropped < batch; i++)
		{
			if (!rows[i].ended)
				continue;		/* running terms stay */
			if (hl_row_delete(&rel, &rows[i].tid) == TM_Ok)
				dropped++;
			excess--;
		}
	}
	pfree(rows);
	hl_close(&rel, dropped > 0);
	return dropped;
}

/* The event a term's end was announced as */
static const char *
end_event(const char *how)
{
	if (strcmp(how, "expired") == 0 || strcmp(how, "taken over") == 0)
		return "expired";
	return "released";
}

/* One event hoplock_events returns */
typedef struct Event
{
	int64		seq;
	const char *event;
	text	   *name;
	text	   *owner;
	int64		generation;
	TimestampTz at;
} Event;

static int
compare_events(const void *a, const void *b)
{
	int64		sa = ((const Event *) a)->seq;
	int64		sb = ((const Event *) b)->seq;

	return (sa > sb) - (sa < sb);
}

static void
add_event(Event **events, int *n, int *max, TupleTableSlot *slot,
		  int64 seq, const char *event, Datum at)
{
	Event	   *e;

	if (*n == *max)
	{
		*max = Max(*max * 2, 64);
		*events = *events == NULL ? palloc(*max * sizeof(Event)) :
			repalloc_huge(*events, (Size) *max * sizeof(Event));
	}
	e = &(*events)[(*n)++];
	e->seq = seq;
	e->event = event;
	e->name = (text *) PG_DETOAST_DATUM_COPY(slot->tts_values[Anum_history_name - 1]);
	e->owner = (text *) PG_DETOAST_DATUM_COPY(slot->tts_values[Anum_history_owner - 1]);
	e->generation = DatumGetInt64(slot->tts_values[Anum_history_generation - 1]);
	e->at = DatumGetTimestampTz(at);
}

/*
 * hoplock_events(since): the events after number "since", from the
 * history -- acquired, released, expired; renewals are not kept --, up to
 * the number below which no running transaction can still add one, in
 * number order.  A client that resumes from the last number it saw misses
 * nothing (but the events of terms the history has dropped).
 */
Datum
hoplock_events(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	int64		since = PG_GETARG_INT64(0);
	int64		horizon;
	Snapshot	snapshot;
	HlRelation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;
	Event	   *events = NULL;
	int			nevents = 0;
	int			maxevents = 0;

	InitMaterializedSRF(fcinfo, 0);

	/* the horizon first, then a snapshot that sees all that came before */
	horizon = hl_event_horizon();
	snapshot = RegisterSnapshot(GetLatestSnapshot());

	(void) hl_open(HL_REL_HISTORY, AccessShareLock, true, &rel);
	slot = table_slot_create(rel.heap, NULL);
	scan = table_beginscan(rel.heap, snapshot, 0, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		int64		begin_seq;

		CHECK_FOR_INTERRUPTS();
		slot_getallattrs(slot);
		begin_seq = DatumGetInt64(slot->tts_values[Anum_history_begin_seq - 1]);
		if (begin_seq > since && begin_seq <= horizon)
			add_event(&events, &nevents, &maxevents, slot, begin_seq, "acquired",
					  slot->tts_values[Anum_history_acquired_at - 1]);
		if (!slot->tts_isnull[Anum_history_end_seq - 1])
		{
			int64		end_seq = DatumGetInt64(slot->tts_values[Anum_history_end_seq - 1]);

			if (end_seq > since && end_seq <= horizon)
				add_event(&events, &nevents, &maxevents, slot, end_seq,
						  end_event(TextDatumGetCString(slot->tts_values[Anum_history_how - 1])),
						  slot->tts_values[Anum_history_ended_at - 1]);
		}
	}
	qsort(events, nevents, sizeof(Event), compare_events);
	for (int i = 0; i < nevents; i++)
	{
		Datum		values[6];
		bool		nulls[6] = {0};

		values[0] = Int64GetDatum(events[i].seq);
		values[1] = CStringGetTextDatum(events[i].event);
		values[2] = PointerGetDatum(events[i].name);
		values[3] = PointerGetDatum(events[i].owner);
		values[4] = Int64GetDatum(events[i].generation);
		values[5] = TimestampTzGetDatum(events[i].at);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	hl_close(&rel, false);
	UnregisterSnapshot(snapshot);
	PG_RETURN_VOID();
}
