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
 *		The update never waits: another transaction changing the row is
 *		reported (TM_BeingModified) rather than waited for.  Indexes are
 *		locked like the table, waiting a few milliseconds at most.
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

#include "hoplock.h"
#include "compat.h"

#include "access/heapam.h"
#include "access/xact.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/makefuncs.h"
#include "storage/lmgr.h"
#include "utils/guc.h"
#include "utils/rel.h"

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
 * each without waiting more than a few milliseconds.
 */
static void
open_indexes(HlRelation *rel, RowWrite *w)
{
	List	   *indexes = RelationGetIndexList(rel->heap);
	ListCell   *lc;

	foreach(lc, indexes)
	{
		if (!hl_lock_relation_briefly(lfirst_oid(lc), RowExclusiveLock))
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

	ExecStoreHeapTuple(tuple, w.slot, false);
	open_indexes(rel, &w);
	recheck = hl_insert_index_tuples(w.rri, w.slot, w.estate, false, false);
	if (w.triggers)
	{
		AsOwner		o;

		as_owner_begin(rel, &o);
		ExecARInsertTriggers(w.estate, w.rri, w.slot, recheck, NULL);
		as_owner_end(&o);
	}
	list_free(recheck);
	end_write(rel, &w);
}

/*
 * Replace the row version at "otid" without waiting.  Returns TM_Ok, or
 * what stood in the way: TM_BeingModified when another transaction is
 * changing the row right now, TM_Updated when one committed a newer
 * version since the caller looked.
 */
TM_Result
hl_row_update(HlRelation *rel, ItemPointer otid, HeapTuple tuple)
{
	bool		foreign = hl_table_has_foreign_constraints(rel);
	bool		triggers = hl_table_has_after_triggers(rel);
	RowWrite	w;
	TM_FailureData tmfd;
	HlIndexUpdate indexes;
	TM_Result	result;
	List	   *recheck = NIL;

	/* as the executor checks: a published table needs an identity */
	CheckCmdReplicaIdentity(rel->heap, CMD_UPDATE);
	if (foreign)
	{
		begin_write(rel, &w);
		check_foreign_constraints(&w, tuple);
	}

	result = hl_heap_update(rel->heap, otid, tuple,
							GetCurrentCommandId(true), &tmfd, &indexes);

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

	HeapTupleData oldtup;
	Buffer		buffer;
	CommandId	cid = GetCurrentCommandId(true);

	CheckCmdReplicaIdentity(rel->heap, CMD_DELETE);

	/*
	 * As for an update (hl_heap_update): lock the row without waiting first,
	 * then delete it, finding at most this transaction's own lock, which an
	 * earlier change of the row in this transaction may have left too.
	 */
	oldtup.t_self = *otid;
	result = heap_lock_tuple(rel->heap, &oldtup, cid, LockTupleExclusive,
							 LockWaitSkip, false, &buffer, &tmfd);
	if (BufferIsValid(buffer))
		ReleaseBuffer(buffer);
	if (result == TM_WouldBlock)
		return TM_BeingModified;
	if (result != TM_Ok)
		return result;
	result = heap_delete(rel->heap, otid, cid, InvalidSnapshot, true,
						 &tmfd, false);
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
