/*-------------------------------------------------------------------------
 *
 * store.c
 *		The lease table, hoplock_internal.lease, read and written directly
 *		through the heap and index access methods, the way PostgreSQL's own
 *		catalog and replication code does it: no SQL, no planner, no
 *		executor on the hot path.
 *
 *		The relation OIDs and the result row type are looked up once per
 *		backend and cached; a relcache invalidation of any of them (DROP or
 *		ALTER EXTENSION) clears the cache.
 *
 *		Locking: callers open the table with RowExclusiveLock to write and
 *		AccessShareLock to read, and keep the lock until the transaction
 *		ends.  Rows are never locked: a writer updates without waiting
 *		(heap_update with wait = false) and reports a row that another
 *		transaction is changing as TM_BeingModified.  Inserting a new name
 *		is serialized by the term lock (see lease.c), so the unique index
 *		check never finds another inserter in flight and never waits.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/index.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "executor/tuptable.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* Columns of hoplock_internal.lease, in the install script's order */
enum
{
	Anum_lease_name = 1,
	Anum_lease_state,
	Anum_lease_owner,
	Anum_lease_owner_role,
	Anum_lease_generation,
	Anum_lease_acquired_at,
	Anum_lease_renewed_at,
	Anum_lease_expires_at,
	Anum_lease_session_pid,
	Anum_lease_session_start,
	Natts_lease = Anum_lease_session_start
};

static const Oid lease_column_types[Natts_lease] = {
	TEXTOID, CHAROID, TEXTOID, NAMEOID, INT8OID, TIMESTAMPTZOID,
	TIMESTAMPTZOID, TIMESTAMPTZOID, INT4OID, TIMESTAMPTZOID
};

/* Fields of the row type hoplock_lease, in the install script's order */
static const Oid result_column_types[] = {
	TEXTOID, TEXTOID, INT8OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID
};
#define Natts_result lengthof(result_column_types)

#define HOPLOCK_SCHEMA		"hoplock_internal"
#define HOPLOCK_TABLE		"lease"
#define HOPLOCK_INDEX		"lease_pkey"

/*
 * Per-backend cache of what never changes while the extension exists.  An
 * invalidation only marks it stale; the OIDs stay, so that a caller holding
 * one can tell whether it still names hoplock's relation.
 */
static struct
{
	bool		valid;
	bool		checked;		/* check_shape() passed since the last
								 * invalidation */
	Oid			table;
	Oid			index;
	Oid			result_typrelid;
	TupleDesc	result_desc;	/* in CacheMemoryContext */
	TupleDesc	stale_desc;		/* invalidated, freed at the next lookup */
}			cache;

/* Bumped by every relcache invalidation this backend processes */
static uint64 invalidations = 0;

static bool callback_registered = false;

static void
invalidate_cache(Datum arg, Oid relid)
{
	invalidations++;
	if (relid == InvalidOid || relid == cache.table || relid == cache.index)
	{
		cache.valid = false;
		cache.checked = false;
	}
	if (relid == InvalidOid || relid == cache.result_typrelid)
	{
		/*
		 * The call that is running may still be using result_desc: keep it
		 * until the next lookup.  An older stale copy predates it and is
		 * no longer in use.
		 */
		if (cache.result_desc != NULL)
		{
			if (cache.stale_desc != NULL)
				FreeTupleDesc(cache.stale_desc);
			cache.stale_desc = cache.result_desc;
			cache.result_desc = NULL;
		}
		cache.result_typrelid = InvalidOid;
	}
}

