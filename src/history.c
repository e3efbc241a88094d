/*-------------------------------------------------------------------------
 *
 * history.c
 *		The history of terms, so that "who led, and how often does
 *		leadership flap?" has an answer (the events themselves are in the
 *		event log, eventlog.c).  A term that ended has a row in
 *		hoplock_internal.history, written once, when it ends, in the
 *		transaction that ends it; a running term is its lease row (state
 *		'h'), which says all the history would (name, generation, owner,
 *		role, acquired_at) and is WAL-logged with it: the hoplock_history
 *		view shows the rows of the ones and the other.  Renewals write
 *		nothing here.
 *
 *		1.1 wrote a running term's row when it began: such a row, kept by
 *		the upgrade to 1.2 or by a restored 1.1 dump, is updated when its
 *		term ends, as 1.1 did, and the view shows it in place of the lease
 *		row.
 *
 *		The newest hoplock.history_size terms are kept, the running ones
 *		counted: the expiry worker drops older ones that ended -- each in a
 *		subtransaction of its own when the table has triggers (a user's
 *		foreign key that references it): a row that cannot be dropped is
 *		reported and left, and the others are dropped.
 *
 *		Rows are written directly (rowwrite.c), in the transaction of the
 *		change they record, under the lease row's compare-and-swap: two
 *		transactions never write the same term's row at once.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor_compat.h"
#include "history.h"
#include "hoplock.h"
#include "settings.h"
#include "shmem.h"
#include "storage.h"
#include "subxact.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"

/* Columns of hoplock_internal.lease that the trimming reads */
#define Anum_lease_name			1
#define Anum_lease_state		2
#define Anum_lease_generation	5

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
 * What hl_history_lock() locked: the history and its primary key (InvalidOid
 * if it did not), and, without shared memory, the event sequence.
 */
static Oid	locked_history = InvalidOid;
static Oid	locked_history_index = InvalidOid;
static Oid	locked_seq = InvalidOid;

/* Give back the lock of the history that hl_history_lock() took. */
static void
unlock_history(void)
{
	if (OidIsValid(locked_history_index))
		UnlockRelationOid(locked_history_index, RowExclusiveLock);
	if (OidIsValid(locked_history))
		UnlockRelationOid(locked_history, RowExclusiveLock);
	locked_history = InvalidOid;
	locked_history_index = InvalidOid;
}

/*
 * Lock the history (and, without shared memory, the event sequence) for a
 * term change, waiting no more than the lease table would (maintenance may
 * hold them); false, holding neither, if busy.  The locks last until the
 * transaction ends, or hl_history_unlock().
 */
bool
hl_history_lock(void)
{
	locked_history = InvalidOid;
	locked_history_index = InvalidOid;
	locked_seq = InvalidOid;
	if (hl_history_size > 0 &&
		!hl_lock_table(HL_REL_HISTORY, RowExclusiveLock, &locked_history,
					   &locked_history_index))
		return false;
	/* the sequence numbers events only without shared memory (events.c) */
	if (hl_shared != NULL)
		return true;
	locked_seq = hl_sequence_oid("event_seq");
	if (hl_lock_relation_briefly(locked_seq, RowExclusiveLock))
		return true;
	locked_seq = InvalidOid;
	unlock_history();
	return false;
}

/*
 * Give back the locks hl_history_lock() took, at the end of the call: the
 * history's always (the writes of the call took it again, and keep it),
 * the event sequence's only for a call that changed nothing ("changed"
 * false), whose events there are none of to number at commit.  So a call
 * that wrote nothing holds up no DDL (and no call queued behind that DDL)
 * for the rest of its transaction, nor while hoplock_wait sleeps.  The
 * lock manager counts acquisitions: a lock this transaction took for a
 * change it did make stays held.
 */
void
hl_history_unlock(bool changed)
{
	unlock_history();
	if (!changed && OidIsValid(locked_seq))
		UnlockRelationOid(locked_seq, RowExclusiveLock);
	locked_seq = InvalidOid;
}

/*
 * The row of term (name, generation), as the dirty snapshot sees it.  If
 * "xwait" is not NULL, it is set to the transaction inserting or deleting
 * that row, if one is in progress (InvalidTransactionId if none).
 */
static bool
fetch_term(HlRelation *rel, text *name, int64 generation, ItemPointer tid,
		   TupleTableSlot *slot, TransactionId *xwait)
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
	if (xwait != NULL)
		*xwait = !found ? InvalidTransactionId :
			TransactionIdIsValid(dirty.xmin) ? dirty.xmin : dirty.xmax;
	index_endscan(scan);
	return found;
}

