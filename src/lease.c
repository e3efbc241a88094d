/*-------------------------------------------------------------------------
 *
 * lease.c
 *		The lease compare-and-swap.  acquire, renew, release, force_release,
 *		write and delete are all one routine, hl_lease_cas(): read the
 *		newest version of the lease, decide what the request does to it,
 *		write that without waiting, and queue what must follow its commit.
 *
 *		Locking protocol
 *		----------------
 *		Each lease name has a term lock (termlock.c):
 *
 *		- a call that starts or ends a term takes it in ExclusiveLock,
 *		- hoplock_fence takes it in ShareLock (fence.c),
 *
 *		both conditionally (never waiting) and until the transaction ends.
 *		So no term can begin or end while a fence of the current term is
 *		open, and a fence cannot be taken while a term change is in flight.
 *		Renewals do not take the term lock at all, so a leader renews while
 *		its fenced transactions run.  A caller's rights are checked before
 *		it takes the term lock on anyone's behalf, and again after.
 *
 *		Row versions are locked only by the write itself, as UPDATE locks
 *		them (rowwrite.c): no write changes the name, the key, so FOR KEY
 *		SHARE -- a foreign key referencing lease names -- never stands in
 *		its way.  Every write is a heap_update that does not wait: if
 *		another transaction is changing the row right now (a renewal, or a
 *		term change), or holds a lock on it that UPDATE would wait for (FOR
 *		SHARE, FOR UPDATE), the call reports contention at once.
 *		Under READ COMMITTED the newest committed version is used; under
 *		REPEATABLE READ and SERIALIZABLE a version committed after the
 *		transaction's snapshot raises a serialization failure, as UPDATE
 *		would.
 *
 *		The clock is read after the version it decides on is fetched, and a
 *		new term never begins before the previous one ended as recorded, so
 *		the terms of a name never overlap in server time, whatever the
 *		scheduler or the clock does.
 *
 *		Every write that starts, extends or ends a term forces a synchronous
 *		commit: an acknowledged grant is never lost, so a generation is never
 *		handed out twice.  A transaction that wrote a lease, or any row of
 *		hoplock's tables (the generation floor, written before a call finds
 *		the lease contended, say), cannot be prepared: its term would be
 *		held, or kept from lapsing, for as long as the prepared transaction
 *		lasts, or the row it wrote and its lock kept (rowwrite.c refuses
 *		the PREPARE).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "bound.h"
#include "candidates.h"
#include "branch.h"
#include "eventlog.h"
#include "events.h"
#include "expiries.h"
#include "floor.h"
#include "history.h"
#include "hoplock.h"
#include "keepalive.h"
#include "lease.h"
#include "settings.h"
#include "shmem.h"
#include "slotforget.h"
#include "slotkey.h"
#include "storage.h"
#include "termlock.h"
#include "wakeup.h"

#include "access/subtrans.h"
#include "access/xact.h"
#include "common/int.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "replication/syncrep.h"
#include "storage/lock.h"
#include "storage/procarray.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"

/* What a request does to the lease */
typedef enum LeaseAction
{
	ACTION_NONE,				/* precondition not met */
	ACTION_HELD_ELSEWHERE,		/* another owner's term is running */
	ACTION_EXTEND,				/* same term, new expires_at */
	ACTION_NEW_TERM,
	ACTION_END_TERM,
	ACTION_ANNOUNCE_EXPIRY,		/* the term lapsed: mark it announced */
	ACTION_HANDOFF,				/* end the term, begin a candidate's */
	ACTION_PROCLAIM,			/* same term, a new value */
	ACTION_STEP_DOWN,			/* same term, a step-down asked of it */
	ACTION_END_HOLD,			/* a released term's hold is over: say so */
	ACTION_MARK_SLOTS,			/* record the name's slots (slotkey.h) */
	ACTION_ATTACH				/* same term, its expiry its keepalive's */
} LeaseAction;

/* ---------------------------------------------------------------------
 * Helpers
 * ---------------------------------------------------------------------
 */

/*
 * What the expiry set (expiries.c) said of the term a compare-and-swap
 * writes over (check_expiries): "recorded", a mass expiry committed its
 * "expired" already, and announce_end() records none; "lapsed_generation",
 * a term the call took for running that a mass expiry announces, which
 * the next look takes for lapsed whatever the clock says.  "held": the
 * call's decision took the term for running.
 */
static bool expiry_recorded = false;
static bool expiry_decided_held = false;
static int64 expiry_lapsed_generation = 0;

/*
 * Was the set trusted when check_expiries() looked (before it looked, so
 * that a set the worker filled and trusted meanwhile is not taken for an
 * empty one)?  If not, announce_end() asks the event log.
 */
static bool expiry_set_trusted = false;

/* How long a writer waits for a batch's events to commit, at most */
#define ANNOUNCING_WAIT_MS	200

static bool
handle_matches(const Lease *lease, text *handle)
{
	char		buf[LEASE_HANDLE_LEN];

	hl_format_handle(lease, buf);
	return VARSIZE_ANY_EXHDR(handle) == strlen(buf) &&
		memcmp(VARDATA_ANY(handle), buf, VARSIZE_ANY_EXHDR(handle)) == 0;
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
 * The current role's name, cached, so that the common case -- the same role
 * renewing -- needs no catalog lookup.
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
 * (superusers are members of every role).  The term names its role by OID
 * and by name: a role dropped and created again under the same name has
 * another OID, and an OID that a restore into another cluster carried over
 * names whatever role has it there, most likely under another name.  When
 * the two disagree, only a superuser may.  Returns whether the current
 * role may; if not, *gone says whether the term's role is gone (or
 * another), rather than one the current role lacks the privileges of.
 */
static bool
is_term_role(const Lease *lease, bool *gone)
{
	Oid			role = lease->owner_roleid;
	char	   *rolname;

	*gone = false;
	if (role == GetUserId() &&
		namestrcmp((Name) current_role_name(), NameStr(lease->owner_role)) == 0)
		return true;
	if (superuser())
		return true;

	rolname = OidIsValid(role) ? GetUserNameFromId(role, true) : NULL;
	if (rolname != NULL && strcmp(rolname, NameStr(lease->owner_role)) == 0)
		return has_privs_of_role(GetUserId(), role);
	*gone = true;
	return false;
}

void
hl_check_term_role(const Lease *lease)
{
	bool		gone;

	if (is_term_role(lease, &gone))
		return;
	if (!gone)
		ereport(ERROR,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 errmsg("permission denied for lease \"%s\"",
						hl_lease_display_name(lease->name)),
				 errdetail("Only members of role \"%s\", which began the current term, may change or fence it.",
						   NameStr(lease->owner_role))));
	ereport(ERROR,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 errmsg("permission denied for lease \"%s\"",
					hl_lease_display_name(lease->name)),
			 errdetail("Role \"%s\", which began the current term, no longer exists; only a superuser may change or fence it.",
					   NameStr(lease->owner_role))));
}

/*
 * Refuse a writing call where PostgreSQL refuses writes: a read-only
 * transaction, a hot standby, parallel mode.
 */
void
hl_prevent_write(const char *fn)
{
	PreventCommandIfReadOnly(fn);
	PreventCommandIfParallelMode(fn);
	PreventCommandDuringRecovery(fn);
}

/*
 * A change of a lease is acknowledged only once it is durable: the commit
 * flushes WAL even with synchronous_commit = off, and then also waits for
 * the synchronous standbys, if any, as "on" does -- a standby promoted
 * later must know every grant, renewal and release a client was told of.
 * synchronous_commit = local, the explicit choice not to wait for
 * standbys, is left as it is.  (Nor for the terms a session ends on its
 * way out, which must not wait for a standby.)
 */
