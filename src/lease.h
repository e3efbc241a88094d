/*-------------------------------------------------------------------------
 *
 * lease.h
 *		The lease core: the compare-and-swap every writing call goes
 *		through (lease.c).  It calls down into the storage layer, the
 *		value mint, events and history, never back up.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_LEASE_H
#define HOPLOCK_LEASE_H

#include "hoplock.h"

typedef enum LeaseOp
{
	LEASE_OP_ACQUIRE,
	LEASE_OP_RENEW,
	LEASE_OP_RELEASE,
	LEASE_OP_FORCE_RELEASE,
	LEASE_OP_WRITE,
	LEASE_OP_DELETE,
	LEASE_OP_EXPIRE,			/* the worker: announce a lapsed term */
	LEASE_OP_SESSION_END,		/* end the terms bound to a session that
								 * ended */
	LEASE_OP_HANDOFF,			/* end a term, begin the next for a
								 * candidate */
	LEASE_OP_PROCLAIM,			/* set the running term's value */
	LEASE_OP_ABANDONED,			/* the worker: end a term handed to a
								 * candidate that stopped waiting */
	LEASE_OP_STEP_DOWN,			/* ask the holder to hand over */
	LEASE_OP_SLOTS,				/* record the name's number of slots
								 * (slotkey.h) */
	LEASE_OP_ATTACH				/* renew_all: the term takes its expiry
								 * from its owner's keepalive */
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
	int32		priority;		/* wait: the candidate's priority */
	bool		preempt;		/* wait: ask a holder of lower priority to
								 * step down; step_down: the worker asks
								 * for the candidate that does */
	text	   *to_owner;		/* handoff: the candidate's owner; NULL:
								 * the first candidate */
	text	   *value;			/* acquire, wait, proclaim: the value;
								 * NULL: none */
	int64		min_hold;		/* acquire, wait: microseconds a term
								 * released early keeps the name from
								 * other owners; 0: none */
	int64		keepalive;		/* attach: the keepalive's id ... */
	TimestampTz keepalive_expires;	/* ... its expires_at ... */
	int64		keepalive_version;	/* ... and its version; */
	int64		keepalive_from; /* a keepalive the term may be moved from */
	int32		session_pid;	/* session_end: the session that ended */
	TimestampTz session_start;
	bool		busy_is_contention; /* a locked table is contention (waits,
									 * the worker), not an error */
	bool		await_announcement; /* acquire: wait briefly for a lapsed
									 * term's row being changed (lease.c) */
	int32		slots;			/* acquire, wait, slots: the slots the
								 * caller gave (0 or 1: none) */
	int64		generation_after;	/* a new term's generation is above
									 * it (the name's other slots) */
	bool		owners_term_only;	/* renew, release, proclaim of a slot
									 * where the owner's term may be: go
									 * on only if the row is that term,
									 * running, not being changed; else
									 * LEASE_REFUSED, nothing counted */
	int64		expired_recorded;	/* expire: the event log holds the
									 * "expired" of this generation (a
									 * mass expiry a restart cut short):
									 * record none */
} LeaseRequest;

typedef enum LeaseOutcome
{
	LEASE_DONE,					/* the lease was written */
	LEASE_REFUSED,				/* the precondition does not hold */
	LEASE_CONTENDED,			/* held by another owner, or being changed
								 * by another transaction right now */
	LEASE_SLOTTED				/* the name has slots: the call is for
								 * one of them (slots.c); *result is the
								 * row recording how many */
} LeaseOutcome;

extern LeaseOutcome hl_lease_cas(const LeaseRequest *req, Lease *result,
								 bool *found);
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
extern void hl_commit_durably(bool wait_for_standbys);

#endif							/* HOPLOCK_LEASE_H */
