/*-------------------------------------------------------------------------
 *
 * hoplock.h
 *		Declarations shared by hoplock's source files: the lease as C sees
 *		it, the compare-and-swap request, and each file's entry points.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_H
#define HOPLOCK_H

#include "postgres.h"

#include "access/tableam.h"
#include "access/transam.h"
#include "datatype/timestamp.h"
#include "fmgr.h"
#include "port/atomics.h"
#include "storage/buf.h"
#include "storage/condition_variable.h"
#include "storage/itemptr.h"
#include "storage/latch.h"
#include "storage/lockdefs.h"
#include "storage/spin.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

/* Largest lease name or owner, in bytes. */
#define HOPLOCK_MAX_NAME_BYTES	256

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
	NameData	owner_role;		/* the role that began the term */
	int64		generation;
	TimestampTz acquired_at;
	TimestampTz renewed_at;
	TimestampTz expires_at;
	int32		session_pid;	/* 0: not bound to a session */
	TimestampTz session_start;
	TransactionId xmin;			/* of this row version */
	FullTransactionId full_xmin;	/* xmin with its epoch, for the handle:
									 * invalid until someone needs it */
} Lease;

/* Longest handle text, including the terminating NUL. */
#define LEASE_HANDLE_LEN	48

/* The term is running right now (clock before expires_at). */
static inline bool
lease_is_held(const Lease *lease, TimestampTz now)
{
	return lease != NULL && lease->state == LEASE_STATE_HELD &&
		now < lease->expires_at;
}

/* The row describes a term, running or lapsed, rather than nothing. */
static inline bool
lease_has_state(const Lease *lease)
{
	return lease != NULL && lease->state != LEASE_STATE_RELEASED;
}

/* Byte-wise equality of two texts (names and owners are compared so). */
static inline bool
text_equal(const text *a, const text *b)
{
	return VARSIZE_ANY_EXHDR(a) == VARSIZE_ANY_EXHDR(b) &&
		memcmp(VARDATA_ANY(a), VARDATA_ANY(b), VARSIZE_ANY_EXHDR(a)) == 0;
}

/* Milliseconds from "now" until "until", rounded up; at least 1. */
static inline long
ms_until(TimestampTz now, TimestampTz until)
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
} LeaseRequest;

typedef enum LeaseOutcome
{
	LEASE_DONE,					/* the lease was written */
	LEASE_REFUSED,				/* the precondition does not hold */
	LEASE_CONTENDED				/* held by another owner, or being changed
								 * by another transaction right now */
} LeaseOutcome;

extern LeaseOutcome lease_cas(const LeaseRequest *req, Lease *result,
							  bool *found);
extern void lease_fence(text *name, int64 generation);
extern bool lease_lookup(text *name, Lease *lease);

/* ---------------------------------------------------------------------
 * store.c: the lease table, read and written directly
 * ---------------------------------------------------------------------
 */
typedef struct LeaseTable
{
	Relation	heap;
	Relation	index;
	LOCKMODE	lockmode;
} LeaseTable;

typedef struct LeaseVersion
{
	bool		found;
	ItemPointerData tid;
	Buffer		buffer;			/* pinned until lease_version_release() */
	TransactionId inflight;		/* another transaction is inserting or
								 * updating this version right now */
	Lease		lease;
} LeaseVersion;

extern bool lease_table_open(LeaseTable *table, LOCKMODE lockmode,
							 bool nowait);
extern void lease_table_close(LeaseTable *table, bool keep_locks);
extern void lease_fetch(LeaseTable *table, text *name, Snapshot snapshot,
						LeaseVersion *version);
extern void lease_version_release(LeaseVersion *version);
extern bool lease_table_exists(void);
extern void lease_scan(bool (*callback) (const Lease *lease, void *arg),
					   void *arg);
extern void lease_insert(LeaseTable *table, Lease *lease);
extern TM_Result lease_update(LeaseTable *table, ItemPointer otid,
							  Lease *lease);
extern void lease_format_handle(const Lease *lease, char *buf);
extern TupleDesc lease_result_desc(FunctionCallInfo fcinfo);

/* ---------------------------------------------------------------------
 * events.c: NOTIFY payloads and log lines
 * ---------------------------------------------------------------------
 */
extern void hoplock_event(const char *event, const Lease *lease);

/* ---------------------------------------------------------------------
 * commit.c: work deferred to the end of the transaction
 * ---------------------------------------------------------------------
 */
extern void hoplock_commit_init(void);
extern void at_commit_log(const char *message);
extern void at_commit_deadline(text *name, TimestampTz expires_at);
extern void at_commit_bind_session(text *name);
extern void at_commit_wake_launcher(Oid dboid);
extern void at_commit_stop_worker(Oid dboid);
extern void at_end_wake_waiters(text *name);

/* ---------------------------------------------------------------------
 * args.c: argument checks shared by the SQL entry points
 * ---------------------------------------------------------------------
 */
extern text *hoplock_arg_name(FunctionCallInfo fcinfo, int argno,
							  const char *what);
extern int64 hoplock_arg_ttl(FunctionCallInfo fcinfo, int argno);
extern int64 hoplock_arg_generation(FunctionCallInfo fcinfo, int argno);
extern int64 hoplock_arg_timeout(FunctionCallInfo fcinfo, int argno);
extern bool hoplock_arg_bool(FunctionCallInfo fcinfo, int argno,
							 const char *what);
