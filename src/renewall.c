/*-------------------------------------------------------------------------
 *
 * renewall.c
 *		hoplock_renew_all(owner, ttl): one keepalive for all of an owner's
 *		terms.  The running terms of "owner" that the calling role began
 *		take their expiry from the owner's keepalive (keepalive.c); this
 *		call renews the keepalive with one write, attaches the owner's
 *		running terms not attached yet (a write each, once), and returns
 *		every term it renewed: (name, slot, generation, expires_at); slot
 *		is NULL for a name without slots.
 *
 *		The order of its steps is what keeps a lapsed keepalive lapsed.
 *		The keepalive's row is written first, without waiting, and the
 *		clock is read after that write is in place: any transaction that
 *		reads the keepalive from then on finds it being changed (a term
 *		attached to it is "in flight", contention, to the lease core), and
 *		any that read it before did so at an earlier instant.  If the clock
 *		then says it had lapsed already, its old expiry is written back and
 *		a new keepalive is begun instead: a term lapsed with it stays
 *		lapsed, whoever has seen that.
 *
 *		The terms returned are read through the lease table's partial index
 *		on its keepalive column, through the newest snapshot (the
 *		transaction's under REPEATABLE READ and SERIALIZABLE), and never
 *		written: in the steady state the call writes one row.  When the
 *		owner has no running keepalive, the call begins one and scans the
 *		whole lease table for the owner's running terms, attaching each;
 *		it scans again at later calls while the keepalive says a term may
 *		have been missed (attach.c: the horizon).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "args.h"
#include "branch.h"
#include "compat.h"
#include "events.h"
#include "hoplock.h"
#include "keepalive.h"
#include "lease.h"
#include "settings.h"
#include "shmem.h"
#include "slotkey.h"
#include "storage.h"
#include "termlock.h"

#include "access/transam.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "storage/procarray.h"
#include "utils/builtins.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(hoplock_renew_all);

/* What the owner scan collects */
typedef struct Collected
{
	const NameData *role_name;	/* the caller's role: only its terms */
	Lease	   *leases;
	int			n;
	int			size;
	int			foreign;		/* attached terms of another role name */
	MemoryContext cxt;
} Collected;

/* A keepalive the call found its terms attached to, and what became of it */
typedef struct Renewed
{
	int64		id;
	bool		running;		/* renewed by this call */
	bool		foreign;		/* carries terms of another role name */
	TimestampTz expires_at;
	int64		version;
	Keepalive	k;				/* as written (running) or read */
	Keepalive	old;			/* as read, before this call renewed it */
	Collected	mine;			/* its terms of the caller's role name */
} Renewed;

/* The owner's keepalives, as read (collect_keepalive) */
typedef struct Keepalives
{
	Renewed    *list;
	int			n;
	int			size;
} Keepalives;

static bool
collect(const Lease *lease, void *arg)
{
	Collected  *c = (Collected *) arg;
	MemoryContext old;

	if (lease->state != LEASE_STATE_HELD)
		return true;
	if (namestrcmp((Name) c->role_name, NameStr(lease->owner_role)) != 0)
	{
		/* (one attached: the keepalive is not the caller's alone) */
		if (lease->keepalive > 0)
			c->foreign++;
		return true;
	}
	old = MemoryContextSwitchTo(c->cxt);
	if (c->n == c->size)
	{
		c->size = c->size == 0 ? 16 : c->size * 2;
		c->leases = c->leases == NULL ?
			palloc(c->size * sizeof(Lease)) :
			repalloc_huge(c->leases, c->size * sizeof(Lease));
	}
	c->leases[c->n] = *lease;
	c->leases[c->n].name = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(lease->name));
	c->leases[c->n].owner = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(lease->owner));
	if (lease->value != NULL)
		c->leases[c->n].value = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(lease->value));
	c->leases[c->n].step_down_to = NULL;
	c->n++;
	MemoryContextSwitchTo(old);
	return true;
}

static TimestampTz
add_ttl(TimestampTz t, int64 ttl)
{
	TimestampTz result;

	if (pg_add_s64_overflow(t, ttl, &result) || !IS_VALID_TIMESTAMP(result))
		ereport(ERROR,
				(errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				 errmsg("lease expiry is out of range")));
	return result;
}

