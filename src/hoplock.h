/*-------------------------------------------------------------------------
 *
 * hoplock.h
 *		Declarations shared by hoplock's source files: the lease as C sees
 *		it, the compare-and-swap request, and each file's entry points.
 *
 *		Naming: the SQL-callable functions are hoplock_<sqlname>; every other
 *		symbol another file can see starts with hl_ (before PostgreSQL 16
 *		the server loads libraries with global symbol visibility, so a bare
 *		name could collide with another library's).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_H
#define HOPLOCK_H

#include "postgres.h"

#include "compat.h"			/* version shims, used below too */

#include "access/tableam.h"
#include "access/transam.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "storage/buf.h"
#include "storage/condition_variable.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

/* Largest lease name or owner, in bytes. */
/* The schema of the extension's tables */
#define HL_SCHEMA			"hoplock_internal"

#define HL_MAX_NAME_BYTES	256

/* Row states of hoplock_internal.lease.state */
#define LEASE_STATE_HELD		'h' /* term running, or lapsed but not yet
									 * announced */
#define LEASE_STATE_EXPIRED		'x' /* lapsed, "expired" announced */
#define LEASE_STATE_RELEASED	'r' /* ended; the row only remembers the
									 * generation */

/*
 * One version of a lease's row.  Text fields are palloc'd copies, never
 * pointers into a buffer.
 */
typedef struct Lease
{
	text	   *name;
	text	   *owner;
	char		state;
	NameData	owner_role;		/* name of the role that began the term */
	Oid			owner_roleid;	/* ... and its OID */
	int64		generation;
	TimestampTz acquired_at;
	TimestampTz renewed_at;
	TimestampTz expires_at;
	int32		session_pid;	/* 0: not bound to a session */
	TimestampTz session_start;
	TransactionId xmin;			/* of this row version */
	int64		version;		/* of this row version, new at every write:
								 * the handle; 0 if not written since 1.1 */
} Lease;

/* Longest handle text, including the terminating NUL. */
#define LEASE_HANDLE_LEN	48

/* The term is running right now (clock before expires_at). */
static inline bool
hl_lease_is_held(const Lease *lease, TimestampTz now)
{
	return lease != NULL && lease->state == LEASE_STATE_HELD &&
		now < lease->expires_at;
}

/* The row describes a term, running or lapsed, rather than nothing. */
static inline bool
hl_lease_has_state(const Lease *lease)
{
	return lease != NULL && lease->state != LEASE_STATE_RELEASED;
}

