/*-------------------------------------------------------------------------
 *
 * lease.c
 *		The lease compare-and-swap.  acquire, renew, release, force_release,
 *		write and delete are all one routine, lease_cas(): read the newest
 *		version of the lease, decide what the request does to it, write that
 *		without waiting, and queue the events.  hoplock_fence is here too,
 *		since it is the other half of the same locking protocol.
 *
 *		Locking protocol
 *		----------------
 *		Each lease name has a "term lock", a heavyweight lock on an advisory
 *		lock tag built from the database and a 64-bit hash of the name:
 *
 *		- a call that starts or ends a term takes it in ExclusiveLock,
 *		- hoplock_fence takes it in ShareLock,
 *
 *		both conditionally (never waiting) and until the transaction ends.
 *		So no term can begin or end while a fence of the current term is
 *		open, and a fence cannot be taken while a term change is in flight.
 *		Renewals do not take the term lock at all, so a leader renews while
 *		its fenced transactions run.
 *
 *		Row versions are never locked.  Every write is a heap_update that
 *		does not wait: if another transaction is changing the row right now
 *		(a renewal, or a term change), the call reports contention at once.
 *		Under READ COMMITTED the newest committed version is used; under
 *		REPEATABLE READ and SERIALIZABLE a version committed after the
 *		transaction's snapshot raises a serialization failure, as UPDATE
 *		would.
 *
 *		Every write that starts, extends or ends a term forces a synchronous
 *		commit: an acknowledged grant is never lost, so a generation is never
 *		handed out twice.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "access/xact.h"
#include "access/xlog.h"
#include "common/hashfn.h"
#include "common/int.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "storage/lock.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/syscache.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* locktag_field4 of term locks; SQL's advisory locks use 1 and 2 */
#define HOPLOCK_LOCKTAG_CLASS	0x686c

/*
 * Generations carry the timeline in their high bits: a standby promoted
 * after missing the last grants of the old primary starts at a higher
 * timeline, so its generations are greater than any the old primary gave.
 */
#define GENERATION_TIMELINE_SHIFT	40

/* What a request does to the lease */
typedef enum LeaseAction
{
	ACTION_NONE,				/* precondition not met */
	ACTION_HELD_ELSEWHERE,		/* another owner's term is running */
	ACTION_EXTEND,				/* same term, new expires_at */
	ACTION_NEW_TERM,
	ACTION_END_TERM,
	ACTION_ANNOUNCE_EXPIRY		/* the term lapsed: mark it announced */
} LeaseAction;

/* ---------------------------------------------------------------------
 * Term locks
 * ---------------------------------------------------------------------
 */
static void
term_locktag(LOCKTAG *tag, text *name)
{
	uint64		hash;

	hash = hash_bytes_extended((const unsigned char *) VARDATA_ANY(name),
							   VARSIZE_ANY_EXHDR(name), 0);
	SET_LOCKTAG_ADVISORY(*tag, MyDatabaseId, (uint32) (hash >> 32),
						 (uint32) hash, HOPLOCK_LOCKTAG_CLASS);
}

static bool
try_term_lock(text *name, LOCKMODE mode)
{
	LOCKTAG		tag;

	term_locktag(&tag, name);
	return LockAcquire(&tag, mode, false, true) != LOCKACQUIRE_NOT_AVAIL;
}

/*
 * Give back one try_term_lock() of a call that ended up changing nothing, so
 * that a failed attempt does not keep fences out for the rest of its
 * transaction.  The lock manager counts acquisitions: a lock this
 * transaction took earlier for a change it did make stays held.
 */
static void
release_term_lock(text *name, LOCKMODE mode)
{
	LOCKTAG		tag;

	term_locktag(&tag, name);
	LockRelease(&tag, mode, false);
}

/* ---------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------
 */
static bool
handle_matches(const Lease *lease, text *handle)
{
	char		buf[LEASE_HANDLE_LEN];

	lease_format_handle(lease, buf);
	return VARSIZE_ANY_EXHDR(handle) == strlen(buf) &&
		memcmp(VARDATA_ANY(handle), buf, VARSIZE_ANY_EXHDR(handle)) == 0;
}

