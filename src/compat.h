/*-------------------------------------------------------------------------
 *
 * compat.h
 *		The differences between the supported PostgreSQL versions (13 to
 *		18), as small static inline shims, so that the rest of hoplock is
 *		written against one API.  Those of the executor, heap and index
 *		calls the storage layer makes are in executor_compat.h.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_COMPAT_H
#define HOPLOCK_COMPAT_H

#include "postgres.h"

#if PG_VERSION_NUM < 130000
#error "hoplock requires PostgreSQL 13 or later"
#endif

#include "access/xlog.h"
#include "miscadmin.h"
#include "storage/latch.h"
#include "storage/lock.h"
#include "storage/proc.h"
#include "tcop/tcopprot.h"
#include "utils/guc.h"
#include "utils/relcache.h"
#include "utils/timestamp.h"

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

#define MAT_SRF_USE_EXPECTED_DESC	0x01

static inline void
InitMaterializedSRF(FunctionCallInfo fcinfo, bits32 flags)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	tupdesc;
	MemoryContext old;

	if (rsinfo == NULL || !IsA(rsinfo, ReturnSetInfo) ||
		!(rsinfo->allowedModes & SFRM_Materialize) ||
		((flags & MAT_SRF_USE_EXPECTED_DESC) && rsinfo->expectedDesc == NULL))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("set-valued function called in context that cannot accept a set")));
	old = MemoryContextSwitchTo(rsinfo->econtext->ecxt_per_query_memory);
	if (flags & MAT_SRF_USE_EXPECTED_DESC)
		tupdesc = rsinfo->expectedDesc;
	else if (get_call_result_type(fcinfo, NULL, &tupdesc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");
	rsinfo->returnMode = SFRM_Materialize;
	rsinfo->setResult = tuplestore_begin_heap(true, false, work_mem);
	rsinfo->setDesc = CreateTupleDescCopy(tupdesc);
	MemoryContextSwitchTo(old);
}
#else
#include "funcapi.h"
#endif

/*
 * Set up a set-returning function's result as a tuplestore
 * (InitMaterializedSRF), with the row shape the executor expects where it
 * has one: the same columns as the function's declared result (its OUT
 * arguments, which a CREATE OR REPLACE cannot change, or its row type,
 * which hl_materialize_srf_as checks), without building them again from
 * pg_proc at every call.
 */
static inline void
hl_materialize_srf(FunctionCallInfo fcinfo)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo,
						rsinfo != NULL && IsA(rsinfo, ReturnSetInfo) &&
						rsinfo->expectedDesc != NULL ?
						MAT_SRF_USE_EXPECTED_DESC : 0);
}

/*
 * The same, for a function whose result is a named row type
 * (hoplock_event, hoplock_renewed), which a superuser's ALTER TYPE can
 * change: the columns must be the first of "types", the ones the function
 * puts in them, and at least "min" (an earlier version's SQL declares
 * fewer), or the rows would hold datums of other types.
 */
static inline void
hl_materialize_srf_as(FunctionCallInfo fcinfo, const char *typname,
					  const Oid *types, int ntypes, int min)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TupleDesc	desc;
	bool		ok;

	hl_materialize_srf(fcinfo);
	desc = rsinfo->setDesc;
	ok = desc->natts >= min && desc->natts <= ntypes;
	for (int i = 0; ok && i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		/* (a typmod, timestamptz(0) say, would not hold what is put there) */
		ok = !att->attisdropped && att->atttypid == types[i] &&
			att->atttypmod == -1;
	}
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("type \"%s\" does not have the layout hoplock expects",
						typname),
				 errhint("Reinstall the extension with DROP EXTENSION and CREATE EXTENSION.")));
}

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