void
hl_commit_durably(bool wait_for_standbys)
{
	ForceSyncCommit();
	if (synchronous_commit == SYNCHRONOUS_COMMIT_OFF && wait_for_standbys)
		(void) set_config_option("synchronous_commit", "on",
								 PGC_USERSET, PGC_S_SESSION,
								 GUC_ACTION_LOCAL, true, 0, false);
}

static void
commit_durably(const LeaseRequest *req)
{
	hl_commit_durably(req->op != LEASE_OP_SESSION_END);
}

/*
 * Look up the newest version of the lease for a write.  "last", if not
 * NULL, is where the caller's previous look found it: if it is still the
 * newest there, it is read without searching the index (hl_store_refetch).
 *
 * Under REPEATABLE READ and SERIALIZABLE, first read it through the
 * transaction snapshot (which also takes SSI predicate locks), and refuse to
 * write over a version that snapshot cannot see.
 */
static void
fetch_for_update(HlRelation *rel, text *name, ItemPointer last,
				 LeaseVersion *version)
{
	SnapshotData dirty;

	InitDirtySnapshot(dirty);

	if (IsolationUsesXactSnapshot())
	{
		LeaseVersion seen;

		/* the transaction snapshot, seeing this transaction's own writes */
		PushCopiedSnapshot(GetTransactionSnapshot());
		UpdateActiveSnapshotCommandId();
		hl_store_fetch(rel, name, GetActiveSnapshot(), &seen);
		PopActiveSnapshot();
		hl_version_release(&seen);

		hl_store_fetch(rel, name, &dirty, version);
		if (version->found && !TransactionIdIsValid(version->inflight) &&
			(!seen.found || !ItemPointerEquals(&seen.tid, &version->tid)))
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update"),
					 errdetail("Lease \"%s\" was changed by a transaction that committed after this one began.",
							   hl_lease_display_name(name))));
	}
	else if (last == NULL || !hl_store_refetch(rel, name, last, version))
		hl_store_fetch(rel, name, &dirty, version);
}

/* ---------------------------------------------------------------------
 * The decision
 * ---------------------------------------------------------------------
 */

static TimestampTz end_of_term(const Lease *cur, TimestampTz now);

/*
 * Does the hold of a term released early (min_hold) keep the name from
 * this caller?  From every owner but the term's, and from the term's owner
 * in a role that may not change the term's (is_term_role: the role must
 * be the one that began it by OID and by name, as after a restore into
 * another cluster the OID may be another role's).
 */
static bool
kept_by_hold(const LeaseRequest *req, const Lease *cur, TimestampTz now)
{
	bool		gone;

	if (!hl_lease_in_hold(cur, now))
		return false;
	return !(hl_text_equal(cur->owner, req->owner) &&
			 is_term_role(cur, &gone));
}

/*
 * Does the term "cur", ended now by "req", keep the name for the rest of
 * its hold?  When its holder releases it, or its session ends, before the
 * hold is over; not when an operator forces it, a delete or a write ends
 * it, or a handoff gives the name to a candidate on purpose; nor a term
 * handed to a candidate that never took it, however it ends (its session
 * may be found gone before the candidate is).  (An expiry comes after the
 * hold: a term's first ttl covers it.)
 */
static bool
keeps_hold(const LeaseRequest *req, const Lease *cur, TimestampTz now)
{
	return (req->op == LEASE_OP_RELEASE || req->op == LEASE_OP_SESSION_END) &&
		hl_lease_is_held(cur, now) && cur->handed_pid == 0 &&
		cur->hold_until > end_of_term(cur, now);
}

static LeaseAction
decide(const LeaseRequest *req, const Lease *cur, TimestampTz now)
{
	bool		held = hl_lease_is_held(cur, now);
	bool		mine = held && req->owner != NULL &&
		hl_text_equal(cur->owner, req->owner);
	bool		term_ok;

	/*
	 * A term handed to a candidate, not taken yet, is the candidate's
	 * session's alone: no other session waiting, or acting, under the same
	 * owner takes it.
	 */
	if (mine && cur->handed_pid != 0 &&
		(cur->handed_pid != MyProcPid || cur->handed_start != MyStartTimestamp))
		mine = false;
	term_ok = mine && (req->generation == 0 ||
					   req->generation == cur->generation);

	switch (req->op)
	{
		case LEASE_OP_ACQUIRE:
			if (!held)
				return kept_by_hold(req, cur, now) ? ACTION_HELD_ELSEWHERE :
					ACTION_NEW_TERM;
			return mine ? ACTION_EXTEND : ACTION_HELD_ELSEWHERE;

		case LEASE_OP_RENEW:
			return term_ok ? ACTION_EXTEND : ACTION_NONE;

		case LEASE_OP_RELEASE:
			return term_ok ? ACTION_END_TERM : ACTION_NONE;

		case LEASE_OP_FORCE_RELEASE:
			if (held)
				return ACTION_END_TERM;
			/* the operator's override ends a hold too */
			return hl_lease_in_hold(cur, now) ? ACTION_END_HOLD : ACTION_NONE;

		case LEASE_OP_WRITE:
			if (req->handle == NULL)
				return hl_lease_has_state(cur) || kept_by_hold(req, cur, now) ?
					ACTION_NONE : ACTION_NEW_TERM;
			if (!hl_lease_has_state(cur) || !handle_matches(cur, req->handle))
				return ACTION_NONE;
			/* nor is a handed term, untaken, written over */
			if (held && cur->handed_pid != 0 && !mine)
				return ACTION_NONE;
			return mine ? ACTION_EXTEND : ACTION_NEW_TERM;

		case LEASE_OP_DELETE:
			if (!hl_lease_has_state(cur) || !handle_matches(cur, req->handle))
				return ACTION_NONE;
			return ACTION_END_TERM;

		case LEASE_OP_EXPIRE:
			if (cur != NULL && cur->state == LEASE_STATE_HELD &&
				now >= cur->expires_at)
				return ACTION_ANNOUNCE_EXPIRY;
			/* ... or the end of a released term's hold */
			if (hl_hold_pending(cur) && now >= cur->hold_until)
				return ACTION_END_HOLD;
			return ACTION_NONE;

		case LEASE_OP_SESSION_END:
			if (held && cur->session_pid == req->session_pid &&
				cur->session_start == req->session_start)
				return ACTION_END_TERM;
			return ACTION_NONE;

		case LEASE_OP_HANDOFF:
			return term_ok ? ACTION_HANDOFF : ACTION_NONE;

		case LEASE_OP_PROCLAIM:
			return term_ok ? ACTION_PROCLAIM : ACTION_NONE;

		case LEASE_OP_ABANDONED:
			/* a handed term, not taken since, whose candidate waits no more */
			if (held && cur->generation == req->generation &&
				cur->handed_pid != 0 &&
				!hl_candidate_waits(req->name, cur->handed_pid,
									cur->handed_start))
				return ACTION_END_TERM;
			return ACTION_NONE;

		case LEASE_OP_STEP_DOWN:
			return held ? ACTION_STEP_DOWN : ACTION_NONE;

		case LEASE_OP_SLOTS:
			/* check_slots() let it through: no term runs */
			return ACTION_MARK_SLOTS;
		case LEASE_OP_ATTACH:
			/*
			 * A term attached to another keepalive stays with it, unless
			 * it is moved from that one (hoplock_renew_all, from a
			 * keepalive that is not the caller's by name).
			 */
			return term_ok && (cur->keepalive <= 0 ||
							   cur->keepalive == req->keepalive_from) &&
				req->keepalive_expires > cur->acquired_at ?
				ACTION_ATTACH : ACTION_NONE;
	}
	pg_unreachable();
}