/* The generation of a new term after "previous" (0 if there was none). */
static int64
next_generation(int64 previous)
{
	TimeLineID	tli = GetWALInsertionTimeLine();
	int64		floor;

	if ((uint64) (tli - 1) >= ((uint64) 1 << (63 - GENERATION_TIMELINE_SHIFT)))
		floor = 1;				/* cannot happen in practice */
	else
		floor = ((int64) (tli - 1) << GENERATION_TIMELINE_SHIFT) + 1;

	return Max(previous + 1, floor);
}

static TimestampTz
add_ttl(TimestampTz now, int64 ttl)
{
	TimestampTz result;

	if (pg_add_s64_overflow(now, ttl, &result) || !IS_VALID_TIMESTAMP(result))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("lease expiry is out of range")));
	return result;
}

/*
 * Terms remember the role that began them by name (so that pg_dump and
 * restore keep it).  The current role's name is cached, so the common case,
 * the same role renewing, needs no catalog lookup.
 */
static Oid	my_role = InvalidOid;
static NameData my_role_name;
static bool role_callback_registered = false;

static void
invalidate_role(Datum arg, int cacheid, uint32 hashvalue)
{
	my_role = InvalidOid;
}

static const NameData *
current_role_name(void)
{
	Oid			role = GetUserId();

	if (!role_callback_registered)
	{
		CacheRegisterSyscacheCallback(AUTHOID, invalidate_role, (Datum) 0);
		role_callback_registered = true;
	}
	if (role != my_role)
	{
		namestrcpy(&my_role_name, GetUserNameFromId(role, false));
		my_role = role;
	}
	return &my_role_name;
}

/*
 * Only a member of the role that began a term may extend, end or fence it
 * (superusers are members of every role).
 */
static void
check_term_role(const Lease *lease)
{
	Oid			role;

	if (namestrcmp((Name) current_role_name(), NameStr(lease->owner_role)) == 0)
		return;

	role = get_role_oid(NameStr(lease->owner_role), true);
	if (!has_privs_of_role(GetUserId(), role))
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for lease \"%s\"",
						text_to_cstring(lease->name)),
				 OidIsValid(role) ?
				 errdetail("Only members of role \"%s\", which began the current term, may change or fence it.",
						   NameStr(lease->owner_role)) :
				 errdetail("Role \"%s\", which began the current term, no longer exists; only a superuser may change or fence it.",
						   NameStr(lease->owner_role))));
}

static void
prevent_write(const char *fn)
{
	PreventCommandIfReadOnly(fn);
	PreventCommandDuringRecovery(fn);
}

/*
 * Look up the newest version of the lease for a write.
 *
 * Under REPEATABLE READ and SERIALIZABLE, first read it through the
 * transaction snapshot (which also takes SSI predicate locks), and refuse to
 * write over a version that snapshot cannot see.
 */
static void
fetch_for_update(LeaseTable *table, text *name, LeaseVersion *version)
{
	SnapshotData dirty;

	InitDirtySnapshot(dirty);

	if (IsolationUsesXactSnapshot())
	{
		LeaseVersion seen;

		/* the transaction snapshot, seeing this transaction's own writes */
		PushCopiedSnapshot(GetTransactionSnapshot());
		UpdateActiveSnapshotCommandId();
		lease_fetch(table, name, GetActiveSnapshot(), &seen);
		PopActiveSnapshot();
		lease_version_release(&seen);

		lease_fetch(table, name, &dirty, version);
		if (version->found && !TransactionIdIsValid(version->inflight) &&
			(!seen.found || !ItemPointerEquals(&seen.tid, &version->tid)))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update"),
					 errdetail("Lease \"%s\" was changed by a transaction that committed after this one began.",
							   text_to_cstring(name))));
	}
	else
		lease_fetch(table, name, &dirty, version);
}

/* ---------------------------------------------------------------------
 * The decision
 * ---------------------------------------------------------------------
 */