static int64
mint(int64 after, TimestampTz now)
{
	int64		value;
	bool		busy;

	if (!hl_mint(after, now, &value, &busy))
		hl_table_busy_error(HL_REL_FLOOR);
	return value;
}

static void
keepalive_busy(text *owner) pg_attribute_noreturn();

static void
keepalive_busy(text *owner)
{
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("could not renew the terms of owner \"%s\": another transaction is renewing them",
					text_to_cstring(owner)),
			 errhint("The terms are still yours: renew them again.")));
}

/* Tell the worker, at commit, that keepalive "id" is due at "when". */
static void
post_deadline(int64 id, TimestampTz when)
{
	char		key[HL_KEEPALIVE_KEY_LEN];
	int			keylen = hl_keepalive_key(id, key);

	hl_post_deadline_at_commit(cstring_to_text_with_len(key, keylen), when);
}

/*
 * Renew keepalive "id" of "owner" to clock + ttl, if it is still running.
 * Returns whether it was.
 */
static bool
renew_keepalive(HlRelation *rel, HlRelation *lease_rel, int64 id,
				text *owner, int64 ttl, Renewed *r, const Keepalive *pre)
{
	for (;;)
	{
		SnapshotData dirty;
		Keepalive	k;
		Keepalive	old;
		TimestampTz now;
		TM_Result	tm;

		/* (as the owner scan read it through a dirty snapshot, at first) */
		if (pre != NULL)
		{
			k = *pre;
			k.owner = owner;
			pre = NULL;
		}
		else
		{
			InitDirtySnapshot(dirty);
			hl_keepalive_fetch(rel, id, &dirty, &k);
		}
		now = GetCurrentTimestamp();
		if (!k.found || now >= k.expires_at ||
			k.owner_roleid != GetUserId() || !hl_text_equal(k.owner, owner))
			return false;
		if (TransactionIdIsValid(k.inflight))
			keepalive_busy(owner);

		old = k;
		k.renewed_at = Max(now, k.renewed_at);
		k.expires_at = add_ttl(k.renewed_at, ttl);
		k.version = mint(k.version, now);
		tm = hl_keepalive_update(rel, &k);
		if (tm == TM_BeingModified)
		{
			/* the worker takes only a lapsed one */
			if (GetCurrentTimestamp() >= old.expires_at)
				return false;
			keepalive_busy(owner);
		}
		if (tm == TM_Updated || tm == TM_Deleted)
		{
			if (IsolationUsesXactSnapshot())
				ereport(ERROR,
						(errcode(ERRCODE_T_R_SERIALIZATION_FAILURE),
						 errmsg("could not serialize access due to concurrent update")));
			continue;
		}
		if (tm != TM_Ok)
			elog(ERROR, "unexpected result %d updating a keepalive", (int) tm);

		/* with the write in place: had it lapsed already? */
		now = GetCurrentTimestamp();
		if (now >= old.expires_at)
		{
			/* then it stays lapsed: its old expiry back, a new version */
			k.renewed_at = old.renewed_at;
			k.expires_at = old.expires_at;
			k.version = mint(k.version, now);
			if (hl_keepalive_update(rel, &k) != TM_Ok)
				elog(ERROR, "could not write back a lapsed keepalive");
			return false;
		}
		/*
		 * Not earlier while a new term is joining it: that term's acquire
		 * returned the expiry it had (lease.c, keep_told_expiry).
		 */
		if (k.expires_at < old.expires_at &&
			hl_store_keepalive_joining(lease_rel, k.id))
		{
			k.renewed_at = old.renewed_at;
			k.expires_at = old.expires_at;
			k.version = mint(k.version, now);
			if (hl_keepalive_update(rel, &k) != TM_Ok)
				elog(ERROR, "could not write back a keepalive");
		}
		/* an earlier expiry the worker is told of (a later it finds) */
		if (k.expires_at < old.expires_at)
			post_deadline(k.id, k.expires_at);
		r->expires_at = k.expires_at;
		r->version = k.version;
		r->k = k;
		r->old = old;
		return true;
	}
}

