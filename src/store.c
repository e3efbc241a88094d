/*-------------------------------------------------------------------------
 *
 * store.c
 *		Lease rows: the table hoplock_internal.lease read and written
 *		directly, through its primary key and the heap, the way
 *		PostgreSQL's own catalog and replication code does it: no SQL, no
 *		planner on the hot path.  Finding and trusting the table is
 *		table.c's job; writing a row as the executor would is rowwrite.c's.
 *
 *		A writer locks a row only for the moment of its change, without
 *		waiting, as UPDATE locks it (rowwrite.c), and reports a row that
 *		another transaction is changing or holds a conflicting lock on.
 *		FOR KEY SHARE (a foreign key that references lease names) is no
 *		conflict: no update changes the name.  Inserting a new name is
 *		serialized by the name's term lock (see lease.c), so the unique
 *		index check never finds another inserter in flight and never waits.
 *
 *		A row is never trusted: a null where the table says NOT NULL (a
 *		damaged table) raises an error rather than being read.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor_compat.h"
#include "hoplock.h"
#include "keepalive.h"
#include "storage.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/multixact.h"
#include "access/relscan.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am.h"
#include "catalog/pg_index.h"
#include "catalog/pg_type.h"
#include "nodes/primnodes.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "storage/bufmgr.h"
#include "storage/procarray.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
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
	Anum_lease_owner_roleid,
	Anum_lease_version,
	Anum_lease_value,
	Anum_lease_step_down_at,
	Anum_lease_step_down_to,
	Anum_lease_priority,
	Anum_lease_handed_pid,
	Anum_lease_handed_start,
	Anum_lease_hold_until,
	Anum_lease_keepalive,
	Natts_lease = Anum_lease_keepalive
};

static Datum
column(TupleTableSlot *slot, int attnum, const char *colname)
{
	if (slot->tts_isnull[attnum - 1])
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("a row of table \"hoplock_internal.lease\" has a null \"%s\"",
						colname),
				 errhint("The table was altered or damaged; restore it as the extension created it.")));
	return slot->tts_values[attnum - 1];
}

/* Deform a row of the lease table into *lease (text fields copied). */
static void
lease_from_slot(TupleTableSlot *slot, Lease *lease)
{
	HeapTuple	tuple;
	bool		should_free;

	slot_getallattrs(slot);
	lease->name = (text *) PG_DETOAST_DATUM_COPY(column(slot, Anum_lease_name, "name"));
	lease->state = DatumGetChar(column(slot, Anum_lease_state, "state"));
	lease->owner = (text *) PG_DETOAST_DATUM_COPY(column(slot, Anum_lease_owner, "owner"));
	namestrcpy(&lease->owner_role,
			   NameStr(*DatumGetName(column(slot, Anum_lease_owner_role, "owner_role"))));
	lease->owner_roleid = DatumGetObjectId(column(slot, Anum_lease_owner_roleid, "owner_roleid"));
	lease->generation = DatumGetInt64(column(slot, Anum_lease_generation, "generation"));
	lease->acquired_at = DatumGetTimestampTz(column(slot, Anum_lease_acquired_at, "acquired_at"));
	lease->renewed_at = DatumGetTimestampTz(column(slot, Anum_lease_renewed_at, "renewed_at"));
	lease->expires_at = DatumGetTimestampTz(column(slot, Anum_lease_expires_at, "expires_at"));
	if (slot->tts_isnull[Anum_lease_session_pid - 1] ||
		slot->tts_isnull[Anum_lease_session_start - 1])
	{
		lease->session_pid = 0;
		lease->session_start = 0;
	}
	else
	{
		lease->session_pid = DatumGetInt32(slot->tts_values[Anum_lease_session_pid - 1]);
		lease->session_start = DatumGetTimestampTz(slot->tts_values[Anum_lease_session_start - 1]);
	}

	lease->version = slot->tts_isnull[Anum_lease_version - 1] ? 0 :
		DatumGetInt64(slot->tts_values[Anum_lease_version - 1]);
	lease->value = slot->tts_isnull[Anum_lease_value - 1] ? NULL :
		(text *) PG_DETOAST_DATUM_COPY(slot->tts_values[Anum_lease_value - 1]);
	lease->step_down_at = slot->tts_isnull[Anum_lease_step_down_at - 1] ? 0 :
		DatumGetTimestampTz(slot->tts_values[Anum_lease_step_down_at - 1]);
	lease->step_down_to = slot->tts_isnull[Anum_lease_step_down_to - 1] ? NULL :
		(text *) PG_DETOAST_DATUM_COPY(slot->tts_values[Anum_lease_step_down_to - 1]);
	lease->priority = slot->tts_isnull[Anum_lease_priority - 1] ? 0 :
		DatumGetInt32(slot->tts_values[Anum_lease_priority - 1]);
	if (slot->tts_isnull[Anum_lease_handed_pid - 1] ||
		slot->tts_isnull[Anum_lease_handed_start - 1])
	{
		lease->handed_pid = 0;
		lease->handed_start = 0;
	}
	else
	{
		lease->handed_pid = DatumGetInt32(slot->tts_values[Anum_lease_handed_pid - 1]);
		lease->handed_start = DatumGetTimestampTz(slot->tts_values[Anum_lease_handed_start - 1]);
	}
	lease->hold_until = slot->tts_isnull[Anum_lease_hold_until - 1] ? 0 :
		DatumGetTimestampTz(slot->tts_values[Anum_lease_hold_until - 1]);
	lease->keepalive = slot->tts_isnull[Anum_lease_keepalive - 1] ? 0 :
		DatumGetInt64(slot->tts_values[Anum_lease_keepalive - 1]);
	lease->keepalive_version = 0;

	tuple = ExecFetchSlotHeapTuple(slot, false, &should_free);
	lease->xmin = HeapTupleHeaderGetRawXmin(tuple->t_data);
	if (should_free)
		heap_freetuple(tuple);
}