static LeaseAction
decide(const LeaseRequest *req, const Lease *cur, TimestampTz now)
{
	bool		held = lease_is_held(cur, now);
	bool		mine = held && req->owner != NULL &&
		text_equal(cur->owner, req->owner);
	bool		term_ok = mine && (req->generation == 0 ||
								   req->generation == cur->generation);

	switch (req->op)
	{
		case LEASE_OP_ACQUIRE:
			if (!held)
				return ACTION_NEW_TERM;
			return mine ? ACTION_EXTEND : ACTION_HELD_ELSEWHERE;

		case LEASE_OP_RENEW:
			return term_ok ? ACTION_EXTEND : ACTION_NONE;

		case LEASE_OP_RELEASE:
			return term_ok ? ACTION_END_TERM : ACTION_NONE;

		case LEASE_OP_FORCE_RELEASE:
			return held ? ACTION_END_TERM : ACTION_NONE;

		case LEASE_OP_WRITE:
			if (req->handle == NULL)
				return lease_has_state(cur) ? ACTION_NONE : ACTION_NEW_TERM;
			if (!lease_has_state(cur) || !handle_matches(cur, req->handle))
				return ACTION_NONE;
			return mine ? ACTION_EXTEND : ACTION_NEW_TERM;

		case LEASE_OP_DELETE:
			if (!lease_has_state(cur) || !handle_matches(cur, req->handle))
				return ACTION_NONE;
			return ACTION_END_TERM;

		case LEASE_OP_EXPIRE:
			if (cur != NULL && cur->state == LEASE_STATE_HELD &&
				now >= cur->expires_at)
				return ACTION_ANNOUNCE_EXPIRY;
			return ACTION_NONE;

		case LEASE_OP_SESSION_END:
			if (held && cur->session_pid == req->session_pid &&
				cur->session_start == req->session_start)
				return ACTION_END_TERM;
			return ACTION_NONE;
	}
	pg_unreachable();
}

/*
 * Queue the event of a term that ends: a running term was "released" (by
 * its holder, by force, or by hoplock_write over it); a lapsed one that
 * nobody announced yet "expired"; one already announced says nothing more.
 */
static void
announce_end(const Lease *cur, TimestampTz now)
{
	if (lease_is_held(cur, now))
	{
		Lease		ended = *cur;

		ended.expires_at = now;
		hoplock_event("released", &ended);
	}
	else if (cur->state == LEASE_STATE_HELD)
		hoplock_event("expired", cur);
}

/*
 * Compute the row that "action" writes over "cur" (NULL: no row yet).
 */
static void
build_new_row(const LeaseRequest *req, LeaseAction action, const Lease *cur,
			  TimestampTz now, Lease *new)
{
	switch (action)
	{
		case ACTION_EXTEND:
			*new = *cur;
			new->renewed_at = now;
			new->expires_at = add_ttl(now, req->ttl);
			break;

		case ACTION_NEW_TERM:
			memset(new, 0, sizeof(Lease));
			new->name = req->name;
			new->owner = req->owner;
			new->state = LEASE_STATE_HELD;
			new->owner_role = *current_role_name();
			new->generation = next_generation(cur ? cur->generation : 0);
			new->acquired_at = now;
			new->renewed_at = now;
			new->expires_at = add_ttl(now, req->ttl);
			break;

		case ACTION_END_TERM:
			*new = *cur;
			new->state = LEASE_STATE_RELEASED;
			if (lease_is_held(cur, now))
				new->expires_at = now;
			new->session_pid = 0;
			new->session_start = 0;
			break;

		case ACTION_ANNOUNCE_EXPIRY:
			*new = *cur;
			new->state = LEASE_STATE_EXPIRED;
			new->session_pid = 0;
			new->session_start = 0;
			break;

		default:
			elog(ERROR, "lease action %d writes nothing", (int) action);
	}

	/* session_bound binds the term it begins or extends to this session */
	if (req->session_bound &&
		(action == ACTION_NEW_TERM || action == ACTION_EXTEND))
	{
		new->session_pid = MyProcPid;
		new->session_start = MyStartTimestamp;
	}
}