/*
 * Write keepalive "r", renewed by this call, back as it was (a new
 * version): it is not the caller's (see hoplock_renew_all).
 */
static void
unrenew_keepalive(HlRelation *rel, Renewed *r)
{
	Keepalive	k = r->k;

	k.renewed_at = r->old.renewed_at;
	k.expires_at = r->old.expires_at;
	k.version = mint(k.version, GetCurrentTimestamp());
	if (hl_keepalive_update(rel, &k) != TM_Ok)
		elog(ERROR, "could not write back a keepalive");
	r->k = k;
	r->running = false;
	r->foreign = true;
}

/* Begin a new keepalive of "owner", running until clock + ttl. */
static void
begin_keepalive(HlRelation *rel, text *owner, int64 ttl, Renewed *r)
{
	Keepalive	k = {0};
	TimestampTz now;

	hl_keepalives_check_role(rel, GetUserId());
	now = GetCurrentTimestamp();
	k.id = hl_keepalive_next_id();
	k.owner_roleid = GetUserId();
	k.owner = owner;
	k.renewed_at = now;
	k.expires_at = add_ttl(now, ttl);
	k.version = mint(0, now);
	hl_keepalive_insert(rel, &k);
	/* from now on a new term of the owner looks for it */
	hl_keepalives_begun();

	/* the worker watches it from its commit on */
	post_deadline(k.id, k.expires_at);
	r->id = k.id;
	r->running = true;
	r->expires_at = k.expires_at;
	r->version = k.version;
	r->k = k;
}

/*
 * Keepalive "r", written by this call, is about to carry terms "leases"
 * (n of them; with "unattached", only those on no keepalive): if one
 * began after the keepalive's renewed_at (a term begun ahead of the clock,
 * after it stepped back: the branch floor), move it to that beginning, as
 * hoplock_renew does for one term, so that no term's expiry comes before
 * its beginning.  One more write, only then; the expiry only moves later.
 */
static void
cover_starts(HlRelation *rel, Renewed *r, const Lease *leases, int n,
			 int64 ttl, bool unattached)
{
	TimestampTz latest = r->k.renewed_at;
	Keepalive	k;

	for (int i = 0; i < n; i++)
		if (leases[i].state == LEASE_STATE_HELD &&
			!(unattached && leases[i].keepalive > 0))
			latest = Max(latest, leases[i].acquired_at);
	if (latest <= r->k.renewed_at)
		return;
	k = r->k;
	k.renewed_at = latest;
	k.expires_at = Max(k.expires_at, add_ttl(latest, ttl));
	if (hl_keepalive_update(rel, &k) != TM_Ok)
		elog(ERROR, "could not move a keepalive past its terms' beginning");
	r->k = k;
	r->expires_at = k.expires_at;
}

/*
 * Attach running term "lease" to keepalive "r": LEASE_DONE, LEASE_REFUSED
 * (not running, or attached already), LEASE_CONTENDED (being changed).
 */
static LeaseOutcome
attach(const Lease *lease, const Renewed *r, int64 ttl, int64 from)
{
	LeaseRequest req = {0};
	Lease		result;
	bool		found;

	req.op = LEASE_OP_ATTACH;
	req.fn = "hoplock_renew_all()";
	req.name = lease->name;
	req.owner = lease->owner;
	req.generation = lease->generation;
	req.ttl = ttl;
	req.keepalive = r->id;
	req.keepalive_expires = r->expires_at;
	req.keepalive_version = r->version;
	req.keepalive_from = from;
	return hl_lease_cas(&req, &result, &found);
}

/* The columns of hoplock_renewed, which put_row fills */
static const Oid renewed_types[] = {TEXTOID, INT4OID, INT8OID, TIMESTAMPTZOID};

static void
put_row(ReturnSetInfo *rsinfo, Lease *lease, const Renewed *r)
{
	Datum		values[4];
	bool		nulls[4] = {0};
	int			slot;

	lease->expires_at = r->expires_at;
	lease->keepalive = r->id;
	lease->keepalive_version = r->version;
	values[0] = PointerGetDatum(hl_slot_base(lease->name, &slot));
	/* (a slot only for a name with slots, as in the views) */
	values[1] = Int32GetDatum(slot);
	nulls[1] = slot == 0;
	values[2] = Int64GetDatum(lease->generation);
	values[3] = TimestampTzGetDatum(lease->expires_at);
	tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	if (hl_notify_renewals)
		hl_event("renewed", lease);
}

