/*-------------------------------------------------------------------------
 *
 * branch.c
 *		Minting generations and row versions, and beginning the branches of
 *		the lease state they are minted on (docs/forks-and-events.md).
 *
 *		A value is c << HL_TAG_BITS | tag.  c is a hybrid clock: the
 *		greatest of the value it must exceed (plus one), the server's clock
 *		in microseconds since 2000-01-01, and the floor of the current
 *		branch.  So values grow within a branch whatever the clock does, a
 *		value minted later in real time is above those minted before it on
 *		any copy of the data (while the clock does not step back by more
 *		than the age of the fork), and two branches minting at once differ
 *		in their tags.
 *
 *		A branch begins at every fork the server can see: the first mint
 *		after a server start (the shared memory's incarnation, new at every
 *		start and crash-restart, is not the newest branch's), on another
 *		timeline (a promotion), in another cluster or database (pg_upgrade,
 *		a restore, CREATE DATABASE ... TEMPLATE).  Its floor is above every
 *		value the data holds and above the clock by HL_BRANCH_MARGIN, and
 *		its tag is random.  The newest branch is the one with the greatest
 *		floor.
 *
 *		Rows of hoplock's tables written by SQL -- a restore's COPY, in
 *		place or into another database, an INSERT, UPDATE, DELETE or
 *		TRUNCATE by a superuser -- may be a copy of the past: the statement
 *		leaves a row with reason "written" above every branch, which no
 *		mint takes for current, so that the next mint begins a branch above
 *		the data as it is now (hoplock writes its tables below the
 *		executor, and the hooks see only what SQL did).
 *
 *		Locking: hoplock_internal.branch is only inserted into, only here,
 *		by the transaction of a mint that finds no current branch committed
 *		(or of its own).  It never waits for another transaction beginning
 *		one: that one could be left open, and every value is minted above
 *		the one it follows whichever branch mints it, so two branches begun
 *		at once are harmless siblings.  A branch is cached per backend only
 *		once its row is committed, and dropped by a relcache invalidation of
 *		the table, which a row written by SQL sends at its commit.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "branch.h"
#include "compat.h"
#include "eventlog.h"
#include "hoplock.h"
#include "shmem.h"
#include "storage.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/xact.h"
#include "access/xlog.h"
#include "catalog/namespace.h"
#include "commands/extension.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "parser/parsetree.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* Columns of hoplock_internal.branch */
enum
{
	Anum_branch_tag = 1,
	Anum_branch_started_at,
	Anum_branch_floor,
	Anum_branch_parent_tag,
	Anum_branch_parent_started_at,
	Anum_branch_fork_point,
	Anum_branch_reason,
	Anum_branch_incarnation,
	Anum_branch_timeline,
	Anum_branch_system_identifier,
	Anum_branch_database,
	Natts_branch = Anum_branch_database
};

/* The columns of hoplock's tables that hold values, by attribute number */
#define Anum_lease_generation		5
#define Anum_lease_version			12
#define Anum_history_generation		2
#define Anum_history_begin_seq		6
#define Anum_history_end_seq		8
#define Anum_floor_forgotten		6
#define Anum_delivery_delivered		1
#define Anum_delivery_pruned_through	3

typedef struct Branch
{
	bool		found;
	bool		mine;			/* inserted by this transaction, uncommitted */
	int32		tag;
	TimestampTz started_at;
	int64		floor;			/* c */
	int64		incarnation;
	int64		timeline;
	int64		system_identifier;
	Oid			database;
} Branch;

/* The current branch, as this backend last found it committed */
static struct
{
	bool		valid;
	Oid			relid;
	Branch		branch;
}			cache;

static bool callback_registered = false;

static void
branch_invalidate(Datum arg, Oid relid)
{
	if (relid == InvalidOid || relid == cache.relid)
		cache.valid = false;
}

/* New at every start of the server's shared memory */
static int64
current_incarnation(void)
{
	return hl_shared != NULL ? (int64) hl_shared->incarnation :
		(int64) PgStartTime;
}

