/*-------------------------------------------------------------------------
 *
 * rowwrite.c
 *		Writing a row of one of hoplock's tables directly, doing what the
 *		executor does for an INSERT or UPDATE (execReplication.c is the
 *		model):
 *
 *		- the table's NOT NULL and CHECK constraints are checked first,
 *		  unless hoplock's own rows satisfy them by construction (the
 *		  constraints the install script made);
 *		- every index that is ready for inserts gets an entry for a new
 *		  row, and for a new row version that is not heap-only -- a user's
 *		  own index, and the one REINDEX CONCURRENTLY is building, too;
 *		- row-level AFTER triggers fire (pg_repack logs changes with one).
 *
 *		The common case -- a renewal, a heap-only update of a table as the
 *		install script made it -- needs none of it and costs nothing more
 *		than the heap_update.
 *
 *		An update or delete never waits: another transaction changing the
 *		row, or holding a lock on it that the change conflicts with, is
 *		reported (TM_BeingModified) rather than waited for.  The row is
 *		locked first, without waiting, in the mode the executor's UPDATE or
 *		DELETE locks it: LockTupleNoKeyExclusive for an update that changes
 *		no key column (every update hoplock makes: the key is the name), so
 *		that FOR KEY SHARE -- which a foreign key referencing the table
 *		takes -- never stands in its way; LockTupleExclusive for a delete,
 *		or for an update that changes a key column of a user's own unique
 *		index.  heap_update and heap_delete then find only this
 *		transaction's own lock, and have nothing to wait for.  Indexes are
 *		locked like the table, waiting a few milliseconds at most.
 *
 *		A transaction that wrote a row cannot be prepared: its term would be
 *		held, or kept from lapsing, or the row it wrote and its lock kept,
 *		for as long as the prepared transaction lasts.  Any row counts: a
 *		call may write the generation floor first and then find the lease
 *		contended, changing nothing else.
 *
 *		Triggers run as the table's owner, in a security-restricted
 *		operation with a safe search_path, as maintenance commands run
 *		index functions: the callers may write hoplock's tables only
 *		through its functions, and must not be able to make a trigger the
 *		owner installed run their own code.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor_compat.h"
#include "storage.h"

#include "access/heapam.h"
#include "access/sysattr.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/bitmapset.h"
#include "nodes/makefuncs.h"
#include "storage/lmgr.h"
#include "utils/guc.h"
#include "utils/datum.h"
#include "utils/rel.h"
#include "utils/relcache.h"


/* This transaction wrote a row of hoplock's tables: it cannot be prepared */
static bool wrote_row = false;

/* The executor state a write needs beyond the heap */
typedef struct RowWrite
{
	EState	   *estate;
	ResultRelInfo *rri;
	TupleTableSlot *slot;
	bool		triggers;		/* AfterTriggerBeginQuery was called */
} RowWrite;

static void
begin_write(HlRelation *rel, RowWrite *w)
{
	w->estate = CreateExecutorState();
	w->estate->es_output_cid = GetCurrentCommandId(true);
	w->rri = makeNode(ResultRelInfo);
	hl_init_result_rel(w->rri, rel->heap, w->estate);
	w->slot = ExecInitExtraTupleSlot(w->estate, RelationGetDescr(rel->heap),
									 &TTSOpsHeapTuple);
	w->triggers = hl_table_has_after_triggers(rel);
	if (w->triggers)
		AfterTriggerBeginQuery();
}

/*
 * Open every index of the table, as ExecOpenIndices does, after locking
 * each without waiting more than a few milliseconds.  The primary key
 * hl_open() locked in the same mode is not locked again: this transaction
 * holds that lock, so taking it again could not wait, and would only
 * cost a lock-table lookup per write.
 */