static void
collect_keepalive(const Keepalive *k, void *arg)
{
	Keepalives *ks = (Keepalives *) arg;
	Renewed    *r;

	/* both versions of one being changed: it is in flight */
	for (int i = 0; i < ks->n; i++)
		if (ks->list[i].id == k->id)
		{
			if (!TransactionIdIsValid(ks->list[i].k.inflight))
				ks->list[i].k.inflight = k->inflight;
			return;
		}
	if (ks->n == ks->size)
	{
		ks->size = ks->size == 0 ? 4 : ks->size * 2;
		ks->list = ks->list == NULL ? palloc(ks->size * sizeof(Renewed)) :
			repalloc(ks->list, ks->size * sizeof(Renewed));
	}
	r = &ks->list[ks->n++];
	memset(r, 0, sizeof(Renewed));
	r->id = k->id;
	r->k = *k;
	r->k.owner = NULL;
}

/* horizon_open's answer when it did not count them all */
#define HORIZON_MANY	(-1)

/*
 * The transactions that might begin a term the owner scan does not see,
 * taken before its snapshot: those holding a term lock now (a term
 * change holds its name's from before it reads the keepalive flag to its
 * end; attach.c).  One that takes a term lock later reads the flag after
 * the keepalive was begun.  known: false when this cannot tell (a
 * prepared transaction holds a term lock): then every transaction counts.
 */
typedef struct Suspects
{
	TransactionId *xids;
	int			n;
	bool		known;
} Suspects;

/*
 * The id "horizon" (a full transaction id) as a transaction id, or false
 * if no transaction that old can still run.
 */
static bool
horizon_xid(int64 horizon, TransactionId *h)
{
	FullTransactionId next = ReadNextFullTransactionId();

	if (U64FromFullTransactionId(next) - (uint64) horizon >= ((uint64) 1 << 31))
		return false;
	*h = XidFromFullTransactionId(FullTransactionIdFromU64((uint64) horizon));
	return true;
}

/*
 * How many transactions other than this one, with an id below "horizon",
 * "snapshot" cannot see the end of: those it lists as running, and every
 * id from its xmax on (a snapshot may be reused while no transaction ends:
 * then its xmax is older than the transactions that began since).  One
 * that old may have begun a term without seeing a keepalive being begun
 * (attach.c).  Returns how many there are (0: none), or HORIZON_MANY.  No
 * id can join them later, so the number only falls, and falls when one of
 * them ends.
 */
static int
horizon_open(Snapshot snapshot, int64 horizon)
{
	TransactionId h;
	TransactionId xid;
	int			n = 0;

	if (!horizon_xid(horizon, &h))
		return 0;
	for (uint32 i = 0; i < snapshot->xcnt; i++)
		if (TransactionIdPrecedes(snapshot->xip[i], h) &&
			!TransactionIdIsCurrentTransactionId(snapshot->xip[i]))
			n++;
	xid = snapshot->xmax;
	for (int i = 0; TransactionIdPrecedes(xid, h); i++)
	{
		if (i >= 64)
			return HORIZON_MANY;	/* (many: say so without looking) */
		if (!TransactionIdIsCurrentTransactionId(xid))
			n++;
		TransactionIdAdvance(xid);
	}
	return n;
}

/*
 * Of those, can any have begun a term?  Only those among "suspects" can,
 * unless that is not known.  A transaction with no term lock (a long
 * report, another role's idle transaction) does not keep the owner's calls
 * scanning the lease table.
 */
static bool
suspects_open(Snapshot snapshot, int64 horizon, const Suspects *suspects)
{
	TransactionId h;

	if (!suspects->known)
		return true;
	if (!horizon_xid(horizon, &h))
		return false;
	for (int i = 0; i < suspects->n; i++)
		if (TransactionIdPrecedes(suspects->xids[i], h) &&
			!TransactionIdIsCurrentTransactionId(suspects->xids[i]) &&
			XidInMVCCSnapshot(suspects->xids[i], snapshot))
			return true;
	return false;
}

