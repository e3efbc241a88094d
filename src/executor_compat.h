/*-------------------------------------------------------------------------
 *
 * executor_compat.h
 *		The differences between the supported PostgreSQL versions in the
 *		executor, heap and index calls of the storage layer (table.c,
 *		rowwrite.c, store.c, and the files that scan hoplock's indexes),
 *		as small static inline shims.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_EXECUTOR_COMPAT_H
#define HOPLOCK_EXECUTOR_COMPAT_H

#include "compat.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "commands/trigger.h"
#include "executor/executor.h"
#include "nodes/execnodes.h"
#include "storage/bufmgr.h"
#include "utils/relcache.h"

/* PostgreSQL 18 added an instrumentation argument to index_beginscan. */
static inline IndexScanDesc
hl_index_beginscan(Relation heap, Relation index, Snapshot snapshot,
				   int nkeys)
{
#if PG_VERSION_NUM >= 180000
	return index_beginscan(heap, index, snapshot, NULL, nkeys, 0);
#else
	return index_beginscan(heap, index, snapshot, nkeys, 0);
#endif
}

/*
 * PostgreSQL 18 added deferrable_ok to RelationGetPrimaryKeyIndex; hoplock
 * wants what earlier versions return, a primary key that is not deferrable.
 */
static inline Oid
hl_primary_key_index(Relation rel)
{
#if PG_VERSION_NUM >= 180000
	return RelationGetPrimaryKeyIndex(rel, false);
#else
	return RelationGetPrimaryKeyIndex(rel);
#endif
}

/* Which indexes need entries for a new row version */
typedef enum HlIndexUpdate
{
	HL_INDEX_NONE,				/* heap-only: none */
	HL_INDEX_SUMMARIZING,		/* heap-only, but summarizing ones (BRIN) */
	HL_INDEX_ALL
} HlIndexUpdate;

/*
 * heap_update of a row the caller has locked (rowwrite.c's lock_row), so
 * that it finds only this transaction's own lock and has nothing to wait
 * for.  Says which indexes need entries for the new version.  Since
 * PostgreSQL 16 heap_update says so itself (and HOT updates can still need
 * entries in summarizing indexes); before, the new tuple is marked
 * heap-only.
 */
static inline TM_Result
hl_heap_update(Relation rel, ItemPointer otid, HeapTuple newtup,
			   CommandId cid, TM_FailureData *tmfd, HlIndexUpdate *indexes)
{
	LockTupleMode lockmode;
	TM_Result	result;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes = TU_None;
#endif

#if PG_VERSION_NUM >= 160000
	result = heap_update(rel, otid, newtup, cid, InvalidSnapshot, true,
						 tmfd, &lockmode, &update_indexes);
	*indexes = update_indexes == TU_All ? HL_INDEX_ALL :
		update_indexes == TU_Summarizing ? HL_INDEX_SUMMARIZING :
		HL_INDEX_NONE;
#else
	result = heap_update(rel, otid, newtup, cid, InvalidSnapshot, true,
						 tmfd, &lockmode);
	*indexes = (result == TM_Ok && !HeapTupleIsHeapOnly(newtup)) ?
		HL_INDEX_ALL : HL_INDEX_NONE;
#endif
	return result;
}

/* A ResultRelInfo outside any range table, as the executor sets one up. */
static inline void
hl_init_result_rel(ResultRelInfo *rri, Relation rel, EState *estate)
{
	InitResultRelInfo(rri, rel, 0, NULL, 0);
#if PG_VERSION_NUM >= 140000
	/* so that the trigger machinery finds it rather than opening another */
	estate->es_opened_result_relations =
		lappend(estate->es_opened_result_relations, rri);
#else
	estate->es_result_relations = rri;
	estate->es_num_result_relations = 1;
	estate->es_result_relation_info = rri;
#endif
}

/* Close what hl_init_result_rel's EState opened: indexes, trigger targets. */
static inline void
hl_close_result_rels(EState *estate, ResultRelInfo *rri)
{
#if PG_VERSION_NUM >= 140000
	ExecCloseResultRelations(estate);
#else
	ExecCloseIndices(rri);
	ExecCleanUpTriggerState(estate);
#endif
}

/* Index entries for the row in "slot", in every index ready for inserts. */
static inline List *
hl_insert_index_tuples(ResultRelInfo *rri, TupleTableSlot *slot,
					   EState *estate, bool update, bool summarizing_only)
{
#if PG_VERSION_NUM >= 160000
	return ExecInsertIndexTuples(rri, slot, estate, update, false, NULL, NIL,
								 summarizing_only);
#elif PG_VERSION_NUM >= 140000
	return ExecInsertIndexTuples(rri, slot, estate, update, false, NULL, NIL);
#else
	return ExecInsertIndexTuples(slot, estate, false, NULL, NIL);
#endif
}

/*
 * The same for a new row, every unique index checked without raising (as
 * INSERT ... ON CONFLICT with no arbiter checks them): *conflict is set if
 * one that is not deferrable has a row with the same key (live, or being
 * inserted or deleted).
 */
static inline List *
hl_insert_index_tuples_nodup(ResultRelInfo *rri, TupleTableSlot *slot,
							 EState *estate, bool *conflict)
{
	*conflict = false;
#if PG_VERSION_NUM >= 160000
	return ExecInsertIndexTuples(rri, slot, estate, false, true, conflict,
								 NIL, false);
#elif PG_VERSION_NUM >= 140000
	return ExecInsertIndexTuples(rri, slot, estate, false, true, conflict,
								 NIL);
#else
	return ExecInsertIndexTuples(slot, estate, true, conflict, NIL);
#endif
}

/* Queue the AFTER ROW UPDATE triggers of a row updated at "tid". */
static inline void
hl_ar_update_triggers(EState *estate, ResultRelInfo *rri, ItemPointer tid,
					  TupleTableSlot *slot, List *recheck)
{
#if PG_VERSION_NUM >= 150000
	ExecARUpdateTriggers(estate, rri, NULL, NULL, tid, NULL, slot, recheck,
						 NULL, false);
#else
	ExecARUpdateTriggers(estate, rri, tid, NULL, slot, recheck, NULL);
#endif
}

/* Queue the AFTER ROW DELETE triggers of a row deleted at "tid". */
static inline void
hl_ar_delete_triggers(EState *estate, ResultRelInfo *rri, ItemPointer tid)
{
#if PG_VERSION_NUM >= 150000
	ExecARDeleteTriggers(estate, rri, tid, NULL, NULL, false);
#else
	ExecARDeleteTriggers(estate, rri, tid, NULL, NULL);
#endif
}

#endif							/* HOPLOCK_EXECUTOR_COMPAT_H */