/*
 * Find the version of the lease named "name" that "snapshot" sees.
 *
 * With a dirty snapshot that is the newest committed version, or one that
 * another transaction is inserting; version->inflight then names the
 * transaction that is inserting or updating it right now, if any, or
 * changing the keepalive the term is attached to (keepalive.c).  A term
 * attached to a keepalive has the keepalive's expiry.
 */
void
hl_store_fetch(HlRelation *rel, text *name, Snapshot snapshot,
			   LeaseVersion *version)
{
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;

	ScanKeyInit(&key, Anum_lease_name, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(name));

	slot = table_slot_create(rel->heap, NULL);
	scan = hl_index_beginscan(rel->heap, rel->index, snapshot, 1);
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
		hl_keepalive_apply(&version->lease, snapshot, &version->inflight,
						   NULL);
	}

	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
}

/*
 * Every row whose name is at least "lo" and below "hi", as the MVCC
 * snapshot "snapshot" sees them, in the order of their names:
 * callback(lease, arg) for each, the lease as hl_store_fetch() reads it (in
 * the caller's memory context, nothing pinned).  One descent of the index
 * for them all: the rows of a name's slots, which sort together
 * (slotkey.c), cost one lookup and not one each.
 */
void
hl_store_fetch_range(HlRelation *rel, text *lo, text *hi, Snapshot snapshot,
					 void (*callback) (Lease *lease, void *arg), void *arg)
{
	ScanKeyData keys[2];
	IndexScanDesc scan;
	TupleTableSlot *slot;

	Assert(snapshot->snapshot_type == SNAPSHOT_MVCC);
	ScanKeyInit(&keys[0], Anum_lease_name, BTGreaterEqualStrategyNumber,
				F_TEXT_GE, PointerGetDatum(lo));
	ScanKeyInit(&keys[1], Anum_lease_name, BTLessStrategyNumber,
				F_TEXT_LT, PointerGetDatum(hi));

	slot = table_slot_create(rel->heap, NULL);
	scan = hl_index_beginscan(rel->heap, rel->index, snapshot, 2);
	index_rescan(scan, keys, 2, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		Lease		lease;

		lease_from_slot(slot, &lease);
		hl_keepalive_apply(&lease, snapshot, NULL, NULL);
		callback(&lease, arg);
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
}

/*
 * Find lease "name" again at "tid", where the caller's last look with a
 * dirty snapshot found it, without searching the index: true, with
 * *version as hl_store_fetch() with a dirty snapshot would return it, if
 * the version there is still of that name, committed, and neither updated
 * since nor being updated -- the newest version of the lease, and the only
 * one the primary key can lead to.  False, with nothing found and nothing
 * held, if the caller must search the index instead.
 */
bool
hl_store_refetch(HlRelation *rel, text *name, ItemPointer tid,
				 LeaseVersion *version)
{
	SnapshotData dirty;
	TupleTableSlot *slot;
	HeapTuple	tuple;
	bool		ok;

	version->found = false;
	version->inflight = InvalidTransactionId;
	version->buffer = InvalidBuffer;

	InitDirtySnapshot(dirty);
	slot = table_slot_create(rel->heap, NULL);
	ok = table_tuple_fetch_row_version(rel->heap, tid, &dirty, slot) &&
		!TransactionIdIsValid(dirty.xmin) &&
		!TransactionIdIsValid(dirty.xmax);
	if (ok)
	{
		bool		isnull;
		text	   *found_name;

		tuple = ExecFetchSlotHeapTuple(slot, false, NULL);
		ok = ItemPointerEquals(&tuple->t_self, &tuple->t_data->t_ctid);
		found_name = DatumGetTextPP(slot_getattr(slot, Anum_lease_name,
												 &isnull));
		ok = ok && !isnull &&
			VARSIZE_ANY_EXHDR(found_name) == VARSIZE_ANY_EXHDR(name) &&
			memcmp(VARDATA_ANY(found_name), VARDATA_ANY(name),
				   VARSIZE_ANY_EXHDR(name)) == 0;
	}
	if (ok)
	{
		version->found = true;
		version->tid = *tid;
		/* pinned until the caller is done with it, as hl_store_fetch does */
		version->buffer = ((BufferHeapTupleTableSlot *) slot)->buffer;
		IncrBufferRefCount(version->buffer);
		lease_from_slot(slot, &version->lease);
		hl_keepalive_apply(&version->lease, &dirty, &version->inflight,
						   NULL);
	}
	ExecDropSingleTupleTableSlot(slot);
	return ok;
}

/*
 * Does a lock of strength "status" keep a hoplock update (which locks the
 * row LockTupleNoKeyExclusive) from going ahead?  Everything but FOR KEY
 * SHARE does.
 */
static bool
blocks_update(MultiXactStatus status)
{
	return status != MultiXactStatusForKeyShare;
}

/*
 * Another transaction, still running, that holds a lock on the row of
 * "version" which a hoplock update of it must wait for -- FOR SHARE, FOR NO
 * KEY UPDATE or FOR UPDATE, alone or as a member of a MultiXact of lockers
 * (an updater among them too) --, or InvalidTransactionId.  The dirty
 * snapshot does not say: it reports updaters only.  The row's xmax is read
 * as pgrowlocks reads it.  A snapshot of a moment, for reports.
 */
TransactionId
hl_store_locker(const LeaseVersion *version)
{
	Page		page;
	ItemId		lp;
	HeapTupleHeader htup;
	uint16		infomask = HEAP_XMAX_INVALID;
	TransactionId xmax = InvalidTransactionId;
	TransactionId locker = InvalidTransactionId;

	if (!version->found || !BufferIsValid(version->buffer))
		return InvalidTransactionId;

	LockBuffer(version->buffer, BUFFER_LOCK_SHARE);
	page = BufferGetPage(version->buffer);
	if (ItemPointerGetOffsetNumber(&version->tid) <= PageGetMaxOffsetNumber(page))
	{
		lp = PageGetItemId(page, ItemPointerGetOffsetNumber(&version->tid));
		if (ItemIdIsNormal(lp))
		{
			htup = (HeapTupleHeader) PageGetItem(page, lp);
			infomask = htup->t_infomask;
			xmax = HeapTupleHeaderGetRawXmax(htup);
		}
	}
	LockBuffer(version->buffer, BUFFER_LOCK_UNLOCK);

	if ((infomask & HEAP_XMAX_INVALID) || HEAP_LOCKED_UPGRADED(infomask) ||
		!TransactionIdIsValid(xmax))
		return InvalidTransactionId;

	if (infomask & HEAP_XMAX_IS_MULTI)
	{
		MultiXactMember *members;
		int			n;

		n = GetMultiXactIdMembers((MultiXactId) xmax, &members, false,
								  HEAP_XMAX_IS_LOCKED_ONLY(infomask));
		for (int i = 0; i < n; i++)
		{
			if (blocks_update(members[i].status) &&
				!TransactionIdIsCurrentTransactionId(members[i].xid) &&
				TransactionIdIsInProgress(members[i].xid))
			{
				locker = members[i].xid;
				break;
			}
		}
		if (n > 0)
			pfree(members);
		return locker;
	}

	/* a single locker; a single updater the dirty snapshot reports */
	if (!HEAP_XMAX_IS_LOCKED_ONLY(infomask) ||
		HEAP_XMAX_IS_KEYSHR_LOCKED(infomask) ||
		TransactionIdIsCurrentTransactionId(xmax) ||
		!TransactionIdIsInProgress(xmax))
		return InvalidTransactionId;
	return xmax;
}

/* Unpin the page of a version hl_store_fetch() found. */
void
hl_version_release(LeaseVersion *version)
{
	if (BufferIsValid(version->buffer))
		ReleaseBuffer(version->buffer);
	version->buffer = InvalidBuffer;
}

static HeapTuple
form_tuple(HlRelation *rel, const Lease *lease)
{
	Datum		values[Natts_lease];
	bool		nulls[Natts_lease];

	memset(nulls, false, sizeof(nulls));
	values[Anum_lease_name - 1] = PointerGetDatum(lease->name);
	values[Anum_lease_state - 1] = CharGetDatum(lease->state);
	values[Anum_lease_owner - 1] = PointerGetDatum(lease->owner);
	values[Anum_lease_owner_role - 1] = NameGetDatum(&lease->owner_role);
	values[Anum_lease_owner_roleid - 1] = ObjectIdGetDatum(lease->owner_roleid);
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
	values[Anum_lease_version - 1] = Int64GetDatum(lease->version);
	nulls[Anum_lease_version - 1] = (lease->version == 0);
	values[Anum_lease_value - 1] = PointerGetDatum(lease->value);
	nulls[Anum_lease_value - 1] = (lease->value == NULL);
	values[Anum_lease_step_down_at - 1] = TimestampTzGetDatum(lease->step_down_at);
	nulls[Anum_lease_step_down_at - 1] = (lease->step_down_at == 0);
	values[Anum_lease_step_down_to - 1] = PointerGetDatum(lease->step_down_to);
	nulls[Anum_lease_step_down_to - 1] = (lease->step_down_to == NULL);
	values[Anum_lease_priority - 1] = Int32GetDatum(lease->priority);
	values[Anum_lease_handed_pid - 1] = Int32GetDatum(lease->handed_pid);
	values[Anum_lease_handed_start - 1] = TimestampTzGetDatum(lease->handed_start);
	nulls[Anum_lease_handed_pid - 1] = (lease->handed_pid == 0);
	nulls[Anum_lease_handed_start - 1] = (lease->handed_pid == 0);
	values[Anum_lease_hold_until - 1] = TimestampTzGetDatum(lease->hold_until);
	nulls[Anum_lease_hold_until - 1] = (lease->hold_until == 0);
	values[Anum_lease_keepalive - 1] = Int64GetDatum(lease->keepalive);
	nulls[Anum_lease_keepalive - 1] = (lease->keepalive == 0);

	return heap_form_tuple(RelationGetDescr(rel->heap), values, nulls);
}

/*
 * Insert a name's first row.  The caller holds the name's term lock, so no
 * other transaction can be inserting the same name.
 */
void
hl_store_insert(HlRelation *rel, Lease *lease)
{
	HeapTuple	tuple = form_tuple(rel, lease);

	hl_row_insert(rel, tuple);
	lease->xmin = GetCurrentTransactionId();
	CommandCounterIncrement();
}

/* Replace the version at "otid" without waiting (see hl_row_update). */
TM_Result
hl_store_update(HlRelation *rel, ItemPointer otid, Lease *lease)
{
	return hl_store_update_checked(rel, otid, lease, NULL, NULL);
}

/* The same, asking "check" once the row is locked (hl_row_update_checked) */
TM_Result
hl_store_update_checked(HlRelation *rel, ItemPointer otid, Lease *lease,
						HlRowLockedCheck check, void *arg)
{
	HeapTuple	tuple = form_tuple(rel, lease);
	TM_Result	result;

	result = hl_row_update_checked(rel, otid, tuple, check, arg);
	if (result == TM_Ok)
	{
		lease->xmin = GetCurrentTransactionId();
		CommandCounterIncrement();
	}
	return result;
}

/*
 * The handle: "h2:" and the row version's version and generation; of a
 * term attached to a keepalive, "h3:" and the row's version, the
 * keepalive's version and the generation, so that a renewal through the
 * keepalive gives the term a new handle too.  Every
 * write of a lease gives its row a new version, minted above the last
 * (branch.c): two committed states of a lease never share a handle, on any
 * copy of the data.  A row not written since 1.1 has version 0.  (1.1's
 * handles, "generation:xid", can never match one.)
 */
void
hl_format_handle(const Lease *lease, char *buf)
{
	char	   *p = buf;

	/* pg_lltoa rather than snprintf: every renewal returns a handle */
	StaticAssertStmt(LEASE_HANDLE_LEN >= 3 + 20 + 1 + 20 + 1 + 20 + 1,	/* int64: 20 */
					 "LEASE_HANDLE_LEN is too short");
	memcpy(p, lease->keepalive_version != 0 ? "h3:" : "h2:", 3);
	p += 3;
	pg_lltoa(lease->version, p);
	p += strlen(p);
	*p++ = ':';
	if (lease->keepalive_version != 0)
	{
		pg_lltoa(lease->keepalive_version, p);
		p += strlen(p);
		*p++ = ':';
	}
	pg_lltoa(lease->generation, p);
}

/*
 * Call "callback" for the rows the active snapshot sees, in name order,
 * starting after name "after" (NULL: from the first), until it returns false
 * or "limit" rows were read (the worker reads the table so, a batch at a
 * time).  The Lease passed to it is valid only during the call, which runs
 * in a short-lived memory context.  Returns the number of rows read, and in
 * *last a copy (in the caller's memory context) of the last name read, or
 * NULL.  Raises 55P03 if the table is locked by maintenance.
 */
int
hl_store_scan(text *after, int limit,
			  bool (*callback) (const Lease *lease, void *arg), void *arg,
			  text **last)
{
	MemoryContext caller_context = CurrentMemoryContext;
	HlRelation	rel;
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	MemoryContext row_context;
	MemoryContext old;
	Keepalive	cache = {0};
	int			n = 0;

	*last = NULL;
	if (!hl_open(HL_REL_LEASE, AccessShareLock, false, &rel))
		hl_table_busy_error(HL_REL_LEASE);
	slot = table_slot_create(rel.heap, NULL);
	scan = hl_index_beginscan(rel.heap, rel.index, GetActiveSnapshot(),
							  after != NULL ? 1 : 0);
	if (after != NULL)
	{
		ScanKeyInit(&key, Anum_lease_name, BTGreaterStrategyNumber,
					F_TEXT_GT, PointerGetDatum(after));
		index_rescan(scan, &key, 1, NULL, 0);
	}
	else
		index_rescan(scan, NULL, 0, NULL, 0);

	row_context = AllocSetContextCreate(CurrentMemoryContext, "hoplock scan",
										ALLOCSET_SMALL_SIZES);
	while (n < limit && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		Lease		lease;
		bool		keep_going;

		CHECK_FOR_INTERRUPTS();
		n++;
		MemoryContextReset(row_context);
		old = MemoryContextSwitchTo(row_context);
		lease_from_slot(slot, &lease);
		/* (the cached keepalive's owner lives in the scan's context) */
		MemoryContextSwitchTo(caller_context);
		hl_keepalive_apply(&lease, GetActiveSnapshot(), NULL, &cache);
		MemoryContextSwitchTo(row_context);
		keep_going = callback(&lease, arg);
		MemoryContextSwitchTo(caller_context);
		if (*last != NULL)
			pfree(*last);
		*last = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(lease.name));
		MemoryContextSwitchTo(old);
		if (!keep_going)
			break;
	}
	MemoryContextDelete(row_context);
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	hl_close(&rel, false);
	return n;
}