/*
 * When a running term that ends now ended, as recorded: never before it
 * began, whatever the clock did meanwhile.
 */
static TimestampTz
end_of_term(const Lease *cur, TimestampTz now)
{
	return Max(now, cur->acquired_at);
}

/*
 * How a running term "cur" ended, for the history.  A term handed to a
 * candidate that never took it was abandoned, whichever the worker found
 * gone first, the candidate's wait or its session.
 */
static const char *
how_ended(const LeaseRequest *req, const Lease *cur)
{
	if (req->op == LEASE_OP_SESSION_END && cur->handed_pid != 0)
		return "abandoned";
	switch (req->op)
	{
		case LEASE_OP_FORCE_RELEASE:
			return "force-released";
		case LEASE_OP_SESSION_END:
			return "session ended";
		case LEASE_OP_DELETE:
			return "deleted";
		case LEASE_OP_WRITE:
			return "written over";
		case LEASE_OP_HANDOFF:
			return "handed off";
		case LEASE_OP_ABANDONED:
			return "abandoned";
		default:
			return "released";
	}
}

/*
 * Queue the event of a term that ends, and record how it ended: a running
 * term was "released" (by its holder, by force, or by hoplock_write over
 * it); a lapsed one that nobody announced yet "expired" (taken over, if a
 * new term begins over it); one already announced says nothing more.
 */
static void
announce_end(const LeaseRequest *req, const Lease *cur, TimestampTz now,
			 bool new_term)
{
	if (hl_lease_is_held(cur, now))
	{
		Lease		ended = *cur;

		ended.expires_at = end_of_term(cur, now);
		/* its event says when a hold it keeps frees the name */
		if (!keeps_hold(req, cur, now))
			ended.hold_until = 0;
		hl_event("released", &ended);
		hl_history_end(cur, ended.expires_at, how_ended(req, cur));
		hl_count(req->op == LEASE_OP_FORCE_RELEASE ?
				 HL_COUNT_FORCE_RELEASES : HL_COUNT_RELEASES);
	}
	else if (cur->state == LEASE_STATE_HELD)
	{
		/* a mass expiry recorded its event already (massexpiry.c) */
		if (expiry_recorded ||
			(req->expired_recorded != 0 &&
			 req->expired_recorded == cur->generation) ||
			(!expiry_set_trusted &&
			 hl_eventlog_expiry_pending(cur->name, cur->generation)))
		{
			hl_history_end(cur, cur->expires_at, "expired");
			return;
		}
		hl_event("expired", cur);
		hl_history_end(cur, cur->expires_at,
					   new_term ? "taken over" : "expired");
		hl_count(HL_COUNT_EXPIRIES);
	}
}

/*
 * Queue the "freed" event of a released term whose hold is over, or ended
 * by force: its expires_at is the instant the name became free.
 */
static void
announce_hold_end(const Lease *cur, TimestampTz now)
{
	Lease		freed = *cur;

	freed.expires_at = Min(now, cur->hold_until);
	freed.value = NULL;
	hl_event("freed", &freed);
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
		req->op == LEASE_OP_SESSION_END || req->op == LEASE_OP_ABANDONED ||
		req->op == LEASE_OP_STEP_DOWN || req->op == LEASE_OP_SLOTS)
		return;
	if (action == ACTION_EXTEND || hl_lease_is_held(cur, now))
		hl_check_term_role(cur);
}

/* The key of a role's lock for hoplock.max_names_per_role */
static text *
role_lock_key(Oid roleid)
{
	char		key[32];

	/* keyed like a term lock, by a name no lease can have */
	snprintf(key, sizeof(key), "\x01role %u", roleid);
	return cstring_to_text(key);
}

/*
 * Role "roleid" may not have more names than hoplock.max_names_per_role.
 * Returns whether it took the role's lock (see role_lock_key).
 */
static bool
check_names_per_role(HlRelation *rel, Oid roleid)
{
	int64		n;
	char	   *rolename;

	if (hl_max_names_per_role <= 0 || superuser_arg(roleid))
		return false;
	rolename = GetUserNameFromId(roleid, false);

	/*
	 * One transaction of a role creates names at a time, holding a lock of
	 * the role (keyed like a term lock, by a name no lease can have: it
	 * begins with a control character) until it ends; otherwise sessions
	 * counting at once would each find room.  A call that ends up creating
	 * nothing gives it back (hl_lease_cas).
	 */
	if (!hl_term_trylock(role_lock_key(roleid), ExclusiveLock))
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("another transaction of role \"%s\" is creating lease names",
						rolename),
				 errdetail("\"hoplock.max_names_per_role\" is set: a role creates names one transaction at a time."),
				 errhint("The call changed nothing; try it again.")));
	n = hl_store_count_role(rel, roleid, hl_max_names_per_role);
	if (n >= hl_max_names_per_role)
		ereport(ERROR,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("role \"%s\" already has %d lease names, the most \"hoplock.max_names_per_role\" allows",
						rolename, hl_max_names_per_role),
				 errhint("Reuse a name, or ask a superuser to raise \"hoplock.max_names_per_role\".")));
	return true;
}

/*
 * The row of term "cur" once it has ended, in "state": what belonged to
 * the running term (its session, value, step-down request, priority,
 * handed candidate) goes with it; the name, generation and times stay.
 */
static void
ended_row(const Lease *cur, char state, Lease *new)
{
	*new = *cur;
	new->state = state;
	new->session_pid = 0;
	new->session_start = 0;
	new->value = NULL;
	new->step_down_at = 0;
	new->step_down_to = NULL;
	new->priority = 0;
	new->handed_pid = 0;
	new->handed_start = 0;
	new->hold_until = 0;
	new->keepalive = 0;
	new->keepalive_version = 0;
}

/*
 * Attach new term "new" to its (role, owner)'s running keepalive, if it has
 * one: it runs until the keepalive's expires_at from now on, and the next
 * hoplock_renew_all renews it.  Looked up only when the database may have
 * a keepalive (attach.c), after the transaction has its id.  A term with a
 * hold past the keepalive's expiry, or beginning at or after it, stays on
 * its own, with minus the keepalive's id (the owner's next renew_all
 * attaches it, having moved the keepalive past the term's beginning).  Returns false
 * when a keepalive of the owner is being begun or renewed by a transaction
 * in flight: contention.
 */
static bool
attach_new_term(Lease *new)
{
	Keepalive	k;
	int			found;

	(void) GetCurrentTransactionId();
	if (!hl_keepalives_maybe())
		return true;
	found = hl_keepalive_live(new->owner_roleid, new->owner, &k);
	if (found < 0)
		return false;
	if (found == 0)
		return true;
	/*
	 * Nor does a term that begins at or after the keepalive's expiry (a
	 * term begun ahead of the clock, after it stepped back): its expiry
	 * is never before its beginning.
	 */
	if (new->hold_until > k.expires_at || k.expires_at <= new->acquired_at)
	{
		new->keepalive = -k.id; /* (found by the next renew_all) */
		return true;
	}
	new->keepalive = k.id;
	new->keepalive_version = k.version;
	new->renewed_at = Max(new->renewed_at, k.renewed_at);
	new->expires_at = k.expires_at;
	return true;
}

/*
 * Compute the row that "action" writes over "cur" (NULL: no row yet).
 * A new term's generation comes from the floor; returns false if that is
 * contended (*busy: the floor table is locked).
 */