/*
 * What this session's last scan for a keepalive's unattached terms left
 * open: the transactions below the keepalive's horizon that its snapshot
 * could not see the end of (horizon_open).  A term it missed belongs to
 * one of them and stays invisible while they all run: until one ends,
 * another scan would find nothing more (so a transaction left open for
 * hours costs one scan a session, not one a call).
 */
static int64 scanned_keepalive = 0;
static int64 scanned_version = 0;	/* as that call wrote it */
static int64 scanned_horizon = 0;
static int	scanned_open = 0;

/*
 * Would a scan for keepalive "r", renewed by this call, with "horizon"
 * find nothing new?  Only if the last scan was this session's, and
 * committed: the keepalive was still the version that call wrote, which
 * is not so if it rolled back (the terms it attached then were not) or
 * another call renewed it since.
 */
static bool
horizon_unchanged(const Renewed *r, int64 horizon)
{
	Snapshot	snapshot;
	int			open;

	if (scanned_keepalive != r->id || scanned_version != r->old.version ||
		scanned_horizon != horizon ||
		scanned_open <= 0 || IsolationUsesXactSnapshot())
		return false;
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	open = horizon_open(snapshot, horizon);
	UnregisterSnapshot(snapshot);
	if (open != scanned_open)
		return false;
	/* (what this call writes, if it commits, is as good as scanned) */
	scanned_version = r->version;
	return true;
}

/*
 * Look for the running terms of the owner that are not attached (one scan
 * of the lease table), attach each to "target" and return it; then record
 * on the keepalive whether every one was found.  "horizon": see attach.c.
 */
static int64
attach_unattached(ReturnSetInfo *rsinfo, HlRelation *lease_rel,
				  HlRelation *ka_rel, const NameData *role_name, text *owner,
				  Renewed *target, int64 horizon, int64 ttl)
{
	Collected	c = {0};
	Snapshot	snapshot;
	bool		complete;
	int64		nrows = 0;
	int			open;
	Keepalive	k;
	Suspects	suspects = {0};

	c.role_name = role_name;
	c.cxt = CurrentMemoryContext;
	/* (before the snapshot: see Suspects) */
	if (horizon != 0)
		suspects.known = hl_term_lock_xids(&suspects.xids, &suspects.n);
	if (IsolationUsesXactSnapshot())
		snapshot = RegisterSnapshot(GetTransactionSnapshot());
	else
		snapshot = RegisterSnapshot(GetLatestSnapshot());
	(void) hl_store_scan_owner(lease_rel, GetUserId(), owner, snapshot,
							   collect, &c);
	open = horizon != 0 ? horizon_open(snapshot, horizon) : 0;
	if (open != 0 && !suspects_open(snapshot, horizon, &suspects))
		open = 0;
	if (open == 0)
		horizon = 0;
	UnregisterSnapshot(snapshot);

	/*
	 * Under REPEATABLE READ and SERIALIZABLE the snapshot may be older than
	 * the begin: the next calls look again, as for a term being changed.
	 */
	complete = !IsolationUsesXactSnapshot();
	cover_starts(ka_rel, target, c.leases, c.n, ttl, true);
	for (int i = 0; i < c.n; i++)
	{
		Lease	   *lease = &c.leases[i];

		/* (attached to a keepalive, running or lapsed: not this one's) */
		if (lease->keepalive > 0 ||
			GetCurrentTimestamp() >= lease->expires_at)
			continue;
		switch (attach(lease, target, ttl, 0))
		{
			case LEASE_DONE:
				put_row(rsinfo, lease, target);
				nrows++;
				break;
			case LEASE_CONTENDED:
				complete = false;	/* (being changed: look again) */
				break;
			default:
				break;
		}
	}

	/*
	 * A term being changed: look again until the transactions running now
	 * have ended.
	 */
	if (!complete)
		horizon = Max(horizon, (int64) U64FromFullTransactionId(ReadNextFullTransactionId()));
	k = target->k;
	k.attach_horizon = horizon;

	/* what the scan could not see yet, for the next call (above) */
	scanned_keepalive = target->id;
	scanned_version = target->version;
	scanned_horizon = horizon;
	scanned_open = complete ? open : 0;

	if (k.attach_horizon != target->k.attach_horizon)
	{
		if (hl_keepalive_update(ka_rel, &k) != TM_Ok)
			elog(ERROR, "could not record the attached terms of a keepalive");
		target->k = k;
	}
	return nrows;
}