/* Is "b" the branch of this server run, timeline, cluster and database? */
static bool
branch_is_current(const Branch *b)
{
	return b->found &&
		b->incarnation == current_incarnation() &&
		b->timeline == (int64) GetWALInsertionTimeLine() &&
		b->system_identifier == (int64) GetSystemIdentifier() &&
		b->database == MyDatabaseId;
}

static Datum
branch_column(HeapTuple tuple, TupleDesc desc, int attnum, bool *isnull)
{
	Datum		d = heap_getattr(tuple, attnum, desc, isnull);

	if (*isnull && TupleDescAttr(desc, attnum - 1)->attnotnull)
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("a row of table \"hoplock_internal.branch\" has a null in column \"%s\"",
						NameStr(TupleDescAttr(desc, attnum - 1)->attname)),
				 errhint("The table was altered or damaged; restore it as the extension created it.")));
	return d;
}

/*
 * The newest branch: the greatest floor among the rows that are committed
 * or this transaction's own (a row another transaction is inserting is
 * not begun yet).
 */
static void
read_newest(HlRelation *rel, Branch *newest)
{
	TupleDesc	desc = RelationGetDescr(rel->heap);
	SnapshotData dirty;
	TableScanDesc scan;
	HeapTuple	tuple;

	memset(newest, 0, sizeof(*newest));
	InitDirtySnapshot(dirty);
	scan = table_beginscan(rel->heap, &dirty, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		bool		isnull;
		int64		floor;

		CHECK_FOR_INTERRUPTS();
		if (TransactionIdIsValid(dirty.xmin))
			continue;			/* being inserted by another transaction */
		floor = DatumGetInt64(branch_column(tuple, desc, Anum_branch_floor, &isnull));
		if (newest->found && floor <= newest->floor)
			continue;
		newest->found = true;
		newest->mine = TransactionIdIsCurrentTransactionId(HeapTupleHeaderGetRawXmin(tuple->t_data));
		newest->floor = floor;
		newest->tag = DatumGetInt32(branch_column(tuple, desc, Anum_branch_tag, &isnull));
		newest->started_at = DatumGetTimestampTz(branch_column(tuple, desc, Anum_branch_started_at, &isnull));
		newest->incarnation = DatumGetInt64(branch_column(tuple, desc, Anum_branch_incarnation, &isnull));
		newest->timeline = DatumGetInt64(branch_column(tuple, desc, Anum_branch_timeline, &isnull));
		newest->system_identifier = DatumGetInt64(branch_column(tuple, desc, Anum_branch_system_identifier, &isnull));
		newest->database = DatumGetObjectId(branch_column(tuple, desc, Anum_branch_database, &isnull));
	}
	table_endscan(scan);
}

/*
 * The greatest value (and its c) in columns "attnums" of table "which", as
 * the dirty snapshot sees them: committed, and in flight.  Returns false
 * if the table is locked.
 */
static bool
scan_max(HlRel which, const int *attnums, int nattnums, bool is_c,
		 int64 *max_c, int64 *max_value)
{
	HlRelation	rel;
	SnapshotData dirty;
	TableScanDesc scan;
	HeapTuple	tuple;
	TupleDesc	desc;

	if (!hl_open(which, AccessShareLock, false, &rel))
		return false;
	desc = RelationGetDescr(rel.heap);
	InitDirtySnapshot(dirty);
	scan = table_beginscan(rel.heap, &dirty, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		CHECK_FOR_INTERRUPTS();
		for (int i = 0; i < nattnums; i++)
		{
			bool		isnull;
			Datum		d;
			int64		v;

			if (attnums[i] > desc->natts)
				continue;
			d = heap_getattr(tuple, attnums[i], desc, &isnull);
			if (isnull)
				continue;
			v = DatumGetInt64(d);
			if (is_c)
				*max_c = Max(*max_c, v);
			else
			{
				*max_c = Max(*max_c, hl_value_c(v));
				*max_value = Max(*max_value, v);
			}
		}
	}
	table_endscan(scan);
	hl_close(&rel, false);
	return true;
}