/*
 * The lease table's btree index on keepalive, partial WHERE keepalive IS
 * NOT NULL, which hoplock_renew_all and the worker read a keepalive's terms
 * through.
 */
static bool
is_keepalive_index(Relation index)
{
	Form_pg_index form = index->rd_index;
	List	   *pred;
	NullTest   *nt;

	if (index->rd_rel->relam != BTREE_AM_OID || form->indnkeyatts != 1 ||
		form->indkey.values[0] != Anum_lease_keepalive ||
		RelationGetIndexExpressions(index) != NIL)
		return false;
	pred = RelationGetIndexPredicate(index);
	if (list_length(pred) != 1 || !IsA(linitial(pred), NullTest))
		return false;
	nt = (NullTest *) linitial(pred);
	return nt->nulltesttype == IS_NOT_NULL && !nt->argisrow &&
		IsA(nt->arg, Var) &&
		((Var *) nt->arg)->varattno == Anum_lease_keepalive;
}

/* That index, opened as hl_open_index() opens one: NULL if locked */
static Relation
open_keepalive_index(HlRelation *rel)
{
	return hl_open_index(rel, is_keepalive_index,
						 "on keepalive WHERE keepalive IS NOT NULL");
}

/*
 * Another transaction that has updated or deleted the row version in
 * "slot" (a buffer slot of a heap tuple an MVCC snapshot sees), and is
 * running or committed: InvalidTransactionId if none.  Read under the
 * buffer's share lock; a row no one changes costs a look at its header.
 */