static void
fill_cache(void)
{
	Oid			nsp;
	Oid			table = InvalidOid;
	Oid			index = InvalidOid;

	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(invalidate_cache, (Datum) 0);
		callback_registered = true;
	}

	nsp = get_namespace_oid(HOPLOCK_SCHEMA, true);
	if (OidIsValid(nsp))
	{
		table = get_relname_relid(HOPLOCK_TABLE, nsp);
		index = get_relname_relid(HOPLOCK_INDEX, nsp);
	}
	if (!OidIsValid(table) || !OidIsValid(index))
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"hoplock\" is not installed in this database"),
				 errhint("Run CREATE EXTENSION hoplock.")));
	cache.table = table;
	cache.index = index;
	cache.valid = true;
	cache.checked = false;
}

/* what: "table" or "type" */
static void
damaged_install(const char *what, const char *name)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("%s \"%s\" does not have the layout hoplock expects",
					what, name),
			 errhint("Reinstall the extension with DROP EXTENSION and CREATE EXTENSION.")));
}

/*
 * The table and its index must be what the install script made, or nothing
 * below is safe.  Checked again after every invalidation of either.
 */
static void
check_shape(LeaseTable *table)
{
	TupleDesc	desc = RelationGetDescr(table->heap);
	Form_pg_index index = table->index->rd_index;

	if (table->heap->rd_rel->relam != HEAP_TABLE_AM_OID ||
		desc->natts != Natts_lease ||
		table->index->rd_rel->relam != BTREE_AM_OID ||
		index->indrelid != RelationGetRelid(table->heap) ||
		!index->indisunique || index->indnatts != 1 ||
		index->indkey.values[0] != Anum_lease_name ||
		table->index->rd_indexprs != NIL || table->index->rd_indpred != NIL)
		damaged_install("table", HOPLOCK_SCHEMA "." HOPLOCK_TABLE);
	for (int i = 0; i < Natts_lease; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || att->atttypid != lease_column_types[i])
			damaged_install("table", HOPLOCK_SCHEMA "." HOPLOCK_TABLE);
	}
}

/*
 * Lock and open the lease table and its index in "lockmode".  With nowait,
 * return false rather than wait for another transaction's lock (DDL on the
 * table, say): no writing call ever waits.
 *
 * Locking processes invalidations, which may mark the cache stale; then
 * check that the locked OIDs still name hoplock's relations, and start over
 * if not (DROP and CREATE EXTENSION in between).
 */
bool
lease_table_open(LeaseTable *table, LOCKMODE lockmode, bool nowait)
{
	Oid			relid;
	Oid			indexid;

	for (;;)
	{
		if (!cache.valid)
			fill_cache();
		relid = cache.table;
		indexid = cache.index;

		if (nowait)
		{
			if (!ConditionalLockRelationOid(relid, lockmode))
				return false;
			if (!ConditionalLockRelationOid(indexid, lockmode))
			{
				UnlockRelationOid(relid, lockmode);
				return false;
			}
		}
		else
		{
			LockRelationOid(relid, lockmode);
			LockRelationOid(indexid, lockmode);
		}

		if (!cache.valid)
			fill_cache();
		if (cache.table == relid && cache.index == indexid)
		{
			/*
			 * Checked and not invalidated since: the relation is there
			 * (dropping it would have invalidated the cache while we
			 * locked it).  Otherwise it may be gone.
			 */
			if (cache.checked)
			{
				table->heap = table_open(relid, NoLock);
				break;
			}
			table->heap = try_relation_open(relid, NoLock);
			if (table->heap != NULL)
				break;
			cache.valid = false;
		}
		UnlockRelationOid(indexid, lockmode);
		UnlockRelationOid(relid, lockmode);
	}

	table->index = index_open(indexid, NoLock);
	table->lockmode = lockmode;
	if (!cache.checked)
	{
		check_shape(table);
		cache.checked = true;
	}
	return true;
}

/*
 * Close the relations.  A caller that wrote keeps its locks until the
 * transaction ends; a reader gives them back at once, so that a fenced
 * transaction does not hold up DDL on the table (and every call queued
 * behind that DDL) for as long as it runs.
 */
