/*-------------------------------------------------------------------------
 *
 * floor.c
 *		The generation a new term gets, and the floor of forgotten names.
 *
 *		A new term's generation is minted (branch.c) above the name's last
 *		one: a hybrid clock with the branch's tag, so that no copy of the
 *		data -- a promoted standby that missed the last grants, a restore of
 *		an old dump, in place or elsewhere -- hands out a generation any
 *		term of the name had before (docs/forks-and-events.md).
 *
 *		The table hoplock_internal.floor remembers the greatest generation
 *		of a name that was forgotten (its row removed), so that the name, if
 *		it comes back, starts above it even if the clock went back.  Its
 *		era columns are 1.1's: 1.2 writes them only to satisfy the table's
 *		check, and reads them never (1.1's generations are in the data).
 *
 *		Locking: the floor row is written rarely (a name forgotten), under a
 *		term lock of its own, taken without waiting; a forget that cannot
 *		have it forgets nothing.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "branch.h"
#include "compat.h"
#include "floor.h"
#include "hoplock.h"
#include "storage.h"
#include "termlock.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* Columns of hoplock_internal.floor */
enum
{
	Anum_floor_system_identifier = 1,
	Anum_floor_database,
	Anum_floor_base_era,
	Anum_floor_base_timeline,
	Anum_floor_last_timeline,
	Anum_floor_forgotten,
	Natts_floor = Anum_floor_forgotten
};

typedef struct FloorRow
{
	bool		found;
	bool		inflight;		/* another transaction is changing it */
	ItemPointerData tid;
	uint64		system_identifier;
	Oid			database;
	int64		base_era;
	int64		base_timeline;
	int64		last_timeline;
	int64		forgotten;
} FloorRow;

/*
 * The floor row: its newest committed version (f->found), whether another
 * transaction is changing it right now (f->inflight), and the greatest
 * "forgotten" of every version the dirty snapshot sees.
 */
static void
read_floor(HlRelation *rel, FloorRow *f)
{
	TableScanDesc scan;
	TupleTableSlot *slot;
	SnapshotData dirty;
	int64		forgotten = 0;

	memset(f, 0, sizeof(*f));
	InitDirtySnapshot(dirty);
	slot = table_slot_create(rel->heap, NULL);
	scan = table_beginscan(rel->heap, &dirty, 0, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		bool		inserting = TransactionIdIsValid(dirty.xmin);
		bool		updating = TransactionIdIsValid(dirty.xmax);

		slot_getallattrs(slot);
		for (int i = 0; i < Natts_floor; i++)
		{
			if (slot->tts_isnull[i])
				ereport(ERROR,
						(errcode(ERRCODE_DATA_CORRUPTED),
						 errmsg("the row of table \"hoplock_internal.floor\" has a null"),
						 errhint("The table was altered or damaged; restore it as the extension created it.")));
		}
		forgotten = Max(forgotten,
						DatumGetInt64(slot->tts_values[Anum_floor_forgotten - 1]));
		if (inserting || updating)
			f->inflight = true;
		if (inserting)
			continue;			/* not committed yet */
		f->found = true;
		f->tid = slot->tts_tid;
		f->system_identifier = (uint64) DatumGetInt64(slot->tts_values[Anum_floor_system_identifier - 1]);
		f->database = DatumGetObjectId(slot->tts_values[Anum_floor_database - 1]);
		f->base_era = DatumGetInt64(slot->tts_values[Anum_floor_base_era - 1]);
		f->base_timeline = DatumGetInt64(slot->tts_values[Anum_floor_base_timeline - 1]);
		f->last_timeline = DatumGetInt64(slot->tts_values[Anum_floor_last_timeline - 1]);
	}
	f->forgotten = forgotten;
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
}

static HeapTuple
form_floor(HlRelation *rel, const FloorRow *f)
{
	Datum		values[Natts_floor];
	bool		nulls[Natts_floor] = {0};

	values[Anum_floor_system_identifier - 1] = Int64GetDatum((int64) f->system_identifier);
	values[Anum_floor_database - 1] = ObjectIdGetDatum(f->database);
	values[Anum_floor_base_era - 1] = Int64GetDatum(f->base_era);
	values[Anum_floor_base_timeline - 1] = Int64GetDatum(f->base_timeline);
	values[Anum_floor_last_timeline - 1] = Int64GetDatum(f->last_timeline);
	values[Anum_floor_forgotten - 1] = Int64GetDatum(f->forgotten);
	return heap_form_tuple(RelationGetDescr(rel->heap), values, nulls);
}