/*
 * Privileges an action needs beyond EXECUTE on the function: extending or
 * ending someone's running term needs membership in its role.
 * force_release is the operator's override and needs none.
 */
static void
check_action_privileges(const LeaseRequest *req, LeaseAction action,
						const Lease *cur, TimestampTz now)
{
	if (req->op == LEASE_OP_FORCE_RELEASE || req->op == LEASE_OP_EXPIRE ||
		req->op == LEASE_OP_SESSION_END)
		return;
	if (action == ACTION_EXTEND || lease_is_held(cur, now))
		check_term_role(cur);
}

/*
 * After a write: queue its events and what must follow its commit.
 */
static void
after_write(const LeaseRequest *req, LeaseAction action, const Lease *cur,
			const Lease *written, TimestampTz now)
{
	switch (action)
	{
		case ACTION_EXTEND:
			if (hoplock_notify_renewals)
				hoplock_event("renewed", written);
			/* a later expiry the worker finds out by itself */
			if (written->expires_at < cur->expires_at)
				at_commit_deadline(written->name, written->expires_at);
			break;
		case ACTION_NEW_TERM:
			if (cur != NULL)
				announce_end(cur, now);
			hoplock_event("acquired", written);
			at_commit_deadline(written->name, written->expires_at);
			break;
		case ACTION_END_TERM:
			announce_end(cur, now);
			break;
		case ACTION_ANNOUNCE_EXPIRY:
			hoplock_event("expired", cur);
			at_end_wake_waiters(written->name);
			break;
		default:
			break;
	}
	if (req->session_bound &&
		(action == ACTION_NEW_TERM || action == ACTION_EXTEND))
	{
		/* registered before the binding commits, so never seen unbound */
		hoplock_session_register();
		at_commit_bind_session(written->name);
	}
}

/*
 * The compare-and-swap.  On LEASE_DONE, *result is the lease as written.
 * Otherwise *found says whether the lease has a row, and *result is that
 * row as last seen (the holder's term, say), for callers that wait.
 */
LeaseOutcome
lease_cas(const LeaseRequest *req, Lease *result, bool *found)
{
	TimestampTz now;
	LeaseTable	table;
	bool		term_locked = false;
	LeaseOutcome outcome;

	*found = false;
	prevent_write(req->fn);
	if (!lease_table_open(&table, RowExclusiveLock, true))
		return LEASE_CONTENDED;
	now = GetCurrentTimestamp();

	for (;;)
	{
		LeaseVersion cur;
		Lease	   *curp;
		LeaseAction action;
		TM_Result	tm;

		CHECK_FOR_INTERRUPTS();

		/* the version stays pinned until we are done with it */
		fetch_for_update(&table, req->name, &cur);
		curp = cur.found ? &cur.lease : NULL;
		*found = cur.found;
		if (cur.found)
			*result = cur.lease;

		if (TransactionIdIsValid(cur.inflight))
			action = ACTION_HELD_ELSEWHERE;
		else
			action = decide(req, curp, now);

		if (action == ACTION_NONE || action == ACTION_HELD_ELSEWHERE)
		{
			lease_version_release(&cur);
			outcome = (action == ACTION_NONE) ? LEASE_REFUSED : LEASE_CONTENDED;
			break;
		}

		/*
		 * A term change needs the term lock.  With it held, no fence is open
		 * and no other term change is in flight; look again, since the lease
		 * may have changed before we got it.
		 */
		if ((action == ACTION_NEW_TERM || action == ACTION_END_TERM) &&
			!term_locked)
		{
			lease_version_release(&cur);
			if (!try_term_lock(req->name, ExclusiveLock))
			{
				outcome = LEASE_CONTENDED;
				break;
			}
			term_locked = true;
			continue;
		}

		check_action_privileges(req, action, curp, now);
		build_new_row(req, action, curp, now, result);

		if (curp == NULL)
		{
			lease_insert(&table, result);
			tm = TM_Ok;
		}
		else
			tm = lease_update(&table, &cur.tid, result);
		lease_version_release(&cur);

		if (tm == TM_Ok)
		{
			after_write(req, action, curp, result, now);
			ForceSyncCommit();
			outcome = LEASE_DONE;
			break;
		}
		*result = cur.lease;
		if (tm == TM_BeingModified)
		{
			outcome = LEASE_CONTENDED;
			break;
		}
		if (tm == TM_Updated || tm == TM_Deleted)
		{
			/* a newer version committed after we looked */
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent update")));
			continue;
		}
		elog(ERROR, "unexpected result %d updating lease \"%s\"",
			 (int) tm, text_to_cstring(req->name));
	}

	/*
	 * A term change wakes the lease's waiters when its transaction ends.  A
	 * call that took the term lock but changed nothing hands it back; the
	 * waiters it kept out are woken by whoever changed the lease instead.
	 */
	if (term_locked)
	{
		if (outcome == LEASE_DONE)
			at_end_wake_waiters(req->name);
		else
			release_term_lock(req->name, ExclusiveLock);
	}
	lease_table_close(&table, true);
	return outcome;
}