extern text *hoplock_arg_text(FunctionCallInfo fcinfo, int argno,
							  const char *what);

/* ---------------------------------------------------------------------
 * guc.c: settings
 * ---------------------------------------------------------------------
 */
extern int	hoplock_max_ttl;
extern char *hoplock_channel;
extern bool hoplock_notify_renewals;
extern bool hoplock_log_events;
extern char *hoplock_databases;
extern int	hoplock_naptime;	/* seconds */
extern int	hoplock_max_tracked;
extern int	hoplock_max_databases;
extern int	hoplock_queue_size;

extern void hoplock_define_gucs(void);

/* ---------------------------------------------------------------------
 * shmem.c: shared memory (only with shared_preload_libraries)
 * ---------------------------------------------------------------------
 */
#define HOPLOCK_WAIT_BUCKETS	1024

typedef enum HoplockMessageKind
{
	HOPLOCK_MSG_DEADLINE = 1,	/* a term begins or moves its expiry earlier */
	HOPLOCK_MSG_SESSION_END		/* a session ended, its bound term did not */
} HoplockMessageKind;

typedef struct HoplockMessage
{
	TimestampTz expires_at;		/* DEADLINE */
	TimestampTz session_start;	/* SESSION_END */
	int32		session_pid;	/* SESSION_END */
	uint8		kind;
	uint16		namelen;
	char		name[HOPLOCK_MAX_NAME_BYTES];
} HoplockMessage;

typedef enum HoplockWorkerState
{
	WORKER_FREE = 0,			/* slot unused */
	WORKER_STARTING,			/* launcher registered it */
	WORKER_SCANNING,			/* reading the whole lease table */
	WORKER_ANNOUNCING,			/* ending lapsed terms */
	WORKER_SLEEPING,			/* waiting for the next expiry */
	WORKER_ABSENT,				/* exited: hoplock is not installed */
	WORKER_STOPPED				/* exited: asked to stop */
} HoplockWorkerState;

typedef enum HoplockStopReason
{
	STOP_NONE = 0,
	STOP_EXTENSION_DROPPED,
	STOP_DATABASE_BUSY,			/* being dropped, copied, renamed or moved:
								 * it must have no sessions */
	STOP_NOT_WANTED				/* hoplock.databases no longer lists it */
} HoplockStopReason;

typedef struct HoplockDbSlot
{
	slock_t		mutex;			/* protects the fields below but dboid */
	Oid			dboid;			/* under HoplockShared.mutex; 0: free */
	uint32		generation;		/* of the worker started in it last */
	HoplockWorkerState state;
	pid_t		pid;
	Latch	   *latch;
	HoplockStopReason stop;
	TimestampTz stop_requested_at;
	TimestampTz next_wakeup;	/* 0 while awake: it drains before sleeping */
	bool		overflowed;
	uint64		head;			/* mailbox: messages [tail, head) */
	uint64		tail;
	HoplockMessage *ring;
	/* statistics, for hoplock_workers */
	TimestampTz started_at;
	TimestampTz last_wakeup;
	TimestampTz next_expiry;
	int64		tracked;
	int64		announced;
	int64		last_lag;		/* microseconds */
} HoplockDbSlot;

typedef struct HoplockShared
{
	slock_t		mutex;			/* slot allocation, launcher fields */
	pid_t		launcher_pid;
	Latch	   *launcher_latch;
	bool		rescan_all;
	int			nrequests;
	Oid			requests[16];	/* databases that just got the extension */
	int			nslots;
	int			queue_size;
	int			nprocs;			/* entries of sessions[] */
	pg_atomic_uint64 *sessions; /* per PGPROC: start time of a backend that
								 * bound a term, 0 otherwise */
	ConditionVariable waitcv[HOPLOCK_WAIT_BUCKETS];
	HoplockDbSlot slots[FLEXIBLE_ARRAY_MEMBER];
} HoplockShared;

extern HoplockShared *hoplock_shared;

/* What the launcher hands a worker in bgw_extra */
typedef struct HoplockWorkerArg
{
	Oid			dboid;
	uint32		generation;		/* must match its slot's */
} HoplockWorkerArg;

extern void hoplock_shmem_init(void);
extern HoplockDbSlot *hoplock_slot_for(Oid dboid);
extern void hoplock_post(const HoplockMessage *msg);
extern bool hoplock_take(HoplockDbSlot *slot, HoplockMessage *msg,
						 bool *overflowed);
extern ConditionVariable *hoplock_wait_cv(text *name);
extern void hoplock_wake_launcher(Oid dboid);
extern void hoplock_stop_worker(Oid dboid, HoplockStopReason reason);
extern void hoplock_session_register(void);
extern void hoplock_session_unregister(void);
extern bool hoplock_session_alive(int32 pid, TimestampTz start);

/* ---------------------------------------------------------------------
 * launcher.c, worker.c: the background workers
 * ---------------------------------------------------------------------
 */
extern void hoplock_register_launcher(void);
extern void hoplock_install_hooks(void);
extern PGDLLEXPORT void hoplock_launcher_main(Datum arg);
extern PGDLLEXPORT void hoplock_worker_main(Datum arg);

/* ---------------------------------------------------------------------
 * wait.c, session.c
 * ---------------------------------------------------------------------
 */
extern bool lease_wait(LeaseRequest *req, int64 timeout, Lease *result);
extern void hoplock_session_bind(text *name);

#endif							/* HOPLOCK_H */
