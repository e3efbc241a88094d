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
#include "commands/trigger.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/execnodes.h"
#include "storage/bufmgr.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"

#if PG_VERSION_NUM >= 140000
#include "common/cryptohash.h"
#endif
#include "common/sha2.h"

#if PG_VERSION_NUM >= 170000
#include "storage/procarray.h"
#else
#include "storage/sinvaladt.h"
#endif

/*
 * PostgreSQL 18 replaced the pg_attribute_noreturn() suffix with a
 * pg_noreturn prefix.
 */
#ifndef pg_attribute_noreturn
#if defined(__GNUC__) || defined(__SUNPRO_C)
#define pg_attribute_noreturn() __attribute__((noreturn))
#else
#define pg_attribute_noreturn()
#endif
#endif

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

/* The process holding a virtual transaction, or 0. */
static inline int
hl_vxid_pid(VirtualTransactionId vxid)
{
	PGPROC	   *proc;

#if PG_VERSION_NUM >= 170000
	proc = ProcNumberGetProc(vxid.procNumber);
	if (proc == NULL || proc->vxid.lxid != vxid.localTransactionId)
		return 0;
#else
	proc = BackendIdGetProc(vxid.backendId);
	if (proc == NULL || proc->lxid != vxid.localTransactionId)
		return 0;
#endif
	return proc->pid;
}

/* This backend's local transaction ID (PostgreSQL 17 moved it). */
static inline LocalTransactionId
hl_my_lxid(void)
{
#if PG_VERSION_NUM >= 170000
	return MyProc->vxid.lxid;
#else
	return MyProc->lxid;
#endif
}

/* SHA-256 of "len" bytes at "data" into "digest". */
static inline void
hl_sha256(const uint8 *data, size_t len, uint8 digest[PG_SHA256_DIGEST_LENGTH])
{
#if PG_VERSION_NUM >= 140000
	pg_cryptohash_ctx *ctx = pg_cryptohash_create(PG_SHA256);

	if (ctx == NULL || pg_cryptohash_init(ctx) < 0 ||
		pg_cryptohash_update(ctx, data, len) < 0 ||
#if PG_VERSION_NUM >= 150000
		pg_cryptohash_final(ctx, digest, PG_SHA256_DIGEST_LENGTH) < 0
#else
		pg_cryptohash_final(ctx, digest) < 0
#endif
		)
		elog(ERROR, "could not compute SHA-256 digest");
	pg_cryptohash_free(ctx);
#else
	pg_sha256_ctx ctx;

	pg_sha256_init(&ctx);
	pg_sha256_update(&ctx, data, len);
	pg_sha256_final(&ctx, digest);
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

/* PostgreSQL 17 replaced IsBackgroundWorker. */
#if PG_VERSION_NUM < 170000
#define AmBackgroundWorkerProcess() IsBackgroundWorker
#endif

/* PostgreSQL 15 renamed EmitWarningsOnPlaceholders. */
#if PG_VERSION_NUM < 150000
#define MarkGUCPrefixReserved(prefix) EmitWarningsOnPlaceholders(prefix)
#endif

/* PostgreSQL 14 added readOnlyTree to ProcessUtility_hook. */
#if PG_VERSION_NUM >= 140000
#define HL_UTILITY_ARGS \
	PlannedStmt *pstmt, const char *queryString, bool readOnlyTree, \
	ProcessUtilityContext context, ParamListInfo params, \
	QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc
#define HL_UTILITY_CALL(fn) \
	fn(pstmt, queryString, readOnlyTree, context, params, queryEnv, dest, qc)
#else
#define HL_UTILITY_ARGS \
	PlannedStmt *pstmt, const char *queryString, \
	ProcessUtilityContext context, ParamListInfo params, \
	QueryEnvironment *queryEnv, DestReceiver *dest, QueryCompletion *qc
#define HL_UTILITY_CALL(fn) \
	fn(pstmt, queryString, context, params, queryEnv, dest, qc)
#endif

/* PostgreSQL 16 replaced pg_database_ownercheck and friends. */
#if PG_VERSION_NUM >= 160000
#define hl_database_owner(dboid) \
	object_ownercheck(DatabaseRelationId, (dboid), GetUserId())
#else
#define hl_database_owner(dboid) pg_database_ownercheck((dboid), GetUserId())
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
#define hl_notify_after_commit() ProcessCompletedNotifies()
#else
#define hl_notify_after_commit() ((void) 0)
#endif

/* PostgreSQL 14 made string keys of hash tables explicit. */
#if PG_VERSION_NUM < 140000
#define HASH_STRINGS 0
#endif

/* PostgreSQL 17 added infinite intervals. */
static inline bool
hl_interval_is_finite(const Interval *interval)
{
#if PG_VERSION_NUM >= 170000
	return !INTERVAL_NOT_FINITE(interval);
#else
	return true;
#endif
}

/*
 * Has the client of this backend gone (its connection closed)?  Never for
 * a process without one (a background worker, single-user mode).
 *
 * PostgreSQL 14 added pq_check_connection(), which ProcessInterrupts uses
 * for client_connection_check_interval: a poll for POLLRDHUP, which sees
 * the close even behind unread data.  Since 15 it also resets the
 * process latch (a caller that sleeps on a condition variable sets it
 * again), and means something only where WaitEventSetCanReportClosed()
 * says so (Linux; not Windows, say).  On 13 there is no such check: a
 * client that went is noticed when the statement ends, as before.
 *
 * The prototype is libpq/libpq.h's, which cannot be included here: it
 * needs libpq-be.h, and that the GSSAPI headers of a server built with
 * them.
 */
#if PG_VERSION_NUM >= 140000
extern bool pq_check_connection(void);
#endif
#if PG_VERSION_NUM >= 180000
#include "storage/waiteventset.h"	/* WaitEventSetCanReportClosed */
#endif

static inline bool
hl_client_gone(void)
{
#if PG_VERSION_NUM >= 140000
	if (MyProcPort == NULL || whereToSendOutput != DestRemote)
		return false;
#if PG_VERSION_NUM >= 150000
	if (!WaitEventSetCanReportClosed())
		return false;
#endif
	return !pq_check_connection();
#else
	return false;
#endif
}

#endif							/* HOPLOCK_COMPAT_H */