/*
 * hoplock_fence: succeed only if term "generation" holds the lease now, and
 * keep any term change out until this transaction ends.
 */
void
lease_fence(text *name, int64 generation)
{
	LeaseTable	table;
	LeaseVersion cur;
	SnapshotData dirty;
	TimestampTz now;
	char	   *lease_name = text_to_cstring(name);

	/* a fence on a standby could not keep the primary from changing terms */
	PreventCommandDuringRecovery("hoplock_fence()");

	if (!try_term_lock(name, ShareLock))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not fence lease \"%s\"", lease_name),
				 errdetail("Another transaction is starting or ending a term of the lease.")));
	/* whoever waits for the lease may try again when this transaction ends */
	at_end_wake_waiters(name);
	if (!lease_table_open(&table, AccessShareLock, true))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("could not fence lease \"%s\"", lease_name),
				 errdetail("Another transaction holds a lock on table \"hoplock_internal.lease\".")));

	/*
	 * With the term lock held, the newest committed version has the current
	 * term, whatever our snapshot: a transaction in flight on the row can
	 * only be renewing it.  The dirty snapshot may show that renewal's new
	 * version, which may yet roll back; then read the committed one.
	 */
	InitDirtySnapshot(dirty);
	lease_fetch(&table, name, &dirty, &cur);
	if (TransactionIdIsValid(cur.inflight))
	{
		Snapshot	latest = RegisterSnapshot(GetLatestSnapshot());

		lease_version_release(&cur);
		lease_fetch(&table, name, latest, &cur);
		UnregisterSnapshot(latest);
	}
	lease_version_release(&cur);
	lease_table_close(&table, false);
	now = GetCurrentTimestamp();

	if (!cur.found)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease \"%s\" is not held by generation " INT64_FORMAT,
						lease_name, generation),
				 errdetail("The lease has never been acquired.")));
	if (cur.lease.generation != generation)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease \"%s\" is at generation " INT64_FORMAT ", not " INT64_FORMAT,
						lease_name, cur.lease.generation, generation)));
	if (!lease_is_held(&cur.lease, now))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease \"%s\" is no longer held by generation " INT64_FORMAT,
						lease_name, generation),
				 cur.lease.state == LEASE_STATE_RELEASED ?
				 errdetail("The term was released.") :
				 errdetail("The term expired at %s.",
						   timestamptz_to_str(cur.lease.expires_at))));

	check_term_role(&cur.lease);
}

/*
 * Read the lease as the active snapshot sees it (hoplock_holder,
 * hoplock_read).  Works on a hot standby.
 */
bool
lease_lookup(text *name, Lease *lease)
{
	LeaseTable	table;
	LeaseVersion version;
	Snapshot	snapshot;

	snapshot = ActiveSnapshotSet() ? GetActiveSnapshot() : GetTransactionSnapshot();
	lease_table_open(&table, AccessShareLock, false);
	lease_fetch(&table, name, snapshot, &version);
	lease_version_release(&version);
	lease_table_close(&table, false);

	if (version.found)
		*lease = version.lease;
	return version.found;
}