/* A random tag, other than "avoid" */
static int32
random_tag(int32 avoid)
{
	for (;;)
	{
		uint32		r;
		int32		tag;

		if (!pg_strong_random(&r, sizeof(r)))
			r = (uint32) random();
		tag = 1 + (int32) (r % HL_MAX_TAG);
		if (tag != avoid)
			return tag;
	}
}

/*
 * Begin a branch over "parent" (found false: none), in this transaction.
 * Returns false if one of hoplock's tables is locked (maintenance).
 */
/*
 * The newest event number in the data (and raise *max_c to its c): the
 * fork point of a branch begun over it.  Returns false if one of hoplock's
 * tables is locked.
 */
static bool
newest_event_in_data(int64 *max_c, int64 *max_event)
{
	static const int event_cols[] = {Anum_history_begin_seq, Anum_history_end_seq};
	static const int delivery_cols[] = {Anum_delivery_delivered, Anum_delivery_pruned_through};
	SnapshotData dirty;
	int64		newest_event;

	if (!scan_max(HL_REL_HISTORY, event_cols, lengthof(event_cols), false, max_c, max_event) ||
		!scan_max(HL_REL_DELIVERY, delivery_cols, lengthof(delivery_cols), false, max_c, max_event))
		return false;
	/* the log, by its primary key: committed, and in flight */
	InitDirtySnapshot(dirty);
	if (!hl_eventlog_newest(PG_INT64_MAX, &dirty, false, &newest_event))
		return false;
	*max_c = Max(*max_c, hl_value_c(newest_event));
	*max_event = Max(*max_event, newest_event);
	return true;
}

static bool
begin_branch(HlRelation *rel, const Branch *parent, TimestampTz now,
			 Branch *branch)
{
	static const int lease_cols[] = {Anum_lease_generation, Anum_lease_version};
	static const int history_cols[] = {Anum_history_generation};
	static const int floor_cols[] = {Anum_floor_forgotten};
	static const int branch_cols[] = {Anum_branch_floor};
	static const int keepalive_cols[] = {6};	/* version */
	int64		max_c = 0;
	int64		max_value = 0;
	int64		max_event = 0;
	const char *reason;
	Datum		values[Natts_branch];
	bool		nulls[Natts_branch] = {0};

	/*
	 * The floor is above every value; the fork point is the newest event
	 * number: numbers of one counter are ordered in time, while in the
	 * first second of a branch the counters of generations, versions and
	 * events all count up from its floor, and a version can be above an
	 * event number minted after it.
	 */
	if (!scan_max(HL_REL_LEASE, lease_cols, lengthof(lease_cols), false, &max_c, &max_value) ||
		!scan_max(HL_REL_HISTORY, history_cols, lengthof(history_cols), false, &max_c, &max_value) ||
		!scan_max(HL_REL_FLOOR, floor_cols, lengthof(floor_cols), false, &max_c, &max_value) ||
		!scan_max(HL_REL_BRANCH, branch_cols, lengthof(branch_cols), true, &max_c, &max_value) ||
		!scan_max(HL_REL_KEEPALIVE, keepalive_cols, lengthof(keepalive_cols), false, &max_c, &max_value) ||
		!newest_event_in_data(&max_c, &max_event))
		return false;
	max_value = Max(max_value, max_event);

	memset(branch, 0, sizeof(*branch));
	branch->found = true;
	branch->mine = true;
	branch->tag = random_tag(parent->found ? parent->tag : 0);
	branch->started_at = now;
	branch->floor = Max(max_c + 1, now + HL_BRANCH_MARGIN);
	branch->incarnation = current_incarnation();
	branch->timeline = (int64) GetWALInsertionTimeLine();
	branch->system_identifier = (int64) GetSystemIdentifier();
	branch->database = MyDatabaseId;
	if (branch->floor > HL_MAX_C)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("hoplock's values are exhausted"),
				 errdetail("Generations are numbered by the microsecond up to the year 2142.")));

	/*
	 * Values are minted up to HL_BRANCH_MARGIN ahead of the clock, and a
	 * sibling begun a moment earlier by another transaction may have minted
	 * a little beyond that when this one reads the clock: warn of a clock
	 * that stepped back, not of that.
	 */
	if (max_c + 1 > now + 2 * HL_BRANCH_MARGIN)
		ereport(WARNING,
				(errmsg("the server's clock is %.3f s behind hoplock's data",
						(double) (max_c + 1 - now) / USECS_PER_SEC),
				 errdetail("New generations begin above the data; a copy of the data that does not show in it (a volume rolled back, a data directory cloned) is told apart only while the clock does not step back.")));

	if (!parent->found)
		reason = max_value > 0 ? "upgrade" : "first";
	else if (parent->system_identifier != branch->system_identifier ||
			 parent->database != branch->database)
		reason = "moved";
	else if (parent->timeline != branch->timeline)
		reason = "promotion";
	else
		reason = "start";

	values[Anum_branch_tag - 1] = Int32GetDatum(branch->tag);
	values[Anum_branch_started_at - 1] = TimestampTzGetDatum(now);
	values[Anum_branch_floor - 1] = Int64GetDatum(branch->floor);
	values[Anum_branch_parent_tag - 1] = Int32GetDatum(parent->tag);
	values[Anum_branch_parent_started_at - 1] = TimestampTzGetDatum(parent->started_at);
	nulls[Anum_branch_parent_tag - 1] = !parent->found;
	nulls[Anum_branch_parent_started_at - 1] = !parent->found;
	values[Anum_branch_fork_point - 1] = Int64GetDatum(max_event);
	values[Anum_branch_reason - 1] = CStringGetTextDatum(reason);
	values[Anum_branch_incarnation - 1] = Int64GetDatum(branch->incarnation);
	values[Anum_branch_timeline - 1] = Int64GetDatum(branch->timeline);
	values[Anum_branch_system_identifier - 1] = Int64GetDatum(branch->system_identifier);
	values[Anum_branch_database - 1] = ObjectIdGetDatum(branch->database);
	hl_row_insert(rel, heap_form_tuple(RelationGetDescr(rel->heap), values, nulls));
	CommandCounterIncrement();
	return true;
}