void
lease_table_close(LeaseTable *table, bool keep_locks)
{
	LOCKMODE	release = keep_locks ? NoLock : table->lockmode;

	index_close(table->index, release);
	table_close(table->heap, release);
}

/*
 * The full transaction ID of a row version's xmin: the one that puts it
 * less than 2^32 transactions before nextXid.  A version left unchanged for
 * longer (frozen, its raw xmin kept) is given a later epoch than it was
 * written in, so its handle changes and a hoplock_write with the handle read
 * before is refused; it is never taken for another version, since no version
 * of the lease was written after the current one.
 */
static FullTransactionId
full_xid_of(TransactionId xid)
{
	FullTransactionId next = ReadNextFullTransactionId();
	uint64		next64 = U64FromFullTransactionId(next);
	uint32		behind = XidFromFullTransactionId(next) - xid;

	if (!TransactionIdIsNormal(xid) || behind > next64)
		return FullTransactionIdFromEpochAndXid(0, xid);
	return FullTransactionIdFromU64(next64 - behind);
}

static text *
copy_text_datum(Datum datum)
{
	return (text *) PG_DETOAST_DATUM_COPY(datum);
}

/* Deform a row of the lease table into *lease (text fields copied). */
static void
lease_from_slot(TupleTableSlot *slot, Lease *lease)
{
	HeapTuple	tuple;
	bool		should_free;

	slot_getallattrs(slot);
	lease->name = copy_text_datum(slot->tts_values[Anum_lease_name - 1]);
	lease->state = DatumGetChar(slot->tts_values[Anum_lease_state - 1]);
	lease->owner = copy_text_datum(slot->tts_values[Anum_lease_owner - 1]);
	namestrcpy(&lease->owner_role,
			   NameStr(*DatumGetName(slot->tts_values[Anum_lease_owner_role - 1])));
	lease->generation = DatumGetInt64(slot->tts_values[Anum_lease_generation - 1]);
	lease->acquired_at = DatumGetTimestampTz(slot->tts_values[Anum_lease_acquired_at - 1]);
	lease->renewed_at = DatumGetTimestampTz(slot->tts_values[Anum_lease_renewed_at - 1]);
	lease->expires_at = DatumGetTimestampTz(slot->tts_values[Anum_lease_expires_at - 1]);
	if (slot->tts_isnull[Anum_lease_session_pid - 1])
	{
		lease->session_pid = 0;
		lease->session_start = 0;
	}
	else
	{
		lease->session_pid = DatumGetInt32(slot->tts_values[Anum_lease_session_pid - 1]);
		lease->session_start = DatumGetTimestampTz(slot->tts_values[Anum_lease_session_start - 1]);
	}

	tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
	lease->xmin = HeapTupleHeaderGetRawXmin(tuple->t_data);
	lease->full_xmin = InvalidFullTransactionId;
	if (should_free)
		heap_freetuple(tuple);
}

/*
 * Find the version of the lease named "name" that "snapshot" sees.
 *
 * With a dirty snapshot that is the newest committed version, or one that
 * another transaction is inserting; version->inflight then names the
 * transaction that is inserting or updating it right now, if any.
 */
void
lease_fetch(LeaseTable *table, text *name, Snapshot snapshot,
			LeaseVersion *version)
{
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;

	ScanKeyInit(&key, Anum_lease_name, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(name));

	slot = table_slot_create(table->heap, NULL);
	scan = hoplock_index_beginscan(table->heap, table->index, snapshot, 1);
	index_rescan(scan, &key, 1, NULL, 0);

	version->found = index_getnext_slot(scan, ForwardScanDirection, slot);
	version->inflight = InvalidTransactionId;
	version->buffer = InvalidBuffer;
	if (version->found)
	{
		if (snapshot->snapshot_type == SNAPSHOT_DIRTY)
			version->inflight = TransactionIdIsValid(snapshot->xmin) ?
				snapshot->xmin : snapshot->xmax;

		version->tid = slot->tts_tid;

		/*
		 * Keep the page pinned until the caller is done with this version:
		 * a pin keeps pruning from reusing the line pointer at "tid", with
		 * or without a snapshot holding the horizon back.
		 */
		version->buffer = ((BufferHeapTupleTableSlot *) slot)->buffer;
		IncrBufferRefCount(version->buffer);

		lease_from_slot(slot, &version->lease);
	}

	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
}