/*
 * How long a renewal waits for other transactions changing its terms, in
 * all (for all of them, not each): this many polls of 1 ms (counted, not
 * timed), as an acquire waits for a lapsed term's row (lease.c).
 */
#define CHANGING_WAIT_POLLS	50

/*
 * Term "lease", attached to keepalive "r" as the call's snapshot read it,
 * was being changed by another transaction (a release, the worker's end
 * of a term whose session is gone, a takeover): is it still a running
 * term of that keepalive?  Waits for that transaction, bounded, and reads
 * the term again (*polls: the call's waits so far).  Not when it still
 * runs, nor under REPEATABLE READ and SERIALIZABLE (its end would stay
 * invisible): the term is left out of the result, as contended, with no
 * "renewed" event.  An end in flight
 * that then commits must not be followed by a renewal of the term.
 */
static bool
still_attached(HlRelation *lease_rel, const Lease *lease, const Renewed *r,
			   int *polls)
{
	LeaseVersion v;
	Snapshot	snapshot;
	bool		ok;

	if (IsolationUsesXactSnapshot())
		return false;
	for (; TransactionIdIsInProgress(lease->changing); (*polls)++)
	{
		if (*polls >= CHANGING_WAIT_POLLS)
			return false;
		CHECK_FOR_INTERRUPTS();
		pg_usleep(1000L);
	}
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	hl_store_fetch(lease_rel, lease->name, snapshot, &v);
	UnregisterSnapshot(snapshot);
	ok = v.found && v.lease.state == LEASE_STATE_HELD &&
		v.lease.generation == lease->generation &&
		v.lease.keepalive == r->id &&
		hl_text_equal(v.lease.owner, lease->owner);
	hl_version_release(&v);
	return ok;
}

/* What collect_attached gathers: the running terms of one keepalive */
static bool
collect_attached(const Lease *lease, void *arg)
{
	return collect(lease, arg);
}