/*
 * The current branch, begun here if there is none.  Returns false, with
 * *busy, if a table is locked (maintenance).
 */
static bool
current_branch(TimestampTz now, Branch *branch, bool *busy)
{
	HlRelation	rel;
	Branch		newest;

	*busy = false;
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(branch_invalidate, (Datum) 0);
		callback_registered = true;
	}
	if (cache.valid && branch_is_current(&cache.branch))
	{
		*branch = cache.branch;
		return true;
	}

	if (!hl_open(HL_REL_BRANCH, RowExclusiveLock, false, &rel))
	{
		*busy = true;
		return false;
	}
	read_newest(&rel, &newest);
	if (branch_is_current(&newest))
	{
		if (!newest.mine)
		{
			cache.valid = true;
			cache.relid = RelationGetRelid(rel.heap);
			cache.branch = newest;
		}
		hl_close(&rel, newest.mine);
		*branch = newest;
		return true;
	}

	/*
	 * Another transaction may be beginning one too: begin ours
	 * all the same rather than wait for it, which could be left open.  Two
	 * branches begun at once are siblings of one history: each value is
	 * minted above the one it follows, whichever branch mints it.
	 */
	if (!begin_branch(&rel, &newest, now, branch))
	{
		hl_close(&rel, false);
		*busy = true;
		return false;
	}
	/* the row stays until the transaction ends; it is cached once committed */
	hl_close(&rel, true);
	return true;
}

/*
 * Mint a value greater than "after" (0: none), at server time "now".
 * Returns false, minting nothing, with *busy, if one of hoplock's tables
 * is locked by maintenance.
 */
