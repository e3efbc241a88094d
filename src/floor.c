/*-------------------------------------------------------------------------
 *
 * floor.c
 *		The generation floor: the generation a new term gets.
 *
 *		Within one copy of the data, a name's next generation is its last
 *		plus one.  That is not enough when the data forks: a standby
 *		promoted after missing the old primary's last grants has never seen
 *		them, nor has a database restored from a dump that was taken before
 *		them.  So every generation is era * 2^40 + counter, and the era
 *		increases at every fork:
 *
 *		- Within a cluster (one system identifier) and a database, the era
 *		  of timeline T is base_era + T - base_timeline.  A promotion starts
 *		  a timeline greater than every one its cluster used before, so its
 *		  era is greater than any era the old primary could have used, seen
 *		  or not.
 *		- When the data lands in another cluster or database (pg_dump and
 *		  restore, pg_upgrade), the floor row it carries names the old
 *		  cluster and database, and says which timeline terms last began on
 *		  there ("last_timeline": written with the first term of each
 *		  timeline, in the same transaction).  The greatest era used there
 *		  is base_era + last_timeline - base_timeline; in the new place, the
 *		  era of timeline T is that plus T.  Every copy of the data computes
 *		  the same eras from the same row -- a standby that missed the row
 *		  being rewritten included -- and later timelines get later eras.
 *		- Without a row (a new install, or one upgraded from 1.0.0), the
 *		  era of timeline T is T - 1: 1.0.0's layout.
 *
 *		So after any chain of promotions, restores and upgrades, a new
 *		term's era is greater than the era of every term that came before it
 *		on that chain, and its generation greater than theirs.  What it
 *		assumes (a dump taken after the source's last promotion, timelines
 *		that grow) is in the README.
 *
 *		The floor also remembers the greatest generation of a name that was
 *		forgotten (its row removed), so that the name, if it comes back,
 *		starts above it.
 *
 *		Locking: the floor row is written rarely (the first term of a
 *		timeline, a cluster or a database, and the expiry worker as it
 *		starts), under a term lock of its own, taken without waiting.  What
 *		it records every copy of the data computes alike from the row as
 *		it was, so a term never waits for it: if another transaction is
 *		writing it, the term goes on, and that transaction records it.
 *		The era is cached per backend for the current timeline.
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
#include "access/xlog.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

#define ERA_SHIFT	40
#define MAX_ERA		((INT64CONST(1) << (63 - ERA_SHIFT)) - 1)

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

/* The era of the current timeline, as this backend last computed it */
static struct
{
	bool		valid;
	Oid			database;
	TimeLineID	timeline;
	int64		era;
}			era_cache;

static bool callback_registered = false;

static void
invalidate(Datum arg, Oid relid)
{
	era_cache.valid = false;
}

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
 * The era of timeline "tli" of this cluster and database, given the floor
 * row "f"; *next is the row to write first (next->found false: none).
 */
static int64
era_of(const FloorRow *f, uint64 sysid, Oid database, int64 tli,
	   FloorRow *next)
{
	int64		era;

	*next = *f;
	next->found = false;
	if (!f->found)
	{
		/* 1.0.0's layout; the row records where terms began */
		era = Max(tli - 1, 0);
		next->found = true;
		next->system_identifier = sysid;
		next->database = database;
		next->base_era = 0;
		next->base_timeline = 1;
		next->last_timeline = Max(tli, 1);
		next->forgotten = 0;
	}
	else if (f->system_identifier == sysid && f->database == database &&
			 tli >= f->last_timeline)
	{
		era = f->base_era + tli - f->base_timeline;
		if (tli > f->last_timeline)
		{
			next->found = true;
			next->last_timeline = tli;
		}
	}
	else
	{
		/* the data moved: start above the greatest era used where it was */
		int64		old_max = f->base_era + f->last_timeline - f->base_timeline;

		era = old_max + tli;
		next->found = true;
		next->system_identifier = sysid;
		next->database = database;
		next->base_era = old_max;
		next->base_timeline = 0;
		next->last_timeline = tli;
	}

	if (era < 0 || era > MAX_ERA)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("generation era " INT64_FORMAT " is out of range", era),
				 errdetail("hoplock supports %lld promotions, restores and upgrades of a database.",
						   (long long) MAX_ERA)));
	return era;
}