static bool
build_new_row(const LeaseRequest *req, LeaseAction action, const Lease *cur,
			  const HlCandidatePick *pick, TimestampTz now, Lease *new,
			  bool *busy)
{
	*busy = false;
	switch (action)
	{
		case ACTION_EXTEND:
			/* never before the term began, nor its last renewal, as recorded */
			*new = *cur;
			new->renewed_at = Max(now, Max(cur->renewed_at, cur->acquired_at));
			new->expires_at = add_ttl(new->renewed_at, req->ttl);
			/* an acquire or wait by the holder may give a new value */
			if (req->value != NULL)
				new->value = req->value;
			/* ... and a wait a higher priority */
			new->priority = Max(cur->priority, req->priority);
			/* a handed term extended by its owner is taken */
			new->handed_pid = 0;
			new->handed_start = 0;
			/* ... and one renewed by itself leaves its keepalive (minus
			 * its id: the owner's next renew_all finds it) */
			new->keepalive = cur->keepalive > 0 ? -cur->keepalive :
				cur->keepalive;
			new->keepalive_version = 0;
			break;

		case ACTION_ATTACH:
			*new = *cur;
			new->renewed_at = Max(now, Max(cur->renewed_at, cur->acquired_at));
			new->keepalive = req->keepalive;
			new->keepalive_version = req->keepalive_version;
			/* (read from the keepalive from now on) */
			new->expires_at = req->keepalive_expires;
			break;

		case ACTION_PROCLAIM:
			*new = *cur;
			new->value = req->value;
			break;

		case ACTION_STEP_DOWN:
			*new = *cur;
			new->step_down_at = now;
			new->step_down_to = req->preempt ? pick->owner : req->to_owner;
			break;

		case ACTION_NEW_TERM:
			{
				/* not before the previous term ended, as recorded */
				TimestampTz begin = now;

				if (cur != NULL && !hl_lease_is_held(cur, now))
					begin = Max(now, cur->expires_at);

				memset(new, 0, sizeof(Lease));
				if (!hl_next_generation(cur, now, &new->generation, busy))
					return false;
				/* a slot's: above the name's other slots' too */
				if (new->generation <= req->generation_after &&
					!hl_mint(req->generation_after, now, &new->generation,
							 busy))
					return false;
				new->name = req->name;
				new->owner = req->owner;
				new->state = LEASE_STATE_HELD;
				new->owner_role = *current_role_name();
				new->owner_roleid = GetUserId();
				new->acquired_at = begin;
				new->renewed_at = begin;
				new->expires_at = add_ttl(begin, req->ttl);
				new->value = req->value;
				new->priority = req->priority;
				if (req->min_hold > 0)
					new->hold_until = add_ttl(begin, req->min_hold);
				break;
			}

		case ACTION_HANDOFF:
			{
				/* the candidate's term begins as the running one ends */
				TimestampTz begin = end_of_term(cur, now);

				memset(new, 0, sizeof(Lease));
				if (!hl_next_generation(cur, now, &new->generation, busy))
					return false;
				new->name = req->name;
				new->owner = pick->owner;
				new->state = LEASE_STATE_HELD;
				namestrcpy(&new->owner_role,
						   GetUserNameFromId(pick->roleid, false));
				new->owner_roleid = pick->roleid;
				new->acquired_at = begin;
				new->renewed_at = begin;
				new->expires_at = add_ttl(begin, pick->ttl);
				new->value = pick->value;
				new->priority = pick->priority;
				if (pick->min_hold > 0)
					new->hold_until = add_ttl(begin, pick->min_hold);
				/* not taken until the candidate's wait extends it */
				new->handed_pid = pick->pid;
				new->handed_start = pick->session_start;
				if (pick->session_bound)
				{
					new->session_pid = pick->pid;
					new->session_start = pick->session_start;
				}
				break;
			}

		case ACTION_END_TERM:
			ended_row(cur, LEASE_STATE_RELEASED, new);
			if (hl_lease_is_held(cur, now))
				new->expires_at = end_of_term(cur, now);
			if (keeps_hold(req, cur, now))
				new->hold_until = cur->hold_until;
			break;

		case ACTION_END_HOLD:
			*new = *cur;
			new->hold_until = 0;
			break;

		case ACTION_ANNOUNCE_EXPIRY:
			ended_row(cur, LEASE_STATE_EXPIRED, new);
			break;

		case ACTION_MARK_SLOTS:
			/* a released row: its generation stays the name's last */
			if (cur != NULL)
				ended_row(cur, LEASE_STATE_RELEASED, new);
			else
			{
				memset(new, 0, sizeof(Lease));
				if (!hl_next_generation(NULL, now, &new->generation, busy))
					return false;
				new->name = req->name;
				new->state = LEASE_STATE_RELEASED;
				new->acquired_at = now;
				new->renewed_at = now;
				new->expires_at = now;
			}
			new->owner = hl_slot_marker_owner(req->slots);
			new->owner_role = *current_role_name();
			new->owner_roleid = GetUserId();
			break;

		default:
			elog(ERROR, "lease action %d writes nothing", (int) action);
	}

	/* every write gives the row a new version, its handle (branch.c) */
	if (!hl_mint(cur != NULL ? cur->version : 0, now, &new->version, busy))
		return false;

	/* session_bound binds the term it begins or extends to this session */
	if (req->session_bound &&
		(action == ACTION_NEW_TERM || action == ACTION_EXTEND))
	{
		new->session_pid = MyProcPid;
		new->session_start = MyStartTimestamp;
	}
	return true;
}

/*
 * After a write: queue its events, the history and what must follow its
 * commit.
 */
static void
after_write(const LeaseRequest *req, LeaseAction action, const Lease *cur,
			const HlCandidatePick *pick, const Lease *written, TimestampTz now)
{
	switch (action)
	{
		case ACTION_EXTEND:
			hl_count(HL_COUNT_RENEWALS);
			if (hl_notify_renewals)
				hl_event("renewed", written);
			/* a new value given at acquire or wait is proclaimed */
			if (req->value != NULL &&
				(cur->value == NULL || !hl_text_equal(cur->value, req->value)))
				hl_event("proclaimed", written);
			/*
			 * A later expiry the worker finds out by itself; an earlier one it
			 * is told of, and the waiters, who sleep until the old one, are
			 * woken (a renewal that extends the term wakes nobody).
			 */
			if (written->expires_at < cur->expires_at)
			{
				hl_post_deadline_at_commit(written->name, written->expires_at);
				hl_wake_waiters_at_end(written->name);
			}
			/* a term that leaves its keepalive is the worker's to schedule */
			else if (cur->keepalive > 0)
				hl_post_deadline_at_commit(written->name, written->expires_at);
			break;
		case ACTION_NEW_TERM:
			if (cur != NULL)
				announce_end(req, cur, now, true);
			/* a hold that ran out, not announced yet, is announced first */
			if (hl_hold_pending(cur) && now >= cur->hold_until)
				announce_hold_end(cur, now);
			hl_event("acquired", written);
			hl_count(HL_COUNT_TERMS_BEGUN);
			hl_post_deadline_at_commit(written->name, written->expires_at);
			break;
		case ACTION_END_TERM:
			announce_end(req, cur, now, false);
			/* the worker says when a hold the term keeps is over */
			if (written->hold_until != 0)
				hl_post_deadline_at_commit(written->name, written->hold_until);
			break;
		case ACTION_END_HOLD:
			announce_hold_end(cur, now);
			/* the operator's override, ending a hold, is counted as one */
			if (req->op == LEASE_OP_FORCE_RELEASE)
				hl_count(HL_COUNT_FORCE_RELEASES);
			hl_wake_waiters_at_end(written->name);
			break;
		case ACTION_ANNOUNCE_EXPIRY:
			announce_end(req, cur, now, false);
			hl_wake_waiters_at_end(written->name);
			break;
		case ACTION_PROCLAIM:
			hl_event("proclaimed", written);
			break;
		case ACTION_STEP_DOWN:
			{
				/* the event's value: whom to hand over to, if anyone */
				Lease		asked = *written;

				asked.value = written->step_down_to;
				hl_event("step_down", &asked);
				break;
			}
		case ACTION_HANDOFF:
			announce_end(req, cur, now, false);
			hl_candidate_handed(written->name, pick, written->generation);
			/* should the candidate be gone by the commit, the worker ends it */
			hl_post_handed_at_commit(written->name, written->generation,
									 written->expires_at);
			hl_event("acquired", written);
			hl_count(HL_COUNT_TERMS_BEGUN);
			hl_post_deadline_at_commit(written->name, written->expires_at);
			break;
		default:
			break;
	}
	if (req->session_bound &&
		(action == ACTION_NEW_TERM || action == ACTION_EXTEND))
		hl_bound_add(written->name);
}