bool
hl_mint(int64 after, TimestampTz now, int64 *value, bool *busy)
{
	Branch		branch;
	int64		c;

	if (!current_branch(now, &branch, busy))
		return false;
	c = Max(hl_value_c(after) + 1, now);
	c = Max(c, branch.floor);

	/*
	 * Never a clock part another session minted: terms of one name minted
	 * under different term locks (a lease's slots) in the same microsecond
	 * would otherwise share a generation, and a fence names its term by
	 * generation alone.
	 */
	if (hl_shared != NULL)
	{
		uint64		last = pg_atomic_read_u64(&hl_shared->last_minted);

		for (;;)
		{
			if (c <= (int64) last)
				c = (int64) last + 1;
			if (pg_atomic_compare_exchange_u64(&hl_shared->last_minted,
											   &last, (uint64) c))
				break;
		}
	}
	if (c > HL_MAX_C)
		ereport(ERROR,
				(errcode(ERRCODE_PROGRAM_LIMIT_EXCEEDED),
				 errmsg("hoplock's values are exhausted"),
				 errdetail("Generations are numbered by the microsecond up to the year 2142.")));
	*value = (c << HL_TAG_BITS) | branch.tag;
	return true;
}

/*
 * The current branch's tag and floor, for a number minted elsewhere (an
 * event number, events.c).  Returns false, with *busy, if a table is
 * locked (maintenance).
 */
bool
hl_branch_tag(TimestampTz now, int32 *tag, int64 *floor, bool *busy)
{
	Branch		branch;

	if (!current_branch(now, &branch, busy))
		return false;
	*tag = branch.tag;
	*floor = branch.floor;
	return true;
}

/* A row of the branch table, as the ancestry walk needs it */
typedef struct BranchRow
{
	int32		tag;
	TimestampTz started_at;
	int64		floor;
	bool		has_parent;
	int32		parent_tag;
	TimestampTz parent_started_at;
	bool		has_fork_point;
	int64		fork_point;
	bool		upgrade;		/* the first branch over 1.1's data */
	bool		marker;			/* rows written by SQL: mints nothing */
	int64		incarnation;	/* where it began */
	int64		timeline;
	int64		system_identifier;
	Oid			database;
} BranchRow;

/*
 * Were "a" and "b" begun at once, over one parent, in one server run of one
 * database and timeline?  Two mints that find no current branch each begin
 * one (current_branch): siblings that both number values of this data.
 */
static bool
branch_siblings(const BranchRow *a, const BranchRow *b)
{
	return !a->marker && !b->marker &&
		a->has_parent == b->has_parent &&
		(!a->has_parent || (a->parent_tag == b->parent_tag &&
							a->parent_started_at == b->parent_started_at)) &&
		a->incarnation == b->incarnation && a->timeline == b->timeline &&
		a->system_identifier == b->system_identifier &&
		a->database == b->database;
}

/*
 * Was "value" (an event number, say, that a client saw) minted in the
 * history of this data: on the newest branch, or on one of its ancestors
 * (or on a sibling of one, begun at the same time by another backend)
 * before the history left it (at most the fork point recorded by the
 * branch that left it)?  Values of 1.1 belong to the parent of the first
 * branch begun over 1.1's data.  Reads only: a branch not begun yet would
 * have the newest one for parent, and a fork point above every value in
 * the data now.
 */