/* hoplock_renew_all(owner, ttl) */
Datum
hoplock_renew_all(PG_FUNCTION_ARGS)
{
	text	   *owner = hl_arg_name(fcinfo, 0, "owner");
	int64		ttl = hl_arg_ttl(fcinfo, 1);
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HlRelation	lease_rel;
	HlRelation	ka_rel;
	NameData	role_name;
	Snapshot	snapshot;
	Keepalives	ks = {0};
	SnapshotData dirty;
	Renewed    *target = NULL;
	Renewed		fresh = {0};
	int64		horizon = 0;
	int64		nrows = 0;
	int			polls = 0;		/* (still_attached) */

	hl_prevent_write("hoplock_renew_all()");
	hl_materialize_srf_as(fcinfo, "hoplock_renewed", renewed_types,
						  lengthof(renewed_types), lengthof(renewed_types));
	namestrcpy(&role_name, GetUserNameFromId(GetUserId(), false));

	if (!hl_open(HL_REL_LEASE, RowExclusiveLock, false, &lease_rel))
		hl_table_busy_error(HL_REL_LEASE);
	if (!hl_open(HL_REL_KEEPALIVE, RowExclusiveLock, false, &ka_rel))
		hl_table_busy_error(HL_REL_KEEPALIVE);

	/*
	 * The owner's keepalives, as a dirty snapshot sees them (one being
	 * changed is in flight): renew each that still runs (one, as a rule).
	 */
	InitDirtySnapshot(dirty);
	if (!hl_keepalive_scan_owner(&ka_rel, GetUserId(), owner, &dirty,
								 collect_keepalive, &ks))
		hl_table_busy_error(HL_REL_KEEPALIVE);
	for (int i = 0; i < ks.n; i++)
	{
		Renewed    *r = &ks.list[i];

		if (GetCurrentTimestamp() >= r->k.expires_at)
			continue;			/* lapsed: final */
		r->running = renew_keepalive(&ka_rel, &lease_rel, r->id, owner, ttl,
									 r, &r->k);
		if (r->running && (target == NULL || r->id > target->id))
			target = r;
	}

	/* the terms attached to each it renewed, through the partial index */
	if (IsolationUsesXactSnapshot())
		snapshot = RegisterSnapshot(GetTransactionSnapshot());
	else
		snapshot = RegisterSnapshot(GetLatestSnapshot());
	for (int i = 0; i < ks.n; i++)
	{
		Renewed    *r = &ks.list[i];
		Collected  *c = &r->mine;

		if (!r->running)
			continue;
		c->role_name = &role_name;
		c->cxt = CurrentMemoryContext;
		if (hl_store_scan_keepalive(&lease_rel, r->id, true, snapshot,
									collect_attached, c) < 0)
			hl_table_busy_error(HL_REL_LEASE);

		/*
		 * A keepalive knows its role by OID, a term by OID and name: one
		 * that carries terms of another role name (the role was renamed,
		 * or the OID is another role's since a restore elsewhere) is not
		 * the caller's, which may not renew those terms.  It goes back as
		 * it was, to lapse with them; the caller's own terms on it move
		 * to a keepalive of the caller's (below).
		 */
		if (c->foreign > 0)
		{
			unrenew_keepalive(&ka_rel, r);
			continue;
		}
		cover_starts(&ka_rel, r, c->leases, c->n, ttl, false);
		for (int j = 0; j < c->n; j++)
		{
			Lease	   *lease = &c->leases[j];

			if (lease->keepalive == r->id)
			{
				/* (one whose end was in flight: not renewed) */
				if (TransactionIdIsValid(lease->changing) &&
					!still_attached(&lease_rel, lease, r, &polls))
					continue;
				put_row(rsinfo, lease, r);
				nrows++;
			}
			/* one that left it (renewed by itself): attached again */
			else if (lease->keepalive == -r->id &&
					 GetCurrentTimestamp() < lease->expires_at &&
					 attach(lease, r, ttl, 0) == LEASE_DONE)
			{
				put_row(rsinfo, lease, r);
				nrows++;
			}
		}
	}
	UnregisterSnapshot(snapshot);

	/* the newest that runs, renewed: the one new terms attach to */
	target = NULL;
	for (int i = 0; i < ks.n; i++)
		if (ks.list[i].running &&
			(target == NULL || ks.list[i].id > target->id))
			target = &ks.list[i];

	/* none runs: begin one, and look for the owner's terms (once) */
	if (target == NULL)
	{
		begin_keepalive(&ka_rel, owner, ttl, &fresh);
		target = &fresh;
		/* read after the flag is set: see attach.c */
		horizon = (int64) U64FromFullTransactionId(ReadNextFullTransactionId());
	}
	else
		horizon = target->k.attach_horizon;
	if (target == &fresh ||
		(horizon != 0 && !horizon_unchanged(target, horizon)))
		nrows += attach_unattached(rsinfo, &lease_rel, &ka_rel, &role_name,
								   owner, target, horizon, ttl);

	/* the caller's terms on a keepalive not its own move to its own */
	for (int i = 0; i < ks.n; i++)
	{
		Renewed    *r = &ks.list[i];

		if (!r->foreign)
			continue;
		cover_starts(&ka_rel, target, r->mine.leases, r->mine.n, ttl, false);
		for (int j = 0; j < r->mine.n; j++)
		{
			Lease	   *lease = &r->mine.leases[j];

			/* (those that left it too: it is not renewed, to find them) */
			if ((lease->keepalive == r->id ||
				 (lease->keepalive == -r->id &&
				  GetCurrentTimestamp() < lease->expires_at)) &&
				attach(lease, target, ttl, r->id) == LEASE_DONE)
			{
				put_row(rsinfo, lease, target);
				nrows++;
			}
		}
	}

	/* (it always writes a keepalive: renewed, or begun) */
	hl_commit_durably(true);
	if (nrows > 0)
		hl_count_by(HL_COUNT_RENEWALS, nrows);
	hl_close(&ka_rel, true);
	hl_close(&lease_rel, true);
	return (Datum) 0;
}