/*
 * Is the running term "cur" to be asked to step down for a candidate that
 * waits with preempt => true (hl_candidate_preemptor)?  Yes, with that
 * candidate's owner in pick->owner, unless none waits or the term was
 * asked already, for it or for anyone.
 */
static bool
preemption_due(const LeaseRequest *req, const Lease *cur,
			   HlCandidatePick *pick)
{
	pick->owner = hl_candidate_preemptor(req->name, cur->priority,
										 cur->owner_roleid);
	if (pick->owner == NULL)
		return false;
	if (cur->step_down_at != 0 &&
		(cur->step_down_to == NULL ||
		 hl_text_equal(cur->step_down_to, pick->owner)))
		return false;
	return true;
}

/*
 * How long an acquire waits for the row of a lapsed term that another
 * transaction is changing, in all: this many polls of 1 ms (counted, not
 * timed, so that a clock step cannot stretch it).
 */
#define ANNOUNCE_WAIT_POLLS	50

/*
 * The expiry worker announces a lapsed term, and forgets a name released
 * long ago, in a transaction, holding the lease's row until it commits.  A
 * hoplock_acquire that finds the row of a lease that is free -- a lapsed
 * term, announced or not, or a released one -- being changed waits for
 * that, polling, up to ANNOUNCE_WAIT_POLLS times (*polls counts them),
 * rather than report contention: whoever is changing the row is most
 * likely the worker announcing or forgetting just that.  (If it is another
 * acquire taking the lease over, this one finds it held once that one
 * commits.)  Returns whether to poll once more (the caller lets go of
 * what it holds and calls poll_pause); false if the call is not such an
 * acquire or has polled enough.  hoplock_wait does not poll: it sleeps
 * until the change's commit wakes it.  Nor does a transaction that reads
 * through one snapshot: the other transaction's commit would stay
 * invisible to it, and the next look would raise 40001.
 */
static bool
wait_for_announcement(const LeaseRequest *req, const Lease *cur,
					  TimestampTz now, int *polls)
{
	if (!req->await_announcement || cur == NULL ||
		hl_lease_is_held(cur, now) ||
		IsolationUsesXactSnapshot() || *polls >= ANNOUNCE_WAIT_POLLS)
		return false;
	(*polls)++;
	return true;
}

/* One poll of wait_for_announcement: 1 ms */
static void
poll_pause(void)
{
	/*
	 * A plain sleep, not the latch: a caller may be about to sleep on a
	 * condition variable (hoplock_wait), whose wake-up a latch reset here
	 * would swallow.
	 */
	pgstat_report_wait_start(PG_WAIT_EXTENSION);
	pg_usleep(1000L);
	pgstat_report_wait_end();
	CHECK_FOR_INTERRUPTS();
}

/*
 * What one compare-and-swap holds while it runs: the lease table, the
 * locks it took, and how often it polled (wait_for_announcement).
 */
typedef struct CasState
{
	HlRelation	rel;
	bool		term_locked;	/* the lease's term lock, ExclusiveLock */
	bool		history_locked; /* hl_history_lock() */
	List	   *role_locks;		/* check_names_per_role's, taken: roles */
	int			polls;
	bool		has_last;		/* the last pass found the lease at last_tid,
								 * and took the term lock */
	ItemPointerData last_tid;
} CasState;

/* One pass of the compare-and-swap's loop: done, or look again */
#define CAS_AGAIN	(-1)

/*
 * Let go of the term lock, if held, and pause once before looking again
 * (a poll of wait_for_announcement): a call does not hold the term lock
 * while it sleeps.
 */
static int
poll_again(const LeaseRequest *req, CasState *st)
{
	if (st->term_locked)
	{
		hl_term_unlock(req->name, ExclusiveLock);
		st->term_locked = false;
	}
	poll_pause();
	return CAS_AGAIN;
}

/*
 * Open the lease table and, for a call that may begin or end a term, lock
 * the history and event numbers too, so that maintenance of them is
 * contention like maintenance of the lease table, not an error halfway.
 * (A renewal writes neither.)  Returns false if one is locked and the
 * caller takes that for contention; raises 55P03 otherwise.
 */
static bool
cas_open(const LeaseRequest *req, CasState *st)
{
	if (!hl_open(HL_REL_LEASE, RowExclusiveLock, false, &st->rel))
	{
		if (req->busy_is_contention)
			return false;
		hl_table_busy_error(HL_REL_LEASE);
	}
	if (req->op != LEASE_OP_RENEW && req->op != LEASE_OP_ATTACH)
	{
		if (!hl_history_lock())
		{
			hl_close(&st->rel, false);
			if (req->busy_is_contention)
				return false;
			hl_table_busy_error(HL_REL_HISTORY);
		}
		st->history_locked = true;
	}
	return true;
}

/*
 * A term change needs the term lock.  With it held, no fence is open and
 * no other term change is in flight; the caller looks again, since the
 * lease may have changed before it got the lock.
 */
static int
take_term_lock(const LeaseRequest *req, CasState *st, const Lease *cur,
			   TimestampTz now)
{
	if (hl_term_trylock(req->name, ExclusiveLock))
	{
		st->term_locked = true;
		return CAS_AGAIN;
	}

	/*
	 * No fence holds an ended term's lock: the worker forgetting the name
	 * holds it for a moment.
	 */
	if (cur != NULL && cur->state != LEASE_STATE_HELD &&
		wait_for_announcement(req, cur, now, &st->polls))
		return poll_again(req, st);
	return LEASE_CONTENDED;
}

/*
 * The term whose row write_row() is about to write over, the row locked:
 * is a mass expiry announcing it (expiries.c)?  Its event being committed
 * is contention, as if the worker held the row; committed, the write goes
 * on and announce_end() records no "expired" of its own.
 */
static TM_Result
check_expiries(void *arg)
{
	const Lease *cur = (const Lease *) arg;
	HlExpiryState state;

	/* (asked only for a lapsed term, the one announce_end() may announce) */
	if (!expiry_decided_held && cur->state == LEASE_STATE_HELD)
		expiry_set_trusted = hl_expiries_trusted();
	state = hl_expiries_check(cur->name, cur->generation, true);

	/*
	 * Its events are committing: wait for that (it needs no row, so no
	 * lock this call holds), rather than keep the row's lock with
	 * nothing written.  Rarely here: write_row() looked before it locked.
	 */
	for (int ms = 0; state == HL_EXPIRY_ANNOUNCING && ms < ANNOUNCING_WAIT_MS; ms++)
	{
		pgstat_report_wait_start(PG_WAIT_EXTENSION);
		pg_usleep(1000L);
		pgstat_report_wait_end();
		CHECK_FOR_INTERRUPTS();
		state = hl_expiries_check(cur->name, cur->generation, false);
	}
	if (state != HL_EXPIRY_ANNOUNCING && state != HL_EXPIRY_ANNOUNCED)
		return TM_Ok;

	/*
	 * Taken for running, by a clock read before the worker's: it lapsed
	 * meanwhile.  Look again (the row is as it was), taking it for lapsed.
	 */
	if (expiry_decided_held)
	{
		expiry_lapsed_generation = cur->generation;
		return TM_Updated;
	}
	if (state == HL_EXPIRY_ANNOUNCING)
		return TM_BeingModified;
	expiry_recorded = true;
	return TM_Ok;
}