bool
hl_branch_value_in_history(int64 value)
{
	HlRelation	rel;
	SnapshotData dirty;
	TableScanDesc scan;
	HeapTuple	tuple;
	TupleDesc	desc;
	BranchRow  *rows = NULL;
	int			nrows = 0;
	int			maxrows = 0;
	int			cur = -1;
	bool		legacy = value < HL_LEGACY_LIMIT;
	int32		tag = (int32) (value & HL_TAG_MASK);
	int64		limit = PG_INT64_MAX;
	bool		found = false;

	(void) hl_open(HL_REL_BRANCH, AccessShareLock, true, &rel);
	desc = RelationGetDescr(rel.heap);
	InitDirtySnapshot(dirty);
	scan = table_beginscan(rel.heap, &dirty, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		BranchRow  *r;
		bool		isnull;
		Datum		d;

		CHECK_FOR_INTERRUPTS();
		if (TransactionIdIsValid(dirty.xmin))
			continue;			/* being inserted: not begun yet */
		if (nrows == maxrows)
		{
			maxrows = Max(16, maxrows * 2);
			rows = rows == NULL ? palloc(maxrows * sizeof(BranchRow)) :
				repalloc(rows, maxrows * sizeof(BranchRow));
		}
		r = &rows[nrows++];
		r->tag = DatumGetInt32(branch_column(tuple, desc, Anum_branch_tag, &isnull));
		r->started_at = DatumGetTimestampTz(branch_column(tuple, desc, Anum_branch_started_at, &isnull));
		r->floor = DatumGetInt64(branch_column(tuple, desc, Anum_branch_floor, &isnull));
		d = heap_getattr(tuple, Anum_branch_parent_tag, desc, &isnull);
		r->has_parent = !isnull;
		r->parent_tag = isnull ? 0 : DatumGetInt32(d);
		d = heap_getattr(tuple, Anum_branch_parent_started_at, desc, &isnull);
		r->has_parent = r->has_parent && !isnull;
		r->parent_started_at = isnull ? 0 : DatumGetTimestampTz(d);
		d = heap_getattr(tuple, Anum_branch_fork_point, desc, &isnull);
		r->has_fork_point = !isnull;
		r->fork_point = isnull ? 0 : DatumGetInt64(d);
		d = branch_column(tuple, desc, Anum_branch_reason, &isnull);
		r->upgrade = strcmp(TextDatumGetCString(d), "upgrade") == 0;
		r->marker = strcmp(TextDatumGetCString(d), "written") == 0;
		r->incarnation = DatumGetInt64(branch_column(tuple, desc, Anum_branch_incarnation, &isnull));
		r->timeline = DatumGetInt64(branch_column(tuple, desc, Anum_branch_timeline, &isnull));
		r->system_identifier = DatumGetInt64(branch_column(tuple, desc, Anum_branch_system_identifier, &isnull));
		r->database = DatumGetObjectId(branch_column(tuple, desc, Anum_branch_database, &isnull));
		if (cur < 0 || r->floor > rows[cur].floor)
			cur = nrows - 1;
	}
	table_endscan(scan);
	hl_close(&rel, false);

	/* 1.1's data, no branch begun yet: only 1.1's values are of it */
	if (cur < 0)
		return legacy;

	/*
	 * Rows written by SQL since the newest branch began (a restore in
	 * place, a DELETE): the branch the next mint begins will have the
	 * newest event number in the data for fork point, and a value above it
	 * is of no history now already.
	 */
	if (rows[cur].marker)
	{
		int64		max_c = 0;
		int64		max_event = 0;

		if (!newest_event_in_data(&max_c, &max_event))
			hl_table_busy_error(HL_REL_EVENT);
		limit = max_event;
	}

	/* from the newest branch up its parents, each at most once */
	for (int steps = 0; steps < nrows && !found; steps++)
	{
		BranchRow  *r = &rows[cur];
		int			parent = -1;

		/* this branch, or a sibling begun at the same time as it */
		for (int i = 0; i < nrows && !legacy && !found; i++)
		{
			BranchRow  *s = &rows[i];

			if ((i == cur || branch_siblings(s, r)) && !s->marker &&
				s->tag == tag && hl_value_c(value) >= s->floor &&
				value <= limit)
				found = true;
		}
		if (r->has_fork_point)
			limit = Min(limit, r->fork_point);
		if (!r->has_parent)
		{
			found = found || (legacy && r->upgrade && value <= limit);
			break;
		}
		for (int i = 0; i < nrows; i++)
		{
			if (rows[i].tag == r->parent_tag &&
				rows[i].started_at == r->parent_started_at)
				parent = i;
		}
		if (parent < 0)
			break;				/* the parent's row is not in this data */
		cur = parent;
	}
	if (rows != NULL)
		pfree(rows);
	return found;
}

/*
 * Rows of one of hoplock's tables were just written by an SQL statement
 * (ExecutorEnd, or COPY and TRUNCATE through the ProcessUtility hook):
 * leave a row that no mint takes for current, above every branch, so that
 * the next mint begins a branch above the data.  Once per subtransaction.
 */