/*
 * The role that began term "generation" of lease "name", as the history
 * has it, in *roleid; false if the history has no such term (or its role
 * is gone), or is locked by maintenance.  Never raises for either.
 */
bool
hl_history_term_role(text *name, int64 generation, Oid *roleid)
{
	HlRelation	rel;
	TupleTableSlot *slot;
	ItemPointerData tid;
	bool		found;

	*roleid = InvalidOid;
	if (!hl_open(HL_REL_HISTORY, AccessShareLock, false, &rel))
		return false;
	slot = table_slot_create(rel.heap, NULL);
	found = fetch_term(&rel, name, generation, &tid, slot, NULL) &&
		!slot->tts_isnull[Anum_history_role - 1];
	if (found)
		*roleid = get_role_oid(NameStr(*DatumGetName(slot->tts_values[Anum_history_role - 1])),
							   true);
	ExecDropSingleTupleTableSlot(slot);
	hl_close(&rel, false);
	return found && OidIsValid(*roleid);
}

/*
 * A term ended, at "ended_at", "how" (released, expired, force-released,
 * session ended, taken over, deleted, written over): its row.  (begin_seq
 * and end_seq held 1.1's event numbers; 1.2's events are in the event log,
 * numbered when they commit: 0 and NULL here.)  The common case is one
 * insert, whose primary key check finds no row of the term; a row that
 * 1.1 wrote when the term began is updated instead.
 *
 * As INSERT ... ON CONFLICT (name, generation) DO UPDATE would: a row of
 * the term that another transaction is inserting or deleting is waited
 * for, then looked for again; a conflict in another unique index (a
 * user's own, or one REINDEX CONCURRENTLY is building) with no row of the
 * term is raised as INSERT raises it.
 */
void
hl_history_end(const Lease *term, TimestampTz ended_at, const char *how)
{
	HlRelation	rel;
	TupleDesc	desc;
	TupleTableSlot *slot = NULL;
	Datum		values[Natts_history];
	bool		nulls[Natts_history] = {0};

	if (hl_history_size <= 0)
		return;
	open_history(&rel);
	desc = RelationGetDescr(rel.heap);
	values[Anum_history_name - 1] = PointerGetDatum(term->name);
	values[Anum_history_generation - 1] = Int64GetDatum(term->generation);
	values[Anum_history_owner - 1] = PointerGetDatum(term->owner);
	values[Anum_history_role - 1] = NameGetDatum(&term->owner_role);
	values[Anum_history_acquired_at - 1] = TimestampTzGetDatum(term->acquired_at);
	values[Anum_history_begin_seq - 1] = Int64GetDatum(0);
	values[Anum_history_ended_at - 1] = TimestampTzGetDatum(ended_at);
	nulls[Anum_history_end_seq - 1] = true;
	values[Anum_history_how - 1] = CStringGetTextDatum(how);

	while (!hl_row_insert_new(&rel, heap_form_tuple(desc, values, nulls)))
	{
		ItemPointerData tid;
		TransactionId xwait;

		static const int kept[] = {Anum_history_owner, Anum_history_role,
		Anum_history_acquired_at, Anum_history_begin_seq};

		if (slot == NULL)
			slot = table_slot_create(rel.heap, NULL);
		if (!fetch_term(&rel, term->name, term->generation, &tid, slot,
						&xwait))
		{
			/* no row of the term: raise (or not) as INSERT would */
			hl_row_insert(&rel, heap_form_tuple(desc, values, nulls));
			break;
		}
		if (TransactionIdIsValid(xwait))
		{
			/* another transaction's row: wait for it, and look again */
			XactLockTableWait(xwait, rel.heap, &tid, XLTW_InsertIndex);
			continue;
		}

		/* keep what the row says of the term's beginning, if it says it */
		for (size_t i = 0; i < lengthof(kept); i++)
		{
			if (!slot->tts_isnull[kept[i] - 1])
				values[kept[i] - 1] = slot->tts_values[kept[i] - 1];
		}
		if (hl_row_update(&rel, &tid, heap_form_tuple(desc, values, nulls)) != TM_Ok)
			elog(ERROR, "could not record the end of term " INT64_FORMAT " of lease \"%s\"",
				 term->generation, text_to_cstring(term->name));
		break;
	}
	if (slot != NULL)
		ExecDropSingleTupleTableSlot(slot);
	CommandCounterIncrement();
	hl_close(&rel, true);
}