/* Byte-wise equality of two texts (names and owners are compared so). */
static inline bool
hl_text_equal(const text *a, const text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/* Milliseconds from "now" until "until", rounded up; at least 1. */
static inline long
hl_ms_until(TimestampTz now, TimestampTz until)
{
	int64		us = until - now;

	if (us <= 0)
		return 1;
	return (long) Min((us + 999) / 1000, (int64) INT_MAX);
}

/* ---------------------------------------------------------------------
 * lease.c: the compare-and-swap every writing call goes through
 * ---------------------------------------------------------------------
 */
typedef enum LeaseOp
{
	LEASE_OP_ACQUIRE,
	LEASE_OP_RENEW,
	LEASE_OP_RELEASE,
	LEASE_OP_FORCE_RELEASE,
	LEASE_OP_WRITE,
	LEASE_OP_DELETE,
	LEASE_OP_EXPIRE,			/* the worker: announce a lapsed term */
	LEASE_OP_SESSION_END		/* end the terms bound to a session that
								 * ended */
} LeaseOp;

typedef struct LeaseRequest
{
	LeaseOp		op;
	const char *fn;				/* SQL name, for messages */
	text	   *name;
	text	   *owner;			/* acquire, renew, release, write */
	int64		ttl;			/* microseconds; acquire, renew, write */
	int64		generation;		/* renew, release: 0 means any */
	text	   *handle;			/* write, delete; NULL: "no state" */
	bool		session_bound;	/* acquire: bind the term to this session */
	int32		session_pid;	/* session_end: the session that ended */
	TimestampTz session_start;
	bool		busy_is_contention; /* a locked table is contention (waits,
									 * the worker), not an error */
	bool		await_announcement; /* acquire: wait briefly for a lapsed
									 * term's row being changed (lease.c) */
} LeaseRequest;

typedef enum LeaseOutcome
{
	LEASE_DONE,					/* the lease was written */
	LEASE_REFUSED,				/* the precondition does not hold */
	LEASE_CONTENDED				/* held by another owner, or being changed
								 * by another transaction right now */
} LeaseOutcome;

extern LeaseOutcome hl_lease_cas(const LeaseRequest *req, Lease *result,
								 bool *found);
extern bool hl_lease_lookup(text *name, Lease *lease);
/* Who holds a lease up (hl_lease_blocker) */
typedef enum HlBlockerKind
{
	BLOCKER_NONE,
	BLOCKER_FENCE,				/* an open fence of the current term */
	BLOCKER_TERM_CHANGE,		/* a term beginning or ending, in flight */
	BLOCKER_ROW_CHANGE			/* another uncommitted change (a renewal),
								 * or a row lock a change waits for */
} HlBlockerKind;

extern int	hl_lease_blocker(text *name, HlBlockerKind *kind);
extern bool hl_forget(text *name, TimestampTz ended_before,
					  int64 floor_raised);
extern void hl_check_term_role(const Lease *lease);
extern void hl_prevent_write(const char *fn);

/* ---------------------------------------------------------------------
 * fence.c: hoplock_fence
 * ---------------------------------------------------------------------
 */
extern void hl_fence(text *name, int64 generation);
extern void hl_fence_once(text *name, int64 generation);
extern void hl_fence_init(void);

/* ---------------------------------------------------------------------
 * termlock.c: the per-name term lock
 * ---------------------------------------------------------------------
 */
extern bool hl_term_trylock(text *name, LOCKMODE mode);
extern void hl_term_unlock(text *name, LOCKMODE mode);
extern void hl_term_lock_holders(text *name, int *fence_pid,
								 int *change_pid);

/* ---------------------------------------------------------------------
 * table.c: finding hoplock's tables and checking that they can be trusted
 * ---------------------------------------------------------------------
 */
typedef enum HlRel
{
	HL_REL_LEASE,
	HL_REL_FLOOR,
	HL_REL_HISTORY,
	HL_REL_BRANCH,
	HL_REL_EVENT,
	HL_REL_DELIVERY,
	HL_NRELS
} HlRel;

typedef struct HlTableInfo HlTableInfo;

typedef struct HlRelation
{
	HlRel		which;
	Relation	heap;
	Relation	index;			/* its primary key; floor: NULL */
	LOCKMODE	lockmode;
	HlTableInfo *info;			/* what the shape check found out */
} HlRelation;

extern bool hl_open(HlRel which, LOCKMODE lockmode, bool wait,
					HlRelation *rel);
extern void hl_close(HlRelation *rel, bool keep_locks);
extern void hl_table_busy_error(HlRel which) pg_attribute_noreturn();
extern bool hl_table_exists(HlRel which);
extern bool hl_extension_installed(void);
extern bool hl_extension_current(void);
extern Oid	hl_sequence_oid(const char *name);
extern TupleDesc hl_lease_result_desc(FunctionCallInfo fcinfo);
extern bool hl_lock_relation_briefly(Oid relid, LOCKMODE lockmode);
extern bool hl_table_has_foreign_constraints(HlRelation *rel);
extern bool hl_table_has_after_triggers(HlRelation *rel);

/* ---------------------------------------------------------------------
 * rowwrite.c: writing a row as the executor would
 * ---------------------------------------------------------------------
 */
extern void hl_row_insert(HlRelation *rel, HeapTuple tuple);
extern void hl_row_insert_many(HlRelation *rel, HeapTuple *tuples,
							   int ntuples);
extern TM_Result hl_row_update(HlRelation *rel, ItemPointer otid,
							   HeapTuple tuple);
extern TM_Result hl_row_delete(HlRelation *rel, ItemPointer otid);
extern void hl_rowwrite_init(void);

/* ---------------------------------------------------------------------
 * store.c: lease rows
 * ---------------------------------------------------------------------
 */
typedef struct LeaseVersion
{
	bool		found;
	ItemPointerData tid;
	Buffer		buffer;			/* pinned until hl_version_release() */
	TransactionId inflight;		/* another transaction is inserting or
								 * updating this version right now */
	Lease		lease;
} LeaseVersion;

extern void hl_store_fetch(HlRelation *rel, text *name, Snapshot snapshot,
						   LeaseVersion *version);
extern void hl_version_release(LeaseVersion *version);
extern TransactionId hl_store_locker(const LeaseVersion *version);
extern void hl_store_insert(HlRelation *rel, Lease *lease);
extern TM_Result hl_store_update(HlRelation *rel, ItemPointer otid,
								 Lease *lease);
extern int	hl_store_scan(text *after, int limit,
						  bool (*callback) (const Lease *lease, void *arg),
						  void *arg, text **last);
extern int64 hl_store_count_role(HlRelation *rel, Oid roleid, int64 limit);
extern void hl_format_handle(const Lease *lease, char *buf);

/* ---------------------------------------------------------------------
 * floor.c: the generation floor
 * ---------------------------------------------------------------------
 */
extern bool hl_next_generation(const Lease *cur, TimestampTz now,
							   int64 *generation, bool *busy);
extern bool hl_floor_refresh(void);
extern bool hl_floor_raise_forgotten(int64 generation);

/* ---------------------------------------------------------------------
 * history.c: the history of terms
 * ---------------------------------------------------------------------
 */
extern bool hl_history_lock(void);
extern void hl_history_unlock(void);
extern void hl_history_begin(const Lease *term);
extern void hl_history_end(const Lease *term, TimestampTz ended_at,
						   const char *how);
extern int	hl_history_prune(int batch);

/* ---------------------------------------------------------------------
 * events.c: NOTIFY payloads and log lines
 * ---------------------------------------------------------------------
 */
extern void hl_event(const char *event, const Lease *lease);
extern int64 hl_event_horizon(void);
extern int64 hl_event_newest(void);
extern void hl_events_init(void);

/* ---------------------------------------------------------------------
 * args.c: argument checks shared by the SQL entry points
 * ---------------------------------------------------------------------
 */
extern text *hl_arg_name(FunctionCallInfo fcinfo, int argno,
						 const char *what);
extern int64 hl_arg_ttl(FunctionCallInfo fcinfo, int argno);
extern int64 hl_arg_generation(FunctionCallInfo fcinfo, int argno);
extern int64 hl_arg_timeout(FunctionCallInfo fcinfo, int argno);
extern bool hl_arg_bool(FunctionCallInfo fcinfo, int argno,
						const char *what);
extern text *hl_arg_text(FunctionCallInfo fcinfo, int argno,
						 const char *what);

/* ---------------------------------------------------------------------
 * guc.c: settings
 * ---------------------------------------------------------------------
 */
extern int	hl_max_ttl;
extern char *hl_channel;
extern bool hl_notify_renewals;
extern bool hl_log_events;
extern char *hl_databases;
extern int	hl_naptime;			/* seconds */
extern int	hl_max_tracked;
extern int	hl_max_databases;
extern int	hl_queue_size;
extern int	hl_hung_holder_timeout;	/* milliseconds; 0: never */
extern int	hl_max_names_per_role;	/* 0: unlimited */
extern int	hl_history_size;	/* terms kept per database; 0: none */
extern int	hl_released_retention;	/* seconds; 0: kept forever */
extern int	hl_event_retention; /* seconds after delivery */

extern void hl_define_gucs(void);
extern bool hl_database_listed(const char *dbname);

/* ---------------------------------------------------------------------
 * wait.c: hoplock_wait and the waiters' condition variables
 * ---------------------------------------------------------------------
 */
extern bool hl_lease_wait(LeaseRequest *req, int64 timeout, Lease *result);
extern void hl_wake_waiters_at_end(text *name);
extern void hl_wake_waiters_if_lapsed_at_end(text *name,
											 TimestampTz expires_at);
extern void hl_wait_init(void);

/* ---------------------------------------------------------------------
 * session.c: session-bound terms
 * ---------------------------------------------------------------------
 */
extern void hl_session_bind(text *name);
extern void hl_session_init(void);

/* ---------------------------------------------------------------------
 * launcher.c, dbhooks.c, worker.c: the background workers
 * ---------------------------------------------------------------------
 */
extern void hl_register_launcher(void);
extern void hl_install_hooks(void);
extern void hl_wake_launcher_at_commit(void);
extern PGDLLEXPORT void hoplock_launcher_main(Datum arg);
extern PGDLLEXPORT void hoplock_worker_main(Datum arg);

#endif							/* HOPLOCK_H */