static void
open_indexes(HlRelation *rel, RowWrite *w)
{
	List	   *indexes = RelationGetIndexList(rel->heap);
	Oid			held = (rel->index != NULL && rel->lockmode == RowExclusiveLock) ?
		RelationGetRelid(rel->index) : InvalidOid;
	ListCell   *lc;

	foreach(lc, indexes)
	{
		if (lfirst_oid(lc) != held &&
			!hl_lock_relation_briefly(lfirst_oid(lc), RowExclusiveLock))
			hl_table_busy_error(rel->which);
	}
	list_free(indexes);
	ExecOpenIndices(w->rri, false);
}

/* The user a trigger runs as: the table's owner (see the file header) */
typedef struct AsOwner
{
	Oid			save_userid;
	int			save_sec_context;
	int			save_nestlevel;
} AsOwner;

static void
as_owner_begin(HlRelation *rel, AsOwner *o)
{
	GetUserIdAndSecContext(&o->save_userid, &o->save_sec_context);
	SetUserIdAndSecContext(rel->heap->rd_rel->relowner,
						   o->save_sec_context | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
	o->save_nestlevel = NewGUCNestLevel();
	(void) set_config_option("search_path", "pg_catalog, pg_temp",
							 PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
}

static void
as_owner_end(AsOwner *o)
{
	AtEOXact_GUC(false, o->save_nestlevel);
	SetUserIdAndSecContext(o->save_userid, o->save_sec_context);
}

/*
 * Fire the queued AFTER triggers as the table's owner, and clean up.  The
 * events are queued as the owner too: since PostgreSQL 18 an AFTER trigger
 * runs as the role that queued its event, before as the one current when it
 * fires.
 */
static void
end_write(HlRelation *rel, RowWrite *w)
{
	if (w->triggers)
	{
		AsOwner		o;

		as_owner_begin(rel, &o);
		AfterTriggerEndQuery(w->estate);
		as_owner_end(&o);
	}
	hl_close_result_rels(w->estate, w->rri);
	ExecResetTupleTable(w->estate->es_tupleTable, false);
	FreeExecutorState(w->estate);
}

/* A new row's AFTER INSERT triggers queued, as the table's owner */
static void
queue_insert_triggers(HlRelation *rel, RowWrite *w, TupleTableSlot *slot,
					  List *recheck)
{
	AsOwner		o;

	as_owner_begin(rel, &o);
	ExecARInsertTriggers(w->estate, w->rri, slot, recheck, NULL);
	as_owner_end(&o);
}

/*
 * NOT NULL and CHECK constraints hoplock's own rows may not satisfy: a
 * superuser added them.  Checked as the executor checks them, as the caller.
 */
static void
check_foreign_constraints(RowWrite *w, HeapTuple tuple)
{
	ExecStoreHeapTuple(tuple, w->slot, false);
	ExecConstraints(w->rri, w->slot, w->estate);
}

/*
 * Does "newtup" change a key column of "oldtup" -- one of a unique index a
 * foreign key could reference?  Decided as heap_update decides which lock
 * the update needs: the same columns, compared the same way (binary
 * equality), so that the lock taken first is the one heap_update wants.
 */
static bool
changes_key(Relation heap, HeapTuple oldtup, HeapTuple newtup)
{
	Bitmapset  *keys = RelationGetIndexAttrBitmap(heap, INDEX_ATTR_BITMAP_KEY);
	TupleDesc	desc = RelationGetDescr(heap);
	int			member = -1;
	bool		changed = false;

	while (!changed && (member = bms_next_member(keys, member)) >= 0)
	{
		AttrNumber	attnum = member + FirstLowInvalidHeapAttributeNumber;
		Form_pg_attribute att;
		Datum		old_value;
		Datum		new_value;
		bool		old_null;
		bool		new_null;

		if (attnum <= 0)
		{
			/* not a user column: take the stronger lock, which is never wrong */
			changed = true;
			break;
		}
		att = TupleDescAttr(desc, attnum - 1);
		old_value = heap_getattr(oldtup, attnum, desc, &old_null);
		new_value = heap_getattr(newtup, attnum, desc, &new_null);
		if (old_null != new_null)
			changed = true;
		else if (!old_null)
			changed = !datumIsEqual(old_value, new_value, att->attbyval,
									att->attlen);
	}
	bms_free(keys);
	return changed;
}

/*
 * Lock the row version at "otid" without waiting, as SELECT ... FOR UPDATE
 * SKIP LOCKED would, in the mode the executor locks a row it is about to
 * change (see the file header): for an update to "newtup", or, with
 * "newtup" NULL, a delete.  heap_update and heap_delete cannot be asked
 * not to wait (with wait = false they assert that nobody else changes or
 * locks the row; no caller of PostgreSQL's does that); with this lock held
 * they find only this transaction's own.  Returns TM_Ok, or what stood in
 * the way: TM_BeingModified for another transaction's change or
 * conflicting lock, TM_Updated or TM_Deleted for a newer version.
 */
static TM_Result
lock_row(Relation heap, ItemPointer otid, HeapTuple newtup, CommandId cid)
{
	HeapTupleData oldtup;
	Buffer		buffer;
	TM_FailureData tmfd;
	TM_Result	result;

	oldtup.t_self = *otid;
	result = heap_lock_tuple(heap, &oldtup, cid,
							 newtup != NULL ? LockTupleNoKeyExclusive :
							 LockTupleExclusive,
							 LockWaitSkip, false, &buffer, &tmfd);

	/*
	 * An update that changes a key column after all (a user's own unique
	 * index on a column hoplock writes) needs the exclusive lock, as it
	 * would from UPDATE: this transaction's weaker lock is upgraded.
	 */
	if (result == TM_Ok && newtup != NULL &&
		changes_key(heap, &oldtup, newtup))
	{
		if (BufferIsValid(buffer))
			ReleaseBuffer(buffer);
		oldtup.t_self = *otid;
		result = heap_lock_tuple(heap, &oldtup, cid, LockTupleExclusive,
								 LockWaitSkip, false, &buffer, &tmfd);
	}
	if (BufferIsValid(buffer))
		ReleaseBuffer(buffer);
	if (result == TM_WouldBlock)
		return TM_BeingModified;
	return result;
}

/* Insert a new row (a name's first, or the floor's). */
void
hl_row_insert(HlRelation *rel, HeapTuple tuple)
{
	RowWrite	w;
	List	   *recheck;

	begin_write(rel, &w);
	if (hl_table_has_foreign_constraints(rel))
		check_foreign_constraints(&w, tuple);

	heap_insert(rel->heap, tuple, w.estate->es_output_cid, 0, NULL);
	wrote_row = true;

	ExecStoreHeapTuple(tuple, w.slot, false);
	open_indexes(rel, &w);
	recheck = hl_insert_index_tuples(w.rri, w.slot, w.estate, false, false);
	if (w.triggers)
		queue_insert_triggers(rel, &w, w.slot, recheck);
	list_free(recheck);
	end_write(rel, &w);
}

/*
 * Insert a new row unless a unique index of the table has a row with the
 * same key, live or being inserted or deleted (as the dirty snapshot sees
 * it): then the new row is undone (a speculative insertion's abort), no
 * trigger has seen it, and false is returned.  The caller looks for the row of
 * that key (and waits for a transaction changing it), as INSERT ... ON
 * CONFLICT does after its speculative insertion: changes it, or inserts
 * with hl_row_insert, which raises a conflict that stays.  Every unique
 * index is checked without raising, not only the primary key: another
 * with the same key -- a user's own, or the one REINDEX CONCURRENTLY is
 * building -- would otherwise raise where ON CONFLICT updates.  The check
 * costs what the indexes' own uniqueness checks cost: the insert that
 * finds no row is as cheap as hl_row_insert.
 */
bool
hl_row_insert_new(HlRelation *rel, HeapTuple tuple)
{
	RowWrite	w;
	List	   *recheck;
	bool		conflict;
	uint32		token;

	Assert(rel->index != NULL);
	begin_write(rel, &w);
	if (hl_table_has_foreign_constraints(rel))
		check_foreign_constraints(&w, tuple);

	/*
	 * A speculative insertion, as INSERT ... ON CONFLICT makes: one that
	 * meets a row with its key is undone as if it never was -- logical
	 * decoding sends nothing of it (a plain insert and delete would send
	 * both, and a subscriber would fail on the insert), and whoever checks
	 * the key meanwhile waits for the outcome of this insertion, not of
	 * the whole transaction.
	 */
	ExecStoreHeapTuple(tuple, w.slot, false);
	open_indexes(rel, &w);
	token = SpeculativeInsertionLockAcquire(GetCurrentTransactionId());
	table_tuple_insert_speculative(rel->heap, w.slot, w.estate->es_output_cid,
								   0, NULL, token);
	wrote_row = true;
	recheck = hl_insert_index_tuples_nodup(w.rri, w.slot, w.estate,
										   &conflict);
	table_tuple_complete_speculative(rel->heap, w.slot, token, !conflict);
	SpeculativeInsertionLockRelease(GetCurrentTransactionId());
	if (!conflict && w.triggers)
		queue_insert_triggers(rel, &w, w.slot, recheck);
	list_free(recheck);
	end_write(rel, &w);
	return !conflict;
}

/* Rows one multi-insert takes, at most (COPY buffers up to 1000) */
#define MULTI_INSERT_ROWS	128

/*
 * Insert several new rows (the event log's, at commit) with one executor
 * state and multi-inserts into the heap (one WAL record for the rows that
 * fit on one page), as COPY does, MULTI_INSERT_ROWS at a time through the
 * same slots; then each chunk's index entries and triggers, row by row.
 * (A slot per row would cost each slot's remembering and forgetting of
 * the tuple descriptor in the resource owner: quadratic for thousands.)
 */
void
hl_row_insert_many(HlRelation *rel, HeapTuple *tuples, int ntuples)
{
	RowWrite	w;
	bool		foreign = hl_table_has_foreign_constraints(rel);
	TupleTableSlot *slots[MULTI_INSERT_ROWS];
	int			nslots = Min(ntuples, MULTI_INSERT_ROWS);

	if (ntuples <= 0)
		return;
	begin_write(rel, &w);
	open_indexes(rel, &w);
	for (int i = 0; i < nslots; i++)
		slots[i] = i == 0 ? w.slot :
			ExecInitExtraTupleSlot(w.estate, RelationGetDescr(rel->heap),
								   &TTSOpsHeapTuple);
	for (int done = 0; done < ntuples; done += nslots)
	{
		int			n = Min(nslots, ntuples - done);

		CHECK_FOR_INTERRUPTS();
		for (int i = 0; i < n; i++)
		{
			ExecStoreHeapTuple(tuples[done + i], slots[i], false);
			if (foreign)
				ExecConstraints(w.rri, slots[i], w.estate);
		}
		table_multi_insert(rel->heap, slots, n, w.estate->es_output_cid,
						   0, NULL);
		wrote_row = true;
		for (int i = 0; i < n; i++)
		{
			List	   *recheck;

			recheck = hl_insert_index_tuples(w.rri, slots[i], w.estate,
											 false, false);
			if (w.triggers)
				queue_insert_triggers(rel, &w, slots[i], recheck);
			list_free(recheck);
			ExecClearTuple(slots[i]);
		}
	}
	end_write(rel, &w);
}

/*
 * Replace the row version at "otid" without waiting.  Returns TM_Ok, or
 * what stood in the way: TM_BeingModified when another transaction is
 * changing the row right now, or holds a lock on it that an UPDATE would
 * wait for, TM_Updated when one committed a newer version since the caller
 * looked.
 */
TM_Result
hl_row_update(HlRelation *rel, ItemPointer otid, HeapTuple tuple)
{
	return hl_row_update_checked(rel, otid, tuple, NULL, NULL);
}

/*
 * The same, asking "check" (unless NULL) once the row is locked and before
 * it is written: anything but TM_Ok is returned as it is, the row written
 * not, its lock kept (row locks last as long as the transaction).
 */
TM_Result
hl_row_update_checked(HlRelation *rel, ItemPointer otid, HeapTuple tuple,
					  HlRowLockedCheck check, void *arg)
{
	bool		foreign = hl_table_has_foreign_constraints(rel);
	bool		triggers = hl_table_has_after_triggers(rel);
	RowWrite	w;
	TM_FailureData tmfd;
	HlIndexUpdate indexes = HL_INDEX_NONE;
	TM_Result	result;
	List	   *recheck = NIL;

	/* as the executor checks: a published table needs an identity */
	CheckCmdReplicaIdentity(rel->heap, CMD_UPDATE);
	if (foreign)
	{
		begin_write(rel, &w);
		check_foreign_constraints(&w, tuple);
	}

	result = lock_row(rel->heap, otid, tuple, GetCurrentCommandId(true));
	if (result == TM_Ok && check != NULL)
		result = check(arg);
	if (result == TM_Ok)
		result = hl_heap_update(rel->heap, otid, tuple,
								GetCurrentCommandId(true), &tmfd, &indexes);
	if (result == TM_Ok)
		wrote_row = true;

	if (result == TM_Ok && (indexes != HL_INDEX_NONE || triggers))
	{
		if (!foreign)
			begin_write(rel, &w);
		ExecStoreHeapTuple(tuple, w.slot, false);
		if (indexes != HL_INDEX_NONE)
		{
			open_indexes(rel, &w);
			recheck = hl_insert_index_tuples(w.rri, w.slot, w.estate, true,
											 indexes == HL_INDEX_SUMMARIZING);
		}
		if (w.triggers)
		{
			AsOwner		o;

			as_owner_begin(rel, &o);
			hl_ar_update_triggers(w.estate, w.rri, otid, w.slot, recheck);
			as_owner_end(&o);
		}
		list_free(recheck);
		end_write(rel, &w);
	}
	else if (foreign)
		end_write(rel, &w);

	return result;
}

/*
 * Delete the row version at "otid" without waiting (a forgotten lease, a
 * history row beyond hoplock.history_size).  Returns what heap_delete says.
 */
TM_Result
hl_row_delete(HlRelation *rel, ItemPointer otid)
{
	RowWrite	w;
	TM_FailureData tmfd;
	TM_Result	result;
	CommandId	cid = GetCurrentCommandId(true);

	CheckCmdReplicaIdentity(rel->heap, CMD_DELETE);

	/* a delete changes the key: it locks the row as DELETE does */
	result = lock_row(rel->heap, otid, NULL, cid);
	if (result != TM_Ok)
		return result;
	result = heap_delete(rel->heap, otid, cid, InvalidSnapshot, true,
						 &tmfd, false);
	if (result == TM_Ok)
		wrote_row = true;
	if (result == TM_Ok && hl_table_has_after_triggers(rel))
	{
		AsOwner		o;

		begin_write(rel, &w);
		as_owner_begin(rel, &o);
		hl_ar_delete_triggers(w.estate, w.rri, otid);
		as_owner_end(&o);
		end_write(rel, &w);
	}
	return result;
}

static void
rowwrite_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (wrote_row)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that has changed a hoplock lease"),
						 errdetail("A prepared transaction could hold a lease, or keep it from lapsing, for as long as it lasts.")));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			wrote_row = false;
			break;
		default:
			break;
	}
}

/* Register the callbacks of this file's end-of-transaction work. */
void
hl_rowwrite_init(void)
{
	RegisterXactCallback(rowwrite_xact_callback, NULL);
}
