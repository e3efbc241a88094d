/*-------------------------------------------------------------------------
 *
 * refusals.c
 *		Zombie writes, counted.  Only a system that enforces the fence can
 *		count the writes it stopped: every hoplock_fence refused, and every
 *		row hoplock_fenced rejected, because its generation is not the
 *		term that holds the lease now (a holder that lost its term and
 *		writes on: "two systems believe they are the leader").
 *
 *		A refusal is counted in three places: its database's counters
 *		(fences_refused, writes_refused in hoplock_stats), and its term's
 *		entry here -- the lease's name and the generation the write carried
 *		-- which hoplock_history shows per term and hoplock_leases per
 *		name.  The first refusal of a term writes one line to the server
 *		log; the later ones only count.
 *
 *		The entries live in shared memory: HL_MAX_REFUSALS of them, for the
 *		whole server, under one LWLock that nothing else takes (a refusal
 *		is an error path; the calls that grant and renew terms never come
 *		here), at most ROLE_SHARE of them for the terms of one role in one
 *		database.  When a role has its share, its term refused least
 *		recently makes room; when all are in use, the term refused least
 *		recently of all.  So the counts are those of the terms refused most
 *		recently, since the server started or hoplock_stats_reset(), as
 *		PostgreSQL's statistics are, and no role can push out more than a
 *		share of another's.  The database's counters count every refusal.
 *
 *		Only zombie writes count (fence.c judges): by a term the lease had,
 *		and by a role with the privileges of that term's role -- its own
 *		stale writes.  A write by another role, which could not have been
 *		that leader, or of a generation the lease never had, is refused as
 *		ever but counts for nothing, so that no role can raise another's
 *		alert, nor fill the log with lines about another's leases.  Without
 *		shared memory (hoplock not in shared_preload_libraries) nothing is
 *		counted.
 *
 *		This file calls nothing of hoplock's but shared memory's counters.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "refusals.h"
#include "shmem.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* Terms whose refusals are counted at once, across the server */
#define HL_MAX_REFUSALS		1024
/* ... of which the terms of one role in one database */
#define ROLE_SHARE			64

#define REFUSALS_TRANCHE	"hoplock refusals"

typedef struct HlRefusal
{
	Oid			dboid;			/* InvalidOid: unused */
	Oid			roleid;			/* the term's role */
	int64		generation;
	uint64		fences;
	uint64		writes;
	TimestampTz first_at;
	TimestampTz last_at;
	uint16		namelen;
	char		name[HL_MAX_NAME_BYTES];
} HlRefusal;

typedef struct HlRefusals
{
	LWLock	   *lock;
	HlRefusal	entries[HL_MAX_REFUSALS];
} HlRefusals;

static HlRefusals *refusals = NULL;

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

static void
refusals_request(void)
{
	RequestAddinShmemSpace(MAXALIGN(sizeof(HlRefusals)));
	RequestNamedLWLockTranche(REFUSALS_TRANCHE, 1);
}

#if PG_VERSION_NUM >= 150000
static void
refusals_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	refusals_request();
}
#endif