static int64
generation_after(const Lease *cur, int64 era, int64 forgotten)
{
	int64		floor = (era << ERA_SHIFT) + 1;
	int64		next = cur != NULL ? cur->generation + 1 : forgotten + 1;

	return Max(next, floor);
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
 * The era of this cluster, database and timeline, and the greatest
 * generation of a forgotten name; records what the floor row lacks, if it
 * can without waiting.  Returns false if the floor table is locked.
 */
static bool
current_era(int64 *era, int64 *forgotten, bool *wrote)
{
	uint64		sysid = GetSystemIdentifier();
	int64		tli = (int64) GetWALInsertionTimeLine();
	HlRelation	rel;
	FloorRow	f;
	FloorRow	next;

	*wrote = false;
	if (!hl_open(HL_REL_FLOOR, RowExclusiveLock, false, &rel))
		return false;
	read_floor(&rel, &f);
	*era = era_of(&f, sysid, MyDatabaseId, tli, &next);
	*forgotten = f.forgotten;
	if (next.found)
		*wrote = write_floor(&rel, &f, &next);
	hl_close(&rel, *wrote);

	/*
	 * Cached only when the row, as committed, already says what this era
	 * rests on: a write of it here could still roll back (or another's be
	 * in flight), and the next term must then try again.
	 */
	if (!next.found && !f.inflight)
	{
		era_cache.valid = true;
		era_cache.database = MyDatabaseId;
		era_cache.timeline = (TimeLineID) tli;
		era_cache.era = *era;
	}
	return true;
}

static void
register_callback(void)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(invalidate, (Datum) 0);
		callback_registered = true;
	}
}

/*
 * The generation of a new term over "cur" (NULL: the name has no row).
 * Returns false, with *busy, if the floor table is locked.
 */
bool
hl_next_generation(const Lease *cur, int64 *generation, bool *busy)
{
	int64		era;
	int64		forgotten;
	bool		wrote;

	*busy = false;
	register_callback();

	/* a name with a row needs only the era, cached per timeline */
	if (cur != NULL && era_cache.valid && era_cache.database == MyDatabaseId &&
		era_cache.timeline == GetWALInsertionTimeLine())
	{
		*generation = generation_after(cur, era_cache.era, 0);
		return true;
	}
	if (!current_era(&era, &forgotten, &wrote))
	{
		*busy = true;
		return false;
	}
	*generation = generation_after(cur, era, forgotten);
	return true;
}

/*
 * The expiry worker, at start (after a promotion, say): record the
 * current timeline in the floor row before any term needs it, so that a
 * dump taken from now on knows it.  Only a row that is there is brought up
 * to date: a database without one may be in the middle of a restore
 * (CREATE EXTENSION, which starts the worker, comes before the floor's
 * row is copied in, and a row written now would make that copy fail).
 * The first term writes it instead.
 */
void
hl_floor_refresh(void)
{
	uint64		sysid = GetSystemIdentifier();
	int64		tli = (int64) GetWALInsertionTimeLine();
	HlRelation	rel;
	FloorRow	f;
	FloorRow	next;

	register_callback();
	if (!hl_open(HL_REL_FLOOR, RowExclusiveLock, false, &rel))
		return;
	read_floor(&rel, &f);
	if (!f.found)
	{
		hl_close(&rel, false);
		return;
	}
	(void) era_of(&f, sysid, MyDatabaseId, tli, &next);
	hl_close(&rel, next.found && write_floor(&rel, &f, &next));
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
	uint64		sysid = GetSystemIdentifier();
	int64		tli = (int64) GetWALInsertionTimeLine();
	HlRelation	rel;
	FloorRow	f;
	FloorRow	next;
	bool		wrote;

	register_callback();
	if (!hl_open(HL_REL_FLOOR, RowExclusiveLock, false, &rel))
		return false;
	read_floor(&rel, &f);
	if (!f.found && AmBackgroundWorkerProcess())
	{
		/* the expiry worker writes no first row (see hl_floor_refresh) */
		hl_close(&rel, false);
		return false;
	}
	if (f.forgotten >= generation && f.found && !f.inflight)
	{
		(void) era_of(&f, sysid, MyDatabaseId, tli, &next);
		if (!next.found)
		{
			/* already high enough, and nothing else to record */
			hl_close(&rel, false);
			return true;
		}
	}
	(void) era_of(&f, sysid, MyDatabaseId, tli, &next);
	if (!next.found)
		next = f;
	next.found = true;
	next.forgotten = Max(f.forgotten, generation);
	wrote = write_floor(&rel, &f, &next);
	hl_close(&rel, wrote);
	return wrote;
}