void
hl_branch_note_sql_write(void)
{
	static LocalTransactionId noted_lxid = InvalidLocalTransactionId;
	static SubTransactionId noted_subxid = InvalidSubTransactionId;
	HlRelation	rel;
	Branch		newest;
	Datum		values[Natts_branch];
	bool		nulls[Natts_branch] = {0};

	if (creating_extension || !IsTransactionState() ||
		!hl_extension_current() ||
		(noted_lxid == hl_my_lxid() &&
		 noted_subxid == GetCurrentSubTransactionId()))
		return;

	(void) hl_open(HL_REL_BRANCH, RowExclusiveLock, true, &rel);
	read_newest(&rel, &newest);
	values[Anum_branch_tag - 1] = Int32GetDatum(random_tag(0));
	values[Anum_branch_started_at - 1] = TimestampTzGetDatum(GetCurrentTimestamp());
	values[Anum_branch_floor - 1] = Int64GetDatum(newest.found ? newest.floor + 1 : 1);
	values[Anum_branch_parent_tag - 1] = Int32GetDatum(newest.tag);
	values[Anum_branch_parent_started_at - 1] = TimestampTzGetDatum(newest.started_at);
	nulls[Anum_branch_parent_tag - 1] = !newest.found;
	nulls[Anum_branch_parent_started_at - 1] = !newest.found;
	nulls[Anum_branch_fork_point - 1] = true;
	values[Anum_branch_reason - 1] = CStringGetTextDatum("written");
	values[Anum_branch_incarnation - 1] = Int64GetDatum(0);
	values[Anum_branch_timeline - 1] = Int64GetDatum((int64) GetWALInsertionTimeLine());
	values[Anum_branch_system_identifier - 1] = Int64GetDatum((int64) GetSystemIdentifier());
	values[Anum_branch_database - 1] = ObjectIdGetDatum(MyDatabaseId);
	hl_row_insert(&rel, heap_form_tuple(RelationGetDescr(rel.heap), values, nulls));
	/* every backend's cached branch goes stale when this commits */
	CacheInvalidateRelcache(rel.heap);
	CommandCounterIncrement();
	hl_close(&rel, true);
	cache.valid = false;
	noted_lxid = hl_my_lxid();
	noted_subxid = GetCurrentSubTransactionId();
}

/* Is relation "relid" one of hoplock's tables (by its schema)? */
bool
hl_branch_is_hoplock_table(Oid relid)
{
	Oid			nsp = get_namespace_oid(HL_SCHEMA, true);

	return OidIsValid(nsp) && get_rel_namespace(relid) == nsp;
}

/* Is "relid" the event log, hoplock_internal.event? */
bool
hl_branch_is_event_log(Oid relid)
{
	char	   *name;
	bool		result;

	if (!hl_branch_is_hoplock_table(relid))
		return false;
	name = get_rel_name(relid);
	result = name != NULL && strcmp(name, "event") == 0;
	if (name != NULL)
		pfree(name);
	return result;
}

/*
 * The expiry worker, as it starts: begin the branch of this server run,
 * timeline and database before a term has to (it reads every value in the
 * data), if there are leases.  Returns false if a table is locked
 * (maintenance).
 */
bool
hl_branch_refresh(void)
{
	Branch		branch;
	bool		busy;
	HlRelation	rel;
	SnapshotData dirty;
	TableScanDesc scan;
	bool		empty;

	/*
	 * Not over an empty lease table: CREATE EXTENSION starts the worker,
	 * and during a restore the dumped rows (the branches among them) come
	 * after it.  A branch begun before them would take none of them for
	 * its parent, and a number of the dumped history would look foreign.
	 * The first term, or the worker's first announcement, begins it.
	 */
	if (!hl_open(HL_REL_LEASE, AccessShareLock, false, &rel))
		return false;
	InitDirtySnapshot(dirty);
	scan = table_beginscan(rel.heap, &dirty, 0, NULL);
	empty = (heap_getnext(scan, ForwardScanDirection) == NULL);
	table_endscan(scan);
	hl_close(&rel, false);
	if (empty)
		return true;

	return current_branch(GetCurrentTimestamp(), &branch, &busy);
}
