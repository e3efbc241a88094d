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
#include "storage/buf.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
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
	FullTransactionId xmin;		/* of this row version; part of the handle */
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
	LEASE_OP_DELETE
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
} LeaseRequest;

typedef enum LeaseOutcome
{
	LEASE_DONE,					/* the lease was written */
	LEASE_REFUSED,				/* the precondition does not hold */
	LEASE_CONTENDED				/* held by another owner, or being changed
								 * by another transaction right now */
} LeaseOutcome;

extern LeaseOutcome lease_cas(const LeaseRequest *req, Lease *result);
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
extern void lease_insert(LeaseTable *table, Lease *lease);
extern TM_Result lease_update(LeaseTable *table, ItemPointer otid,
							  Lease *lease);
extern void lease_format_handle(const Lease *lease, char *buf);
extern TupleDesc lease_result_desc(FunctionCallInfo fcinfo);

/* ---------------------------------------------------------------------
 * events.c: NOTIFY payloads and log lines, sent at commit
 * ---------------------------------------------------------------------
 */
extern void hoplock_events_init(void);
extern void hoplock_event(const char *event, const Lease *lease);

/* ---------------------------------------------------------------------
 * args.c: argument checks shared by the SQL entry points
 * ---------------------------------------------------------------------
 */
extern text *hoplock_arg_name(FunctionCallInfo fcinfo, int argno,
							  const char *what);
extern int64 hoplock_arg_ttl(FunctionCallInfo fcinfo, int argno);
extern int64 hoplock_arg_generation(FunctionCallInfo fcinfo, int argno);
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

extern void hoplock_define_gucs(void);

#endif							/* HOPLOCK_H */