/* Unpin the page of a version lease_fetch() found. */
void
lease_version_release(LeaseVersion *version)
{
	if (BufferIsValid(version->buffer))
		ReleaseBuffer(version->buffer);
	version->buffer = InvalidBuffer;
}

static HeapTuple
lease_form_tuple(LeaseTable *table, const Lease *lease)
{
	Datum		values[Natts_lease];
	bool		nulls[Natts_lease];

	memset(nulls, false, sizeof(nulls));
	values[Anum_lease_name - 1] = PointerGetDatum(lease->name);
	values[Anum_lease_state - 1] = CharGetDatum(lease->state);
	values[Anum_lease_owner - 1] = PointerGetDatum(lease->owner);
	values[Anum_lease_owner_role - 1] = NameGetDatum(&lease->owner_role);
	values[Anum_lease_generation - 1] = Int64GetDatum(lease->generation);
	values[Anum_lease_acquired_at - 1] = TimestampTzGetDatum(lease->acquired_at);
	values[Anum_lease_renewed_at - 1] = TimestampTzGetDatum(lease->renewed_at);
	values[Anum_lease_expires_at - 1] = TimestampTzGetDatum(lease->expires_at);
	values[Anum_lease_session_pid - 1] = Int32GetDatum(lease->session_pid);
	values[Anum_lease_session_start - 1] = TimestampTzGetDatum(lease->session_start);
	if (lease->session_pid == 0)
	{
		nulls[Anum_lease_session_pid - 1] = true;
		nulls[Anum_lease_session_start - 1] = true;
	}

	return heap_form_tuple(RelationGetDescr(table->heap), values, nulls);
}

static void
insert_index_entry(LeaseTable *table, HeapTuple tuple, const Lease *lease,
				   bool unchanged)
{
	Datum		values[1];
	bool		isnull[1] = {false};
	IndexInfo  *info = BuildIndexInfo(table->index);

	values[0] = PointerGetDatum(lease->name);
	hoplock_index_insert(table->index, values, isnull, &tuple->t_self,
						 table->heap, UNIQUE_CHECK_YES, unchanged, info);
}

/*
 * Insert a name's first row.  The caller holds the name's term lock, so no
 * other transaction can be inserting the same name.
 */
void
lease_insert(LeaseTable *table, Lease *lease)
{
	HeapTuple	tuple = lease_form_tuple(table, lease);

	heap_insert(table->heap, tuple, GetCurrentCommandId(true), 0, NULL);
	insert_index_entry(table, tuple, lease, false);
	lease->full_xmin = GetCurrentFullTransactionId();
	lease->xmin = XidFromFullTransactionId(lease->full_xmin);
	CommandCounterIncrement();
}

/*
 * Replace the version at "otid" without waiting.  Returns TM_Ok, or what
 * stood in the way: TM_BeingModified when another transaction is changing
 * the row right now, TM_Updated when one committed a newer version since the
 * caller looked.
 */
TM_Result
lease_update(LeaseTable *table, ItemPointer otid, Lease *lease)
{
	HeapTuple	tuple = lease_form_tuple(table, lease);
	TM_FailureData tmfd;
	bool		index_update;
	TM_Result	result;

	result = hoplock_heap_update(table->heap, otid, tuple,
								 GetCurrentCommandId(true), &tmfd,
								 &index_update);
	if (result == TM_Ok)
	{
		if (index_update)
			insert_index_entry(table, tuple, lease, true);
		lease->full_xmin = GetCurrentFullTransactionId();
		lease->xmin = XidFromFullTransactionId(lease->full_xmin);
		CommandCounterIncrement();
	}
	return result;
}