/*
 * Write "written" over "cur" (NULL: insert it), counting the name against
 * its role's hoplock.max_names_per_role where it is new to the role.
 */
static TM_Result
write_row(CasState *st, LeaseAction action, LeaseVersion *cur,
		  Lease *written)
{
	if (!cur->found)
	{
		if (check_names_per_role(&st->rel, written->owner_roleid))
			st->role_locks = lappend_oid(st->role_locks, written->owner_roleid);
		hl_store_insert(&st->rel, written);
		return TM_Ok;
	}

	/*
	 * A name another role began the last term of counts now.  (Not for a
	 * term handed to a candidate: the handoff neither creates the name nor
	 * may take, in the holder's transaction, another role's lock.)
	 */
	if (action == ACTION_NEW_TERM &&
		cur->lease.owner_roleid != written->owner_roleid &&
		check_names_per_role(&st->rel, written->owner_roleid))
		st->role_locks = lappend_oid(st->role_locks, written->owner_roleid);

	/*
	 * A term whose "expired" a mass expiry is committing right now: no
	 * lock taken, contention (an acquire polls).  check_expiries() looks
	 * again once the row is locked, for what may have begun since.
	 */
	if (hl_expiries_check(cur->lease.name, cur->lease.generation, false) ==
		HL_EXPIRY_ANNOUNCING)
	{
		if (!expiry_decided_held)
			return TM_BeingModified;
		expiry_lapsed_generation = cur->lease.generation;
		return TM_Updated;
	}
	return hl_store_update_checked(&st->rel, &cur->tid, written,
								   check_expiries, &cur->lease);
}

/*
 * New term "written", just written attached to its owner's keepalive, is
 * told the keepalive's expiry as it read it (attach_new_term).  A
 * renewal of the keepalive since -- in flight, or committed -- may have
 * moved that earlier without seeing this term, which it cannot while
 * this transaction runs.  Then the term leaves the keepalive at once
 * (minus its id: the owner's next hoplock_renew_all attaches it again)
 * and runs on the expiry it is told.  A renewal that writes the
 * keepalive after this looks finds the term joining it
 * (hl_store_keepalive_joining) and does not move the expiry earlier.
 */
static void
keep_told_expiry(CasState *st, Lease *written)
{
	HlRelation	rel;
	SnapshotData dirty;
	Keepalive	k;
	LeaseVersion own;
	bool		changed = true;

	if (hl_open(HL_REL_KEEPALIVE, AccessShareLock, false, &rel))
	{
		InitDirtySnapshot(dirty);
		hl_keepalive_fetch(&rel, written->keepalive, &dirty, &k);
		hl_close(&rel, false);
		changed = !k.found || k.version != written->keepalive_version ||
			(TransactionIdIsValid(k.inflight) &&
			 !TransactionIdIsCurrentTransactionId(k.inflight));
	}
	if (!changed)
		return;

	InitDirtySnapshot(dirty);
	hl_store_fetch(&st->rel, written->name, &dirty, &own);
	if (!own.found)
		elog(ERROR, "could not find the term just written");
	written->keepalive = -written->keepalive;
	written->keepalive_version = 0;
	if (hl_store_update(&st->rel, &own.tid, written) != TM_Ok)
		elog(ERROR, "could not take a new term off its keepalive");
	hl_version_release(&own);
}

/*
 * Running term "cur", attached to a keepalive, has just been ended by this
 * transaction ("written": its row as written).  A renewal of the
 * keepalive (hoplock_renew_all) in flight may have read the term before
 * this write, and will report it renewed: if this end committed first,
 * the term's "renewed" would follow its end.  A renewal that scans after
 * this write finds the row being changed and waits for it (renewall.c);
 * one that wrote the keepalive before this look is found here, waited
 * for (bounded, as an acquire waits for a lapsed term's row), and if it
 * still runs then, this end is undone -- the row written back as read --
 * and the call is contended.  Returns whether the end stands.
 */
static bool
end_after_renewal(CasState *st, const Lease *cur, const Lease *written)
{
	HlRelation	rel;
	SnapshotData dirty;
	Keepalive	k;
	LeaseVersion own;
	Lease		back;

	if (cur->keepalive <= 0 || cur->state != LEASE_STATE_HELD)
		return true;
	if (!hl_open(HL_REL_KEEPALIVE, AccessShareLock, false, &rel))
		return true;			/* (locked: no renewal can write it) */
	InitDirtySnapshot(dirty);
	hl_keepalive_fetch(&rel, cur->keepalive, &dirty, &k);
	hl_close(&rel, false);
	if (!k.found || !TransactionIdIsValid(k.inflight) ||
		TransactionIdIsCurrentTransactionId(k.inflight))
		return true;
	for (int polls = 0; TransactionIdIsInProgress(k.inflight); polls++)
	{
		if (polls >= ANNOUNCE_WAIT_POLLS)
		{
			/* still running: undo this end */
			InitDirtySnapshot(dirty);
			hl_store_fetch(&st->rel, written->name, &dirty, &own);
			if (!own.found)
				elog(ERROR, "could not find the term just written");
			back = *cur;
			if (hl_store_update(&st->rel, &own.tid, &back) != TM_Ok)
				elog(ERROR, "could not write back a term being renewed");
			hl_version_release(&own);
			return false;
		}
		CHECK_FOR_INTERRUPTS();
		pg_usleep(1000L);
	}
	return true;
}

/*
 * The write found the row changed since it was read (TM_BeingModified:
 * another transaction is changing it; TM_Updated, TM_Deleted: a newer
 * version committed).
 */
static int
write_conflict(const LeaseRequest *req, CasState *st, TM_Result tm,
			   const LeaseVersion *cur)
{
	if (tm == TM_BeingModified)
	{
		if (wait_for_announcement(req, &cur->lease, GetCurrentTimestamp(),
								  &st->polls))
			return poll_again(req, st);

		/*
		 * Nobody was changing the row, so another transaction holds a lock
		 * on it (FOR SHARE, FOR UPDATE: a superuser's, or the table
		 * owner's).  A renewal's NULL would tell its holder that the term
		 * is no longer its own: it is, so say the row is busy.
		 */
		if ((req->op == LEASE_OP_RENEW || req->op == LEASE_OP_ATTACH) &&
			!TransactionIdIsValid(cur->inflight))
			ereport(ERROR,
					(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
					 errmsg("could not renew lease \"%s\": its row is locked by another transaction",
							hl_lease_display_name(req->name)),
					 errdetail("A transaction holds FOR SHARE or FOR UPDATE on the lease's row."),
					 errhint("The term is still yours: renew it again.")));
		return LEASE_CONTENDED;
	}
	if (tm == TM_Updated || tm == TM_Deleted)
	{
		/* a newer version committed after we looked */
		if (IsolationUsesXactSnapshot())
			ereport(ERROR,
					(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
					 errmsg("could not serialize access due to concurrent update")));
		return CAS_AGAIN;
	}
	elog(ERROR, "unexpected result %d updating lease \"%s\"",
		 (int) tm, text_to_cstring(req->name));
	return LEASE_CONTENDED;		/* keep the compiler quiet */
}