static TransactionId
row_changing(TupleTableSlot *slot)
{
	BufferHeapTupleTableSlot *bslot = (BufferHeapTupleTableSlot *) slot;
	HeapTupleHeader htup;
	TransactionId xmax = InvalidTransactionId;

	if (!TTS_IS_BUFFERTUPLE(slot) || !BufferIsValid(bslot->buffer) ||
		bslot->base.tuple == NULL)
		return InvalidTransactionId;
	htup = bslot->base.tuple->t_data;
	LockBuffer(bslot->buffer, BUFFER_LOCK_SHARE);
	if (!(htup->t_infomask & HEAP_XMAX_INVALID) &&
		!HEAP_XMAX_IS_LOCKED_ONLY(htup->t_infomask))
		xmax = HeapTupleHeaderGetUpdateXid(htup);
	LockBuffer(bslot->buffer, BUFFER_LOCK_UNLOCK);
	if (!TransactionIdIsValid(xmax) || TransactionIdIsCurrentTransactionId(xmax))
		return InvalidTransactionId;
	if (TransactionIdIsInProgress(xmax) || TransactionIdDidCommit(xmax))
		return xmax;
	return InvalidTransactionId;
}

/* Deform each row into a Lease in a short-lived context and call back. */
static int
scan_rows(bool (*next) (void *scan, TupleTableSlot *slot), void *scandesc,
		  TupleTableSlot *slot, Oid roleid, text *owner,
		  bool (*callback) (const Lease *lease, void *arg), void *arg)
{
	MemoryContext row_context;
	MemoryContext old;
	int			n = 0;

	row_context = AllocSetContextCreate(CurrentMemoryContext,
										"hoplock term scan",
										ALLOCSET_SMALL_SIZES);
	while (next(scandesc, slot))
	{
		Lease		lease;
		bool		keep_going;

		CHECK_FOR_INTERRUPTS();
		if (owner != NULL)
		{
			bool		isnull;
			Datum		d;
			text	   *o;
			bool		same;

			/* (the owner's rows only, told before deforming the rest) */
			d = slot_getattr(slot, Anum_lease_owner_roleid, &isnull);
			if (isnull || DatumGetObjectId(d) != roleid)
				continue;
			d = slot_getattr(slot, Anum_lease_owner, &isnull);
			if (isnull)
				continue;
			o = DatumGetTextPP(d);
			same = hl_text_equal(o, owner);
			if ((Pointer) o != DatumGetPointer(d))
				pfree(o);
			if (!same)
				continue;
		}
		n++;
		MemoryContextReset(row_context);
		old = MemoryContextSwitchTo(row_context);
		lease_from_slot(slot, &lease);
		lease.changing = row_changing(slot);
		keep_going = callback(&lease, arg);
		MemoryContextSwitchTo(old);
		if (!keep_going)
			break;
	}
	MemoryContextDelete(row_context);
	return n;
}