/*
 * The handle: the generation and the epoch-qualified xmin of the row
 * version.  Every committed change of a lease makes a new row version with
 * a new xmin, so two committed states never share a handle.
 */
void
lease_format_handle(const Lease *lease, char *buf)
{
	FullTransactionId xmin = lease->full_xmin;

	/* the epoch costs a look at nextXid: only for handles someone needs */
	if (!FullTransactionIdIsValid(xmin))
		xmin = full_xid_of(lease->xmin);
	snprintf(buf, LEASE_HANDLE_LEN, INT64_FORMAT ":" UINT64_FORMAT,
			 lease->generation, U64FromFullTransactionId(xmin));
}

/*
 * The row type hoplock_lease, looked up from the calling function's result
 * type on first use.  If an invalidation arrives while it is being looked
 * up, it is used for this call only and looked up again next time.
 */
TupleDesc
lease_result_desc(FunctionCallInfo fcinfo)
{
	Oid			typid;
	TupleDesc	desc;
	uint64		before = invalidations;
	MemoryContext old;

	if (cache.result_desc != NULL)
		return cache.result_desc;

	if (get_call_result_type(fcinfo, &typid, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	if (desc->natts != Natts_result)
		damaged_install("type", format_type_be(typid));
	for (int i = 0; i < Natts_result; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		if (att->attisdropped || att->atttypid != result_column_types[i])
			damaged_install("type", format_type_be(typid));
	}

	if (cache.stale_desc != NULL)
	{
		FreeTupleDesc(cache.stale_desc);
		cache.stale_desc = NULL;
	}

	old = MemoryContextSwitchTo(CacheMemoryContext);
	desc = CreateTupleDescCopy(desc);
	MemoryContextSwitchTo(old);

	cache.result_typrelid = get_typ_typrelid(typid);
	if (invalidations != before)
	{
		cache.stale_desc = desc;	/* freed at the next lookup */
		cache.result_typrelid = InvalidOid;
		return desc;
	}
	cache.result_desc = desc;
	return desc;
}

/*
 * Whether the extension's table exists in this database (the worker asks,
 * to notice DROP EXTENSION).  Must run in a transaction.
 */
bool
lease_table_exists(void)
{
	Oid			nsp;

	if (cache.valid)
		return true;
	nsp = get_namespace_oid(HOPLOCK_SCHEMA, true);
	return OidIsValid(nsp) &&
		OidIsValid(get_relname_relid(HOPLOCK_TABLE, nsp));
}

/*
 * Call "callback" for every row the active snapshot sees (the worker's
 * full scan), until it returns false.  The Lease passed to it is valid only
 * during the call: its fields point into memory reset for each row.
 */
void
lease_scan(bool (*callback) (const Lease *lease, void *arg), void *arg)
{
	LeaseTable	table;
	TableScanDesc scan;
	TupleTableSlot *slot;
	MemoryContext row_context;
	MemoryContext old;

	lease_table_open(&table, AccessShareLock, false);
	slot = table_slot_create(table.heap, NULL);
	scan = table_beginscan(table.heap, GetActiveSnapshot(), 0, NULL);
	row_context = AllocSetContextCreate(CurrentMemoryContext, "hoplock scan",
										ALLOCSET_SMALL_SIZES);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		Lease		lease;
		bool		keep_going;

		CHECK_FOR_INTERRUPTS();
		MemoryContextReset(row_context);
		old = MemoryContextSwitchTo(row_context);
		lease_from_slot(slot, &lease);
		keep_going = callback(&lease, arg);
		MemoryContextSwitchTo(old);
		if (!keep_going)
			break;
	}
	MemoryContextDelete(row_context);
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	lease_table_close(&table, false);
}