/*
 * Does the row "cur" of the name a request is for say that the name has
 * slots, or the request that it should?  Every caller of a name in use
 * must give the same number of slots (none: 1): raises 22023 if this one
 * does not.  Returns -1 to go on; otherwise the outcome: LEASE_SLOTTED
 * for a call about the term of an owner (or all terms) of a name with
 * slots, which slots.c makes again for the slot, and for a call that
 * would begin or end a term of the name itself (acquire, write, delete),
 * which slots.c judges: a name whose slots are all free may be taken
 * without slots; for LEASE_OP_SLOTS, LEASE_REFUSED if the name records
 * that number already (nothing to write), contention if a term lapsed or
 * a hold is still to be announced.
 */
static int
check_slots(const LeaseRequest *req, const Lease *cur, TimestampTz now)
{
	int			have = hl_slot_marker(cur);
	int			want = Max(req->slots, 1);

	if (req->op == LEASE_OP_SLOTS)
	{
		if (have == want)
			return LEASE_REFUSED;
		if (have == 0 && cur != NULL && hl_lease_is_held(cur, now))
			have = 1;
		else if (have == 0 && cur != NULL &&
				 (cur->state == LEASE_STATE_HELD || hl_hold_pending(cur)))
			return LEASE_CONTENDED;
		else if (have == 0)
			return -1;
	}
	else if (have <= 1)
		return -1;
	else
	{
		switch (req->op)
		{
			case LEASE_OP_RENEW:
			case LEASE_OP_RELEASE:
			case LEASE_OP_HANDOFF:
			case LEASE_OP_PROCLAIM:
			case LEASE_OP_FORCE_RELEASE:
			case LEASE_OP_STEP_DOWN:
			case LEASE_OP_ACQUIRE:
			case LEASE_OP_WRITE:
			case LEASE_OP_DELETE:
				return LEASE_SLOTTED;
			default:
				/* the marker has no term: nothing to expire or end */
				return -1;
		}
	}
	hl_slots_mismatch(req->name, have, want);
	return -1;					/* keep the compiler quiet */
}

/*
 * One pass: read the lease, decide, take what the action needs, write.
 * Returns the outcome, or CAS_AGAIN to look again.
 */
static int
cas_attempt(const LeaseRequest *req, CasState *st, Lease *result, bool *found)
{
	LeaseVersion cur;
	Lease	   *curp;
	LeaseAction action;
	TimestampTz now;
	TM_Result	tm;
	bool		busy;
	HlCandidatePick pick = {0};

	expiry_recorded = false;
	expiry_set_trusted = false; /* (check_expiries reads it) */

	/*
	 * The version stays pinned until we are done with it.  Just after the
	 * term lock was taken, the version the last pass found is most likely
	 * still the newest: look there first.
	 */
	fetch_for_update(&st->rel, req->name,
					 st->has_last && st->term_locked ? &st->last_tid : NULL,
					 &cur);
	st->has_last = false;
	curp = cur.found ? &cur.lease : NULL;
	*found = cur.found;
	if (cur.found)
		*result = cur.lease;

	/* the clock at the moment of the decision, after the fetch */
	now = GetCurrentTimestamp();

	/* a term a mass expiry announces lapsed, whatever this clock says */
	if (cur.found && cur.lease.generation == expiry_lapsed_generation &&
		now < cur.lease.expires_at)
		now = cur.lease.expires_at;

	/* a look at a slot the owner's term may be in (slots.c): it, or none */
	if (req->owners_term_only &&
		(TransactionIdIsValid(cur.inflight) || curp == NULL ||
		 !hl_text_equal(curp->owner, req->owner) ||
		 (req->generation != 0 && curp->generation != req->generation) ||
		 !hl_lease_is_held(curp, now)))
	{
		hl_version_release(&cur);
		return LEASE_REFUSED;
	}
	if (TransactionIdIsValid(cur.inflight))
	{
		if (wait_for_announcement(req, curp, now, &st->polls))
		{
			hl_version_release(&cur);
			return poll_again(req, st);
		}
		action = ACTION_HELD_ELSEWHERE;
	}
	else
	{
		int			slotted = check_slots(req, curp, now);

		if (slotted >= 0)
		{
			hl_version_release(&cur);
			return slotted;
		}
		action = decide(req, curp, now);
	}

	/*
	 * A free lease goes to its first candidate, if it has any.  (Not a
	 * name in the hold of a term released early: only the term's owner
	 * gets this far, and the hold keeps every candidate out.)
	 */
	if (action == ACTION_NEW_TERM && req->op == LEASE_OP_ACQUIRE &&
		!hl_lease_in_hold(curp, now) &&
		!hl_candidate_may_take(req->name))
		action = ACTION_HELD_ELSEWHERE;

	if (action == ACTION_NONE || action == ACTION_HELD_ELSEWHERE)
	{
		hl_version_release(&cur);
		return (action == ACTION_NONE) ? LEASE_REFUSED : LEASE_CONTENDED;
	}

	/* the caller's rights first: no lock is taken on its behalf before */
	check_action_privileges(req, action, curp, now);

	if ((action == ACTION_NEW_TERM || action == ACTION_END_TERM ||
		 action == ACTION_HANDOFF || action == ACTION_MARK_SLOTS) &&
		!st->term_locked)
	{
		hl_version_release(&cur);
		st->has_last = cur.found;
		if (cur.found)
			st->last_tid = cur.tid;
		return take_term_lock(req, st, curp, now);
	}

	/* the candidate the term goes to, now that no term change can race */
	if (action == ACTION_HANDOFF &&
		!hl_candidate_pick(req->name, req->to_owner, curp->owner_roleid, &pick))
	{
		hl_version_release(&cur);
		return LEASE_REFUSED;
	}

	/* the candidate a preempting step-down is for, if it is asked yet */
	if (action == ACTION_STEP_DOWN && req->preempt &&
		!preemption_due(req, curp, &pick))
	{
		hl_version_release(&cur);
		return LEASE_REFUSED;
	}

	if (!build_new_row(req, action, curp, &pick, now, result, &busy))
	{
		hl_version_release(&cur);
		if (busy && !req->busy_is_contention)
			hl_table_busy_error(HL_REL_FLOOR);
		return LEASE_CONTENDED;
	}

	/* a new term of an owner whose keepalive runs runs on it */
	if ((action == ACTION_NEW_TERM || action == ACTION_HANDOFF) &&
		!attach_new_term(result))
	{
		hl_version_release(&cur);
		return LEASE_CONTENDED;
	}

	expiry_decided_held = curp != NULL && curp->state == LEASE_STATE_HELD &&
		hl_lease_is_held(curp, now);
	tm = write_row(st, action, &cur, result);
	hl_version_release(&cur);
	if (tm == TM_Ok)
	{
		/* an end of a term its keepalive's renewal may have read */
		if (action == ACTION_END_TERM &&
			!end_after_renewal(st, curp, result))
			return LEASE_CONTENDED;
		if (result->keepalive > 0 &&
			(action == ACTION_NEW_TERM || action == ACTION_HANDOFF))
			keep_told_expiry(st, result);
		after_write(req, action, curp, &pick, result, now);
		commit_durably(req);
		return LEASE_DONE;
	}
	*result = cur.lease;
	return write_conflict(req, st, tm, &cur);
}