/*
 * hoplock_internal.history_kept(): is a history kept (hoplock.history_size
 * above 0)?  The hoplock_history view shows the running terms, from the
 * lease rows, only then: with no history kept, there is none of them either.
 */
PG_FUNCTION_INFO_V1(hoplock_history_kept);

Datum
hoplock_history_kept(PG_FUNCTION_ARGS)
{
	PG_RETURN_BOOL(hl_history_size > 0);
}

/* A row of the history, as hl_history_prune sorts them */
typedef struct HistoryRow
{
	TimestampTz ended_at;		/* DT_NOEND while it runs */
	bool		ended;
	ItemPointerData tid;
} HistoryRow;

/*
 * Ended terms are dropped in the order of their ends: a long term that has
 * just ended keeps its row until the terms that ended before it are gone.
 */
static int
compare_rows(const void *a, const void *b)
{
	TimestampTz sa = ((const HistoryRow *) a)->ended_at;
	TimestampTz sb = ((const HistoryRow *) b)->ended_at;

	return (sa > sb) - (sa < sb);
}

/*
 * Rows the trimming could not drop, already reported: each is reported once
 * (while at most UNPRUNABLE_MAX are remembered), and tried again at each
 * trimming.
 */
#define UNPRUNABLE_MAX	64
static ItemPointerData unprunable[UNPRUNABLE_MAX];
static int	n_unprunable = 0;

static void
report_unprunable(ItemPointer tid, ErrorData *edata)
{
	bool		reported = false;

	for (int i = 0; i < n_unprunable && !reported; i++)
		reported = ItemPointerEquals(&unprunable[i], tid);
	if (!reported && n_unprunable < UNPRUNABLE_MAX)
		unprunable[n_unprunable++] = *tid;
	ereport(reported ? DEBUG1 : LOG,
			(errmsg("hoplock worker could not drop a row of table \"%s.history\"",
					HL_SCHEMA),
			 edata->detail != NULL ?
			 errdetail_internal("%s: %s", edata->message, edata->detail) :
			 errdetail_internal("%s", edata->message),
			 errhint("The worker leaves it and tries again at each trimming; the other rows are trimmed meanwhile.")));
}

/*
 * Drop the row at "tid" in a subtransaction of its own: an error (a user's
 * foreign key that references the row, a user's trigger) is reported, and
 * the row left.
 */
static bool
delete_isolated(HlRelation *rel, ItemPointer tid)
{
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool done = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(context);
	PG_TRY();
	{
		done = (hl_row_delete(rel, tid) == TM_Ok);
		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(context);
		CurrentResourceOwner = owner;
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		edata = hl_subxact_caught(context, owner);
		report_unprunable(tid, edata);
		FreeErrorData(edata);
		done = false;
	}
	PG_END_TRY();
	return done;
}

/* A running term's row that 1.1 wrote, as count_running looks for it */
typedef struct LegacyRow
{
	int64		generation;
	char	   *name;
} LegacyRow;

static int
compare_legacy(const void *a, const void *b)
{
	const LegacyRow *la = (const LegacyRow *) a;
	const LegacyRow *lb = (const LegacyRow *) b;

	if (la->generation != lb->generation)
		return (la->generation > lb->generation) ? 1 : -1;
	return strcmp(la->name, lb->name);
}

/*
 * How many running terms the lease table has (its rows in state 'h'), but
 * for those that have a row in the history already: the "nlegacy" rows of
 * "legacy" (sorted), which 1.1 wrote as their terms began.  -1 if the
 * table is locked (maintenance).
 *
 * The trimming needs the count only up to a point, and not at all while
 * the table cannot hold more than "room" rows (what its pages could hold,
 * every row a running term): then 0, the trimming's decision the same.
 * Counting stops at "enough".
 */