static bool
next_from_index(void *scan, TupleTableSlot *slot)
{
	return index_getnext_slot((IndexScanDesc) scan, ForwardScanDirection, slot);
}

static bool
next_from_heap(void *scan, TupleTableSlot *slot)
{
	return table_scan_getnextslot((TableScanDesc) scan, ForwardScanDirection,
								  slot);
}

/*
 * Call "callback" for every row attached to keepalive "id" that "snapshot"
 * (an MVCC snapshot) sees, as stored: the keepalive is not applied; with
 * "left", also those that left it (keepalive -id), in one index scan.  The
 * Lease is valid only during the call.  Stops when the callback returns
 * false.  Returns the number of rows read; -1, having read nothing, if the
 * index is locked (maintenance).
 */
int
hl_store_scan_keepalive(HlRelation *rel, int64 id, bool left,
						Snapshot snapshot,
						bool (*callback) (const Lease *lease, void *arg),
						void *arg)
{
	Relation	index = open_keepalive_index(rel);
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	int			n;

	if (index == NULL)
		return -1;

	if (left)
	{
		Datum		ids[2] = {Int64GetDatum(-id), Int64GetDatum(id)};
		ArrayType  *array = construct_array(ids, 2, INT8OID, sizeof(int64),
											FLOAT8PASSBYVAL, TYPALIGN_DOUBLE);

		/* keepalive = ANY ('{-id, id}'), as the executor would ask */
		ScanKeyEntryInitialize(&key, SK_SEARCHARRAY, 1, BTEqualStrategyNumber,
							   INT8OID, InvalidOid, F_INT8EQ,
							   PointerGetDatum(array));
	}
	else
		ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(id));
	slot = table_slot_create(rel->heap, NULL);
	scan = hl_index_beginscan(rel->heap, index, snapshot, 1);
	index_rescan(scan, &key, 1, NULL, 0);
	n = scan_rows(next_from_index, scan, slot, InvalidOid, NULL, callback, arg);
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, rel->lockmode);
	return n;
}