static void
refusals_shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	refusals = ShmemInitStruct("hoplock refusals", sizeof(HlRefusals), &found);
	if (!found)
	{
		memset(refusals, 0, sizeof(HlRefusals));
		refusals->lock = &(GetNamedLWLockTranche(REFUSALS_TRANCHE))->lock;
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Called from _PG_init while shared_preload_libraries is processed. */
void
hl_refusals_init(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = refusals_shmem_request;
#else
	refusals_request();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = refusals_shmem_startup;
}

static bool
entry_is(const HlRefusal *e, Oid dboid, text *name, int64 generation)
{
	return e->dboid == dboid && e->generation == generation &&
		e->namelen == VARSIZE_ANY_EXHDR(name) &&
		memcmp(e->name, VARDATA_ANY(name), e->namelen) == 0;
}

/*
 * Count one refusal of "kind" for term "generation" of lease "name", of
 * this database, in *first whether it is the term's first; false if it
 * is not counted at all (no shared memory).
 */
static bool
count_refusal(text *name, int64 generation, Oid roleid, HlRefusalKind kind,
			  bool *first)
{
	HlRefusal  *e = NULL;
	HlRefusal  *oldest = NULL;
	HlRefusal  *oldest_own = NULL;
	int			own = 0;
	TimestampTz now = GetCurrentTimestamp();

	*first = false;
	if (refusals == NULL || VARSIZE_ANY_EXHDR(name) > HL_MAX_NAME_BYTES)
		return false;
	LWLockAcquire(refusals->lock, LW_EXCLUSIVE);
	for (int i = 0; i < HL_MAX_REFUSALS; i++)
	{
		HlRefusal  *c = &refusals->entries[i];

		if (entry_is(c, MyDatabaseId, name, generation))
		{
			e = c;
			break;
		}
		/* room for a new one: a free entry, or the least recently used */
		if (oldest == NULL ||
			(OidIsValid(oldest->dboid) &&
			 (!OidIsValid(c->dboid) || c->last_at < oldest->last_at)))
			oldest = c;
		/* ... of the role's share, if it has used it up */
		if (c->dboid == MyDatabaseId && c->roleid == roleid)
		{
			own++;
			if (oldest_own == NULL || c->last_at < oldest_own->last_at)
				oldest_own = c;
		}
	}
	if (e == NULL)
	{
		e = (own >= ROLE_SHARE) ? oldest_own : oldest;
		memset(e, 0, offsetof(HlRefusal, name));
		e->dboid = MyDatabaseId;
		e->roleid = roleid;
		e->generation = generation;
		e->first_at = now;
		e->namelen = VARSIZE_ANY_EXHDR(name);
		memcpy(e->name, VARDATA_ANY(name), e->namelen);
		*first = true;
	}
	if (kind == HL_REFUSED_FENCE)
		e->fences++;
	else
		e->writes++;
	e->last_at = Max(e->last_at, now);
	LWLockRelease(refusals->lock);
	return true;
}

/*
 * A write of term "generation" of lease "name", begun by role
 * "term_roleid", is refused (the caller raises its error next); the lease
 * is at generation "current".  Count it, and log the term's first.  Only
 * when the caller's role has the privileges of the term's role (see the
 * header); never raises.
 */
void
hl_refusal_note(text *name, int64 generation, Oid term_roleid,
				int64 current, HlRefusalKind kind)
{
	bool		first;

	if (!OidIsValid(term_roleid) ||
		!has_privs_of_role(GetUserId(), term_roleid))
		return;
	hl_count(kind == HL_REFUSED_FENCE ? HL_COUNT_FENCES_REFUSED :
			 HL_COUNT_WRITES_REFUSED);
	if (!count_refusal(name, generation, term_roleid, kind, &first) || !first)
		return;

	if (current != generation)
		ereport(LOG,
				(errmsg("hoplock: refused a %s of lease \"%s\" by generation " INT64_FORMAT,
						kind == HL_REFUSED_FENCE ? "fence" : "fenced write",
						text_to_cstring(name), generation),
				 errdetail("The lease is at generation " INT64_FORMAT ". Later refusals of this generation are counted, not logged.",
						   current)));
	else
		ereport(LOG,
				(errmsg("hoplock: refused a %s of lease \"%s\" by generation " INT64_FORMAT,
						kind == HL_REFUSED_FENCE ? "fence" : "fenced write",
						text_to_cstring(name), generation),
				 errdetail("The term is over. Later refusals of this generation are counted, not logged.")));
}

/*
 * The terms of this database with refusals counted, in *rows (palloc'd),
 * in no particular order.  Returns how many.
 */
int
hl_refusals_list(HlRefusalRow **rows)
{
	HlRefusal  *copy;
	int			n = 0;

	*rows = NULL;
	if (refusals == NULL)
		return 0;
	copy = palloc(sizeof(HlRefusal) * HL_MAX_REFUSALS);
	LWLockAcquire(refusals->lock, LW_SHARED);
	for (int i = 0; i < HL_MAX_REFUSALS; i++)
	{
		if (refusals->entries[i].dboid == MyDatabaseId)
			copy[n++] = refusals->entries[i];
	}
	LWLockRelease(refusals->lock);

	*rows = palloc(sizeof(HlRefusalRow) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		HlRefusalRow *r = &(*rows)[i];

		r->name = cstring_to_text_with_len(copy[i].name, copy[i].namelen);
		r->generation = copy[i].generation;
		r->fences = (int64) copy[i].fences;
		r->writes = (int64) copy[i].writes;
		r->first_at = copy[i].first_at;
		r->last_at = copy[i].last_at;
	}
	pfree(copy);
	return n;
}

/* Forget this database's terms (hoplock_stats_reset) */
void
hl_refusals_reset(void)
{
	if (refusals == NULL)
		return;
	LWLockAcquire(refusals->lock, LW_EXCLUSIVE);
	for (int i = 0; i < HL_MAX_REFUSALS; i++)
	{
		if (refusals->entries[i].dboid == MyDatabaseId)
			refusals->entries[i].dboid = InvalidOid;
	}
	LWLockRelease(refusals->lock);
}
