/*-------------------------------------------------------------------------
 *
 * compat.h
 *		Every difference between the supported PostgreSQL versions (13 to
 *		18), as small static inline shims, so that the rest of hoplock is
 *		written against one API.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_COMPAT_H
#define HOPLOCK_COMPAT_H

#include "postgres.h"

#if PG_VERSION_NUM < 130000
#error "hoplock requires PostgreSQL 13 or later"
#endif

#include "access/genam.h"
#include "access/heapam.h"
#include "access/xlog.h"
#include "nodes/execnodes.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

/* PostgreSQL 18 added an instrumentation argument to index_beginscan. */
static inline IndexScanDesc
hoplock_index_beginscan(Relation heap, Relation index, Snapshot snapshot,
						int nkeys)
{
#if PG_VERSION_NUM >= 180000
	return index_beginscan(heap, index, snapshot, NULL, nkeys, 0);
#else
	return index_beginscan(heap, index, snapshot, nkeys, 0);
#endif
}

/*
 * heap_update without waiting.  Sets *index_update when the new version is
 * not heap-only, so the caller must insert index entries for it.  Since
 * PostgreSQL 16 heap_update says so itself; before, the new tuple is marked.
 */
static inline TM_Result
hoplock_heap_update(Relation rel, ItemPointer otid, HeapTuple newtup,
					CommandId cid, TM_FailureData *tmfd, bool *index_update)
{
	LockTupleMode lockmode;
	TM_Result	result;
#if PG_VERSION_NUM >= 160000
	TU_UpdateIndexes update_indexes = TU_None;

	result = heap_update(rel, otid, newtup, cid, InvalidSnapshot, false,
						 tmfd, &lockmode, &update_indexes);
	*index_update = (update_indexes == TU_All);
#else
	result = heap_update(rel, otid, newtup, cid, InvalidSnapshot, false,
						 tmfd, &lockmode);
	*index_update = (result == TM_Ok && !HeapTupleIsHeapOnly(newtup));
#endif
	return result;
}

/* PostgreSQL 14 added the "index unchanged" hint to index_insert. */
static inline void
hoplock_index_insert(Relation index, Datum *values, bool *isnull,
					 ItemPointer tid, Relation heap, IndexUniqueCheck check,
					 bool unchanged, IndexInfo *info)
{
#if PG_VERSION_NUM >= 140000
	index_insert(index, values, isnull, tid, heap, check, unchanged, info);
#else
	index_insert(index, values, isnull, tid, heap, check, info);
#endif
}

/* Before PostgreSQL 15 the insertion timeline was a global variable. */
#if PG_VERSION_NUM < 150000
static inline TimeLineID
GetWALInsertionTimeLine(void)
{
	return ThisTimeLineID;
}
#endif

/* PostgreSQL 15 renamed EmitWarningsOnPlaceholders. */
#if PG_VERSION_NUM < 150000
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

/* PostgreSQL 14 added readOnlyTree to ProcessUtility_hook. */
#if PG_VERSION_NUM >= 140000
#define HOPLOCK_UTILITY_ARGS \
	PlannedStmt *pstmt, const char *queryString, bool readOnlyTree, \
	ProcessUtilityContext context, ParamListInfo params, \
	QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc
#define HOPLOCK_UTILITY_CALL(fn) \
	fn(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc)
#else
#define HOPLOCK_UTILITY_ARGS \
	PlannedStmt *pstmt, const char *queryString, \
	ProcessUtilityContext context, ParamListInfo params, \
	QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc
#define HOPLOCK_UTILITY_CALL(fn) \
	fn(pstmt, queryString, context, params, queryEnv, dest, qc)
#endif

/* PostgreSQL 15 added InitMaterializedSRF; before, set-returning functions
 * built their tuplestore by hand. */
#if PG_VERSION_NUM < 150000
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/tuplestore.h"

static inline void
InitMaterializedSRF(FunctionCallInfo fcinfo, bits32 flags)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	tupdesc;
	MemoryContext old;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		!(rsinfo->allowedModes & SFRM_Materialize))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->setDesc = CreateTupleDescCopy(tupdesc);
	MemoryContextSwitchTo(old);
}
#endif

/*
 * Before PostgreSQL 15, a background worker had to deliver its own
 * NOTIFYs after committing; since, CommitTransaction signals listeners.
 */
#if PG_VERSION_NUM < 150000
#include "commands/async.h"
#define hoplock_notify_after_commit() ProcessCompletedNotifies()
#else
#define hoplock_notify_after_commit() ((void) 0)
#endif

/* PostgreSQL 17 added infinite intervals. */
static inline bool
hoplock_interval_is_finite(const Interval *interval)
{
#if PG_VERSION_NUM >= 170000
	return !INTERVAL_NOT_FINITE(interval);
#else
	return true;
#endif
}

#endif							/* HOPLOCK_COMPAT_H */