/*
 * Is another transaction attaching a term to keepalive "id" right now (a
 * row version with that keepalive, written by a transaction in flight)?
 * Read through the partial index with a dirty snapshot.
 */
bool
hl_store_keepalive_joining(HlRelation *rel, int64 id)
{
	Relation	index = open_keepalive_index(rel);
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	SnapshotData dirty;
	bool		joining = false;

	/* locked by maintenance: busy, as the table would be */
	if (index == NULL)
		hl_table_busy_error(rel->which);

	InitDirtySnapshot(dirty);
	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_INT8EQ, Int64GetDatum(id));
	slot = table_slot_create(rel->heap, NULL);
	scan = hl_index_beginscan(rel->heap, index, &dirty, 1);
	index_rescan(scan, &key, 1, NULL, 0);
	while (!joining && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		d;

		CHECK_FOR_INTERRUPTS();
		if (!TransactionIdIsValid(dirty.xmin) ||
			TransactionIdIsCurrentTransactionId(dirty.xmin))
			continue;
		/* (the new version, not the old one an update leaves) */
		d = slot_getattr(slot, Anum_lease_keepalive, &isnull);
		joining = !isnull && DatumGetInt64(d) == id;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, rel->lockmode);
	return joining;
}

/*
 * Call "callback" for every row of owner "owner" of role "roleid" that
 * "snapshot" (an MVCC snapshot) sees, as stored, reading the whole table:
 * no index finds an owner's rows (its key would change with every
 * takeover, which would then not be a HOT update).  hoplock_renew_all
 * alone calls it, when it begins a keepalive.  Returns the number of the
 * owner's rows read.
 */