/*
 * Bring the floor row up to date for "next", if nobody else is doing it
 * right now: it only records what every copy of the data computes alike,
 * so a term need not wait for it.  Returns whether it was written.
 */
static bool
write_floor(HlRelation *rel, const FloorRow *f, const FloorRow *next)
{
	text	   *key = cstring_to_text("");
	FloorRow	again;
	bool		wrote = false;

	if (f->inflight || !hl_term_trylock(key, ExclusiveLock))
		return false;
	read_floor(rel, &again);
	if (!again.inflight && again.found == f->found &&
		(!f->found || ItemPointerEquals(&again.tid, (ItemPointer) &f->tid)))
	{
		if (f->found)
			wrote = (hl_row_update(rel, &again.tid, form_floor(rel, next)) == TM_Ok);
		else
		{
			hl_row_insert(rel, form_floor(rel, next));
			wrote = true;
		}
	}
	if (wrote)
		CommandCounterIncrement();
	else
		hl_term_unlock(key, ExclusiveLock);
	return wrote;
}

/*
 * The first term of a new name writes the floor row if there is none, so
 * that the expiry worker can forget names (it never writes the first row:
 * during a restore, CREATE EXTENSION starts it before the dumped row is
 * copied in, and a row written first would make that copy fail).  Returns
 * the greatest generation forgotten, or false if the table is locked.
 */
static bool
forgotten_floor(int64 *forgotten)
{
	HlRelation	rel;
	FloorRow	f;
	bool		wrote = false;

	if (!hl_open(HL_REL_FLOOR, RowExclusiveLock, false, &rel))
		return false;
	read_floor(&rel, &f);
	if (!f.found && !f.inflight)
	{
		FloorRow	next = f;

		next.found = true;
		next.system_identifier = GetSystemIdentifier();
		next.database = MyDatabaseId;
		wrote = write_floor(&rel, &f, &next);
	}
	hl_close(&rel, wrote);
	*forgotten = f.forgotten;
	return true;
}

/*
 * The generation of a new term over "cur" (NULL: the name has no row), at
 * server time "now".  Returns false if it cannot be had now: *busy if a
 * table is locked by maintenance, otherwise another transaction is
 * beginning the branch.
 */
bool
hl_next_generation(const Lease *cur, TimestampTz now, int64 *generation,
				   bool *busy)
{
	int64		after;

	*busy = false;
	if (cur != NULL)
		after = cur->generation;
	else if (!forgotten_floor(&after))
	{
		*busy = true;
		return false;
	}
	return hl_mint(after, now, generation, busy);
}

/*
 * The expiry worker, at start (after a promotion, say): begin the branch
 * before any term needs it (branch.c).  Returns false if a table is locked
 * (the worker tries again later).
 */
bool
hl_floor_refresh(void)
{
	return hl_branch_refresh();
}

/*
 * A name with generation "generation" is being forgotten (its row
 * removed): raise the floor's "forgotten" to it, in this transaction, so
 * that the name, if it comes back, starts above.  Returns false, changing
 * nothing, if the floor row cannot be written now (another transaction is
 * writing it, or the table is locked): the name must not be forgotten then.
 */
bool
hl_floor_raise_forgotten(int64 generation)
{
	HlRelation	rel;
	FloorRow	f;
	FloorRow	next;
	bool		wrote;

	if (!hl_open(HL_REL_FLOOR, RowExclusiveLock, false, &rel))
		return false;
	read_floor(&rel, &f);
	if (!f.found && AmBackgroundWorkerProcess())
	{
		/* the expiry worker writes no first row (see forgotten_floor) */
		hl_close(&rel, false);
		return false;
	}
	if (f.found && !f.inflight && f.forgotten >= generation)
	{
		/* already high enough */
		hl_close(&rel, false);
		return true;
	}
	next = f;
	if (!f.found)
	{
		next.system_identifier = GetSystemIdentifier();
		next.database = MyDatabaseId;
	}
	next.found = true;
	next.forgotten = Max(f.forgotten, generation);
	wrote = write_floor(&rel, &f, &next);
	hl_close(&rel, wrote);
	return wrote;
}