static int64
count_running(LegacyRow *legacy, int nlegacy, int64 room, int64 enough)
{
	HlRelation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;
	int64		running = 0;

	if (enough <= 0)
		return 0;
	if (!hl_open(HL_REL_LEASE, AccessShareLock, false, &rel))
		return -1;
	if ((int64) RelationGetNumberOfBlocks(rel.heap) * MaxHeapTuplesPerPage <= room)
	{
		hl_close(&rel, false);
		return 0;
	}
	slot = table_slot_create(rel.heap, NULL);
	scan = table_beginscan(rel.heap, GetActiveSnapshot(), 0, NULL);
	while (running < enough &&
		   table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		d;

		CHECK_FOR_INTERRUPTS();
		d = slot_getattr(slot, Anum_lease_state, &isnull);
		if (isnull || DatumGetChar(d) != LEASE_STATE_HELD)
			continue;
		if (nlegacy > 0)
		{
			LegacyRow	key;
			bool		name_null;
			bool		found;

			d = slot_getattr(slot, Anum_lease_generation, &isnull);
			key.generation = isnull ? 0 : DatumGetInt64(d);
			d = slot_getattr(slot, Anum_lease_name, &name_null);
			if (isnull || name_null)
				continue;
			key.name = TextDatumGetCString(d);
			found = bsearch(&key, legacy, nlegacy, sizeof(LegacyRow),
							compare_legacy) != NULL;
			pfree(key.name);
			if (found)
				continue;
		}
		running++;
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	hl_close(&rel, false);
	return running;
}

/*
 * The expiry worker: drop the oldest ended terms beyond
 * hoplock.history_size, the running ones counted, at most "batch" of them.
 * Returns how many, and sets *left if a row it would have dropped could not
 * be (or a table was busy).  When the table has triggers, whose errors
 * could stop the trimming for good, each row is dropped in a subtransaction
 * of its own (delete_isolated).
 */
int
hl_history_prune(int batch, bool *left)
{
	HlRelation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;
	HistoryRow *rows;
	LegacyRow  *legacy = NULL;
	int			nrows = 0;
	int			maxrows = 1024;
	int			nended = 0;
	int			nlegacy = 0;
	int			maxlegacy = 0;
	int64		total;
	int64		running = 0;
	int			dropped = 0;

	*left = false;
	if (!hl_open(HL_REL_HISTORY, RowExclusiveLock, false, &rel))
	{
		*left = true;
		return 0;
	}
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
		d = slot_getattr(slot, Anum_history_ended_at, &isnull);
		rows[nrows].ended = !isnull;
		rows[nrows].ended_at = isnull ? DT_NOEND : DatumGetTimestampTz(d);
		rows[nrows].tid = slot->tts_tid;
		nrows++;
		if (!isnull)
			nended++;
		else
		{
			/* a running term's row from 1.1: its lease row is not counted */
			bool		name_null;
			bool		gen_null;
			Datum		name = slot_getattr(slot, Anum_history_name, &name_null);
			Datum		gen = slot_getattr(slot, Anum_history_generation, &gen_null);

			if (name_null || gen_null)
				continue;
			if (nlegacy == maxlegacy)
			{
				maxlegacy = Max(16, maxlegacy * 2);
				legacy = legacy == NULL ?
					palloc(maxlegacy * sizeof(LegacyRow)) :
					repalloc_huge(legacy, (Size) maxlegacy * sizeof(LegacyRow));
			}
			legacy[nlegacy].generation = DatumGetInt64(gen);
			legacy[nlegacy].name = TextDatumGetCString(name);
			nlegacy++;
		}
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);

	/*
	 * The running terms count too, read from the lease rows: as many as
	 * decide how many ended terms go, none while they cannot make the
	 * terms more than hoplock.history_size.
	 */
	if (nended > 0)
	{
		int64		room = (int64) hl_history_size - nrows;

		if (nlegacy > 1)
			qsort(legacy, nlegacy, sizeof(LegacyRow), compare_legacy);
		running = count_running(legacy, nlegacy, room,
								room + Min(nended, batch));
	}
	total = nrows + running;
	if (running < 0)
		*left = true;			/* the lease table was busy: try again */

	if (running >= 0 && total > hl_history_size)
	{
		int64		excess = total - hl_history_size;
		bool		isolate = hl_table_has_after_triggers(&rel);

		qsort(rows, nrows, sizeof(HistoryRow), compare_rows);
		for (int i = 0; i < nrows && excess > 0 && dropped < batch; i++)
		{
			if (!rows[i].ended)
				continue;		/* running terms stay */
			if (isolate ? delete_isolated(&rel, &rows[i].tid) :
				hl_row_delete(&rel, &rows[i].tid) == TM_Ok)
				dropped++;
			else
				*left = true;
			excess--;
		}
	}
	pfree(rows);
	hl_close(&rel, dropped > 0);
	return dropped;
}
