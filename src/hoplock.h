/*-------------------------------------------------------------------------
 *
 * hoplock.h
 *		What every part of hoplock shares: the lease as C sees it and its
 *		constants.  Each subsystem has a header of its own (lease.h, the
 *		storage layer's storage.h, events.h, wait.h, session.h,
 *		workers.h, settings.h, ...), included only where it is used.
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

#include "datatype/timestamp.h"
#if PG_VERSION_NUM >= 160000
#include "varatt.h"				/* VARSIZE_ANY_EXHDR, moved in 16 */
#endif

/* The schema of the extension's tables */
#define HL_SCHEMA			"hoplock_internal"

/* Largest lease name or owner, in bytes. */
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
	text	   *value;			/* the holder's proclaimed value; NULL: none */
	TimestampTz step_down_at;	/* when a step-down was requested; 0: none */
	text	   *step_down_to;	/* ... to whom; NULL: anyone */
	int32		priority;		/* of the candidate the term was granted
								 * to (hoplock_wait); 0: hoplock_acquire */
	int32		handed_pid;		/* a handoff wrote the term for this
								 * waiting session, which has not taken it
								 * yet; 0: none */
	TimestampTz handed_start;	/* ... that session's start */
	TimestampTz hold_until;		/* min_hold: a running term's, or a
								 * released one's until the worker
								 * announces its end; 0: none */
	int64		keepalive;		/* the owner keepalive the running term
								 * takes its expiry from (keepalive.c); 0:
								 * none, the row's own expires_at;
								 * negative: minus the keepalive the term
								 * left (attach.c), its own expires_at */
	int64		keepalive_version;	/* that keepalive's version, part of the
									 * handle; 0: not attached */
	TransactionId changing;		/* set by the scans of store.c only: another
								 * transaction, running or committed since
								 * the snapshot, has updated or deleted the
								 * row version read */
} Lease;

/* Longest handle text, including the terminating NUL. */
#define LEASE_HANDLE_LEN	72

/* The term is running right now (clock before expires_at). */
static inline bool
hl_lease_is_held(const Lease *lease, TimestampTz now)
{
	return lease != NULL && lease->state == LEASE_STATE_HELD &&
		now < lease->expires_at;
}

/*
 * A term released early (min_hold) whose hold's end is still to be
 * announced: the worker's to schedule, nobody's to forget.
 */
static inline bool
hl_hold_pending(const Lease *lease)
{
	return lease != NULL && lease->state == LEASE_STATE_RELEASED &&
		lease->hold_until != 0;
}

/* The name is kept from other owners by such a hold right now. */
static inline bool
hl_lease_in_hold(const Lease *lease, TimestampTz now)
{
	return hl_hold_pending(lease) && now < lease->hold_until;
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
	return (long) Min((us + 999) / 1000, (int64) PG_INT32_MAX);
}

#endif							/* HOPLOCK_H */