/*
 * After the last pass.  A term change wakes the lease's waiters when its
 * transaction ends.  A call that took the term lock but changed nothing
 * hands it back (the waiters it kept out are woken by whoever changed the
 * lease instead), and gives back every other lock it took, so that it
 * holds up nothing for the rest of its transaction (nor while
 * hoplock_wait sleeps): the role's, the event sequence's, the lease
 * table's.
 */
static void
cas_close(const LeaseRequest *req, CasState *st, LeaseOutcome outcome)
{
	if (st->term_locked)
	{
		if (outcome == LEASE_DONE)
			hl_wake_waiters_at_end(req->name);
		else
			hl_term_unlock(req->name, ExclusiveLock);
	}
	if (outcome != LEASE_DONE)
	{
		ListCell   *lc;

		foreach(lc, st->role_locks)
			hl_term_unlock(role_lock_key(lfirst_oid(lc)), ExclusiveLock);
	}
	if (st->history_locked)
		hl_history_unlock(outcome == LEASE_DONE);
	hl_close(&st->rel, outcome == LEASE_DONE);
	if (outcome == LEASE_CONTENDED && !req->busy_is_contention)
		hl_count(HL_COUNT_CONTENDED);
}

/*
 * The compare-and-swap.  On LEASE_DONE, *result is the lease as written.
 * Otherwise *found says whether the lease has a row, and *result is that
 * row as last seen (the holder's term, say), for callers that wait.
 *
 * If the lease table is locked (maintenance), raises 55P03, or with
 * req->busy_is_contention reports contention.  Locks are kept until the
 * transaction ends only if the lease was written.
 */
LeaseOutcome
hl_lease_cas(const LeaseRequest *req, Lease *result, bool *found)
{
	CasState	st = {0};
	int			step;

	*found = false;
	expiry_lapsed_generation = 0;
	hl_prevent_write(req->fn);
	if (!cas_open(req, &st))
		return LEASE_CONTENDED;
	do
	{
		CHECK_FOR_INTERRUPTS();
		step = cas_attempt(req, &st, result, found);
	} while (step == CAS_AGAIN);
	cas_close(req, &st, (LeaseOutcome) step);
	return (LeaseOutcome) step;
}

/*
 * The pid of another session holding lease "name" up, and how: holding its
 * term lock (an open fence, or a term change in flight), or changing its
 * row in a transaction that has not ended (a renewal), or holding a lock on
 * the row that a change waits for (SELECT ... FOR SHARE, say; reported as
 * a change).  0 if there is none, or if the table is locked and cannot be
 * looked at now.
 */
int
hl_lease_blocker(text *name, HlBlockerKind *kind)
{
	HlRelation	rel;
	LeaseVersion version;
	SnapshotData dirty;
	int			fence_pid;
	int			change_pid;
	int			pid = 0;
	TransactionId xid;

	*kind = BLOCKER_NONE;
	hl_term_lock_holders(name, &fence_pid, &change_pid);
	if (change_pid != 0)
	{
		*kind = BLOCKER_TERM_CHANGE;
		return change_pid;
	}
	if (fence_pid != 0)
	{
		*kind = BLOCKER_FENCE;
		return fence_pid;
	}

	if (!hl_open(HL_REL_LEASE, AccessShareLock, false, &rel))
		return 0;
	InitDirtySnapshot(dirty);
	hl_store_fetch(&rel, name, &dirty, &version);

	/*
	 * The row's inserter or updater, or else a transaction holding a lock
	 * on it that a change must wait for (FOR SHARE, FOR UPDATE...; not FOR
	 * KEY SHARE, which no change of hoplock's waits for)
	 */
	xid = version.inflight;
	if (version.found && !TransactionIdIsValid(xid))
		xid = hl_store_locker(&version);
	hl_version_release(&version);
	hl_close(&rel, false);

	/* it may be a subtransaction */
	if (version.found && TransactionIdIsValid(xid))
	{
		pid = BackendXidGetPid(SubTransGetTopmostTransaction(xid));
		if (pid != 0)
			*kind = BLOCKER_ROW_CHANGE;
	}
	return pid;
}

/*
 * Forget lease "name": remove its row, if its last term ended (released,
 * or lapsed and announced) before "ended_before" (0: any time), and no
 * hold of it is left to announce (min_hold), first
 * raising the generation floor's "forgotten" to its generation, so that
 * the name, if it comes back, starts above every generation it had.  A
 * caller that raised the floor for a whole batch passes the generation it
 * raised it to as "floor_raised" (0: raise it here), and a row of a later
 * generation is left: a term that began and ended since the caller looked
 * (which, after a clock step back, can look as old as the one it read).
 * A name with slots is forgotten with every slot's row, once no slot is
 * in use and each slot's last term ended before "ended_before"
 * (slotforget.c).  Returns false, changing nothing, if the row is not
 * there, its term has not ended, or anything stands in the way right now
 * (the lease being changed or fenced, the floor being written, the table
 * locked).
 */
bool
hl_forget(text *name, TimestampTz ended_before, int64 floor_raised)
{
	HlRelation	rel;
	LeaseVersion cur;
	SnapshotData dirty;
	bool		locked = false;
	bool		slotted = false;
	bool		done = false;

	hl_prevent_write("hoplock_forget()");
	if (!hl_open(HL_REL_LEASE, RowExclusiveLock, false, &rel))
		return false;
	for (;;)
	{
		InitDirtySnapshot(dirty);
		hl_store_fetch(&rel, name, &dirty, &cur);
		hl_version_release(&cur);
		if (!cur.found || TransactionIdIsValid(cur.inflight) ||
			cur.lease.state == LEASE_STATE_HELD ||
			hl_hold_pending(&cur.lease) ||
			(ended_before != 0 && cur.lease.expires_at >= ended_before) ||
			(floor_raised != 0 && cur.lease.generation > floor_raised))
			break;
		if (!locked)
		{
			int			have;
			bool		removed;

			/*
			 * A name with slots in use, as committed, is left without
			 * taking its lock, which would keep the acquires of its slots
			 * out for a moment (slotforget.c).
			 */
			if (hl_slot_marker(&cur.lease) > 1 &&
				hl_slots_forget(name, false, ended_before, &have,
								&removed) != SLOTS_FREE)
				break;

			/*
			 * no term begins or is fenced meanwhile (nor, of a name with
			 * slots, a slot's term)
			 */
			if (!hl_term_trylock(name, ExclusiveLock))
				break;
			locked = true;
			continue;			/* look again, with the lock */
		}
		/* a name with slots goes with every slot's row, if all are free */
		slotted = hl_slot_marker(&cur.lease) > 1;
		if (slotted)
		{
			done = (hl_slots_forget_rows(&rel, name, &cur, ended_before,
										 floor_raised) == SLOTS_FREE);
			break;
		}
		if (floor_raised == 0 &&
			!hl_floor_raise_forgotten(cur.lease.generation))
			break;
		done = (hl_row_delete(&rel, &cur.tid) == TM_Ok);
		break;
	}
	if (done)
		CommandCounterIncrement();

	/*
	 * The lock can go now, done or not: the uncommitted delete makes every
	 * other caller contend until it commits, and no fence can hold a
	 * released name.  (The worker forgets a thousand names a round.)  Not
	 * a name with slots that was forgotten: an acquire of a slot with no
	 * row yet would find nothing in flight, so it stays until this
	 * transaction ends (slotforget.c).  Those who wait for the name try
	 * again when this transaction ends, as after a release: a waiter may
	 * have found the row being removed.
	 */
	if (locked)
	{
		if (!done || !slotted)
			hl_term_unlock(name, ExclusiveLock);
		hl_wake_waiters_at_end(name);
	}
	hl_close(&rel, done);
	return done;
}