int
hl_store_scan_owner(HlRelation *rel, Oid roleid, text *owner,
					Snapshot snapshot,
					bool (*callback) (const Lease *lease, void *arg),
					void *arg)
{
	TableScanDesc scan;
	TupleTableSlot *slot;
	int			n;

	slot = table_slot_create(rel->heap, NULL);
	scan = table_beginscan(rel->heap, snapshot, 0, NULL);
	n = scan_rows(next_from_heap, scan, slot, roleid, owner, callback, arg);
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	return n;
}

/*
 * How many names belong to role "roleid" (their last term was its), counting
 * no further than "limit".  Read through a dirty snapshot, so that a name
 * another transaction is creating counts too; that snapshot also sees both
 * versions of a row being changed (the old one, which the change deletes,
 * and the new one), so each name is counted once: read in name order
 * through the primary key, the versions of a name come one after another.
 * A name in flight from one role to another counts for both until that
 * commits.  A whole-index scan: only hoplock.max_names_per_role asks, and
 * only when a role creates a name.
 */
int64
hl_store_count_role(HlRelation *rel, Oid roleid, int64 limit)
{
	IndexScanDesc scan;
	TupleTableSlot *slot;
	SnapshotData dirty;
	text	   *counted = NULL; /* the name counted last */
	int64		n = 0;

	InitDirtySnapshot(dirty);
	slot = table_slot_create(rel->heap, NULL);
	scan = hl_index_beginscan(rel->heap, rel->index, &dirty, 0);
	index_rescan(scan, NULL, 0, NULL, 0);
	while (n < limit && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		bool		isnull;
		Datum		d;
		text	   *name;

		CHECK_FOR_INTERRUPTS();
		d = slot_getattr(slot, Anum_lease_owner_roleid, &isnull);
		if (isnull || DatumGetObjectId(d) != roleid)
			continue;
		d = slot_getattr(slot, Anum_lease_name, &isnull);
		if (isnull)
			continue;
		name = DatumGetTextPP(d);
		if (counted == NULL || !hl_text_equal(counted, name))
		{
			/* not another version of the name counted last */
			if (counted != NULL)
				pfree(counted);
			counted = (text *) PG_DETOAST_DATUM_COPY(d);
			n++;
		}
		if ((Pointer) name != DatumGetPointer(d))
			pfree(name);
	}
	if (counted != NULL)
		pfree(counted);
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	return n;
}

/*
 * Read the lease as the active snapshot sees it (hoplock_holder,
 * hoplock_read).  Works on a hot standby.  Waits for a lock on the table
 * like any query.
 */
bool
hl_lease_lookup(text *name, Lease *lease)
{
	HlRelation	rel;
	LeaseVersion version;
	Snapshot	snapshot;

	snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
	(void) hl_open(HL_REL_LEASE, AccessShareLock, true, &rel);
	hl_store_fetch(&rel, name, snapshot, &version);
	hl_version_release(&version);
	hl_close(&rel, false);

	if (version.found)
		*lease = version.lease;
	return version.found;
}
