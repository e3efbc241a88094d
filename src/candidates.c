/*-------------------------------------------------------------------------
 *
 * candidates.c
 *		The candidates of a lease: the sessions waiting for it in
 *		hoplock_wait, each with a priority.  A freed lease goes to the
 *		candidate with the highest priority, among equals to the one that
 *		has waited longest; a plain hoplock_acquire, or a candidate that is
 *		not first, finds it contended meanwhile.
 *
 *		Each backend has one entry in shared memory (hl_shared->candidates,
 *		per PGPROC), written only by itself, under the lock of the wait
 *		table's partition its key falls in; the entries of one name are
 *		read under that lock.  A count of the entries in use, across the
 *		server, lets a term change skip the look when nobody waits anywhere,
 *		which is the common case: then it costs one atomic read.
 *
 *		A candidate leaves when its hoplock_wait ends, however it ends (an
 *		error, or a FATAL at exit: a before_shmem_exit callback), and so
 *		when its client has gone: hoplock_wait looks at the connection at
 *		least once a second (wait.c).  One that leaves without the lease
 *		wakes the others, one of whom may now be first.
 *
 *		A handoff (lease.c) writes the next term for the candidate it picks,
 *		in the holder's transaction, and marks the candidate's entry.  A
 *		candidate whose wait ends without that term -- a timeout, a cancel,
 *		an error, its client gone -- asks the worker to end it (it ends it
 *		once the handoff has committed, or finds nothing if it rolled back),
 *		so that a handed term never outlives the wait it was written for.
 *		The term's row names the candidate until its wait takes the term
 *		(handed_pid, handed_start), so the worker finds a handed term
 *		nobody took when it reads the table, too (after a restart, or a
 *		message lost); and a wait that took a handed term in a transaction
 *		that then rolls back asks the worker to end it as well.
 *
 *		A candidate that waits with preempt => true asks the holder of a
 *		term of lower priority to step down to it (wait.c has the worker
 *		write the request: the candidate's own transaction is still open);
 *		hl_candidate_preemptor says who, if anyone, asks that of a term.
 *
 *		This file calls nothing of hoplock's but shared memory and the
 *		worker's mailbox (shmem.c, mailbox.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "candidates.h"
#include "shmem.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/syscache.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

static bool entered = false;	/* this backend's entry is in use */
static bool exit_callback_registered = false;

/*
 * The handed terms this transaction's waits took, with the nest level of
 * the (sub)transaction of each: should it roll back, the take is undone
 * and nobody holds the term; the worker is told to end it.  Kept here,
 * not in a memory context, so that an abort needs no memory; beyond
 * MAX_TAKEN the worker is asked to read the table again instead (it finds
 * handed terms nobody took there).
 */
#define MAX_TAKEN	8

typedef struct TakenTerm
{
	int64		generation;
	int			nest;
	union
	{
		struct varlena hdr;
		char		data[VARHDRSZ + HL_MAX_NAME_BYTES];
	}			name;
} TakenTerm;

static TakenTerm taken[MAX_TAKEN];
static int	ntaken = 0;
static bool taken_overflow = false; /* some were not kept: read again */
static bool xact_callbacks_registered = false;

static HlCandidate *
my_entry(void)
{
	return &hl_shared->candidates[hl_proc_index()];
}

/*
 * Is entry key "a" the key "b"?  The database first, then, after a read
 * barrier, the digest: an entry of another partition may be written
 * meanwhile, digest before database (hl_candidate_enter).
 */
static bool
same_key(const HlWaitKey *a, const HlWaitKey *b)
{
	if (a->dboid != b->dboid)
		return false;
	pg_read_barrier();
	return a->digest == b->digest;
}

/* Does candidate "a" come before "b"? */
static bool
comes_before(const HlCandidate *a, const HlCandidate *b)
{
	if (a->priority != b->priority)
		return a->priority > b->priority;
	return a->seq < b->seq;
}

static void
leave_at_exit(int code, Datum arg)
{
	hl_candidate_leave(false);
}

/*
 * Undo the takes of the (sub)transactions at nest level "nest" and deeper,
 * rolled back: the worker ends those terms (it checks that they are
 * still handed and not taken).
 */
static void
undo_takes(int nest)
{
	while (ntaken > 0 && taken[ntaken - 1].nest >= nest)
	{
		ntaken--;
		hl_post_abandoned(&taken[ntaken].name.hdr, taken[ntaken].generation);
	}
	if (taken_overflow)
		hl_post_read_again();
	taken_overflow = false;
}

static void
take_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
		undo_takes(0);
	else if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT ||
			 event == XACT_EVENT_PREPARE)
	{
		ntaken = 0;
		taken_overflow = false;
	}
}

static void
take_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
					  SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (event == SUBXACT_EVENT_ABORT_SUB)
		undo_takes(level);
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		/* the takes of a released savepoint are its parent's now */
		for (int i = 0; i < ntaken; i++)
			if (taken[i].nest >= level)
				taken[i].nest = level - 1;
	}
}

/* This transaction's wait took the term of "generation" it was handed */
static void
remember_take(const char *name, int namelen, int64 generation)
{
	TakenTerm  *t;

	if (!xact_callbacks_registered)
	{
		RegisterXactCallback(take_xact_callback, NULL);
		RegisterSubXactCallback(take_subxact_callback, NULL);
		xact_callbacks_registered = true;
	}
	if (ntaken >= MAX_TAKEN)
	{
		taken_overflow = true;
		return;
	}
	t = &taken[ntaken++];
	memcpy(VARDATA(&t->name.hdr), name, namelen);
	SET_VARSIZE(&t->name.hdr, VARHDRSZ + namelen);
	t->generation = generation;
	t->nest = GetCurrentTransactionNestLevel();
}

/*
 * This backend waits for lease "name" as "owner", with "priority", for a
 * term of "ttl" (and "min_hold", 0: none), bound to the session or not,
 * with "value" (NULL: none),
 * should it be handed one, preempting a holder of lower priority or not,
 * with "slots" (1: none): enter it among the lease's candidates.  Nothing without shared memory.
 */
void
hl_candidate_enter(text *name, text *owner, int32 priority, int64 ttl,
				   int64 min_hold, bool session_bound, text *value,
				   bool preempt, int32 slots)
{
	HlCandidate *me;
	HlWaitKey	key;
	LWLock	   *lock;

	if (hl_shared == NULL || entered)
		return;
	if (!exit_callback_registered)
	{
		before_shmem_exit(leave_at_exit, (Datum) 0);
		exit_callback_registered = true;
	}
	hl_wait_key(name, &key);
	me = my_entry();
	lock = hl_wait_lock_for(&key);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	me->priority = priority;
	me->pid = MyProcPid;
	me->roleid = GetUserId();
	me->since = GetCurrentTimestamp();
	me->ttl = ttl;
	me->min_hold = min_hold;
	me->session_bound = session_bound;
	me->preempt = preempt;
	me->slots = slots;
	me->session_start = MyStartTimestamp;
	me->xact_snapshot = IsolationUsesXactSnapshot();
	me->handed = 0;
	me->valuelen = -1;
	if (value != NULL)
	{
		me->valuelen = Min(VARSIZE_ANY_EXHDR(value), HL_MAX_NAME_BYTES);
		memcpy(me->value, VARDATA_ANY(value), me->valuelen);
	}
	me->seq = pg_atomic_add_fetch_u64(&hl_shared->candidate_seq, 1);
	me->namelen = Min(VARSIZE_ANY_EXHDR(name), HL_MAX_NAME_BYTES);
	memcpy(me->name, VARDATA_ANY(name), me->namelen);
	me->ownerlen = Min(VARSIZE_ANY_EXHDR(owner), HL_MAX_NAME_BYTES);
	memcpy(me->owner, VARDATA_ANY(owner), me->ownerlen);
	/*
	 * The key last, the database after the digest: a reader of another
	 * partition, which holds no lock of this one, never matches this entry
	 * before it is filled in, nor with a digest of another name.
	 */
	me->key.digest = key.digest;
	pg_write_barrier();
	me->key.dboid = key.dboid;
	entered = true;
	pg_atomic_fetch_add_u32(&hl_shared->ncandidates, 1);
	LWLockRelease(lock);
}

/*
 * This backend waits no more.  Unless it took the lease, the others are
 * woken: one of them may be first now.
 */
void
hl_candidate_leave(bool acquired)
{
	HlCandidate *me;
	HlWaitKey	key;
	LWLock	   *lock;
	int64		handed;
	char		name[HL_MAX_NAME_BYTES];
	int			namelen;

	if (!entered)
		return;
	me = my_entry();
	key = me->key;
	lock = hl_wait_lock_for(&key);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	handed = me->handed;
	namelen = me->namelen;
	memcpy(name, me->name, namelen);
	me->key.dboid = InvalidOid;
	pg_write_barrier();
	me->key.digest = 0;
	me->handed = 0;
	entered = false;
	pg_atomic_fetch_sub_u32(&hl_shared->ncandidates, 1);
	LWLockRelease(lock);
	if (!acquired)
	{
		/* a term a handoff wrote for this wait has nobody: end it */
		if (handed != 0)
			hl_post_abandoned(cstring_to_text_with_len(name, namelen), handed);
		hl_wake_waiters(&key);
	}
	else if (handed != 0)
		remember_take(name, namelen, handed);
}

/*
 * Is the session (pid, start) waiting for lease "name" as a candidate?
 */
bool
hl_candidate_waits(text *name, int32 pid, TimestampTz start)
{
	HlWaitKey	key;
	LWLock	   *lock;
	bool		waits = false;

	if (hl_shared == NULL ||
		pg_atomic_read_u32(&hl_shared->ncandidates) == 0)
		return false;
	hl_wait_key(name, &key);
	lock = hl_wait_lock_for(&key);
	LWLockAcquire(lock, LW_SHARED);
	for (int i = 0; i < hl_shared->nprocs && !waits; i++)
	{
		HlCandidate *c = &hl_shared->candidates[i];

		waits = same_key(&c->key, &key) && c->pid == pid &&
			c->session_start == start;
	}
	LWLockRelease(lock);
	return waits;
}

/*
 * May this backend begin a term of free lease "name" now?  Yes if no
 * candidate waits for it, or if this backend is the first of them.
 */
bool
hl_candidate_may_take(text *name)
{
	HlWaitKey	key;
	LWLock	   *lock;
	HlCandidate *first = NULL;
	int			me;

	if (hl_shared == NULL ||
		pg_atomic_read_u32(&hl_shared->ncandidates) == 0)
		return true;
	hl_wait_key(name, &key);
	me = hl_proc_index();
	lock = hl_wait_lock_for(&key);
	LWLockAcquire(lock, LW_SHARED);
	for (int i = 0; i < hl_shared->nprocs; i++)
	{
		HlCandidate *c = &hl_shared->candidates[i];

		if (same_key(&c->key, &key) && (first == NULL || comes_before(c, first)))
			first = c;
	}
	LWLockRelease(lock);
	return first == NULL || first == &hl_shared->candidates[me];
}

/*
 * Does a candidate other than this backend wait for lease "name" -- with
 * a number of slots other than "other_than", unless that is 0?  (A name
 * whose slots are all free keeps its number of slots while one waits with
 * it: slotdeclare.c.  Not while those who wait all give the number the
 * caller gives: they agree to change it.)
 */
bool
hl_candidate_others(text *name, int32 other_than)
{
	HlWaitKey	key;
	LWLock	   *lock;
	bool		others = false;
	int			me;

	if (hl_shared == NULL ||
		pg_atomic_read_u32(&hl_shared->ncandidates) == 0)
		return false;
	hl_wait_key(name, &key);
	me = hl_proc_index();
	lock = hl_wait_lock_for(&key);
	LWLockAcquire(lock, LW_SHARED);
	for (int i = 0; i < hl_shared->nprocs && !others; i++)
		others = i != me && same_key(&hl_shared->candidates[i].key, &key) &&
			(other_than == 0 ||
			 hl_shared->candidates[i].slots != other_than);
	LWLockRelease(lock);
	return others;
}

/*
 * Copies of the candidates of lease "name" that could take a term handed
 * to them, in *found, and their entries' indexes in *index (both
 * palloc'd); returns how many.  Never this backend, nor a candidate
 * waiting under REPEATABLE READ or SERIALIZABLE (it could not take the
 * term: the handoff commits after its snapshot).  Copied under the lock,
 * to be judged after it: the judging reads catalogs.
 */
static int
collect(text *name, HlCandidate **found, int **index)
{
	HlWaitKey	key;
	LWLock	   *lock;
	int			n = 0;
	int			me;

	*found = NULL;
	*index = NULL;
	if (hl_shared == NULL ||
		pg_atomic_read_u32(&hl_shared->ncandidates) == 0)
		return 0;
	hl_wait_key(name, &key);
	me = hl_proc_index();
	*found = palloc(sizeof(HlCandidate) * hl_shared->nprocs);
	*index = palloc(sizeof(int) * hl_shared->nprocs);
	lock = hl_wait_lock_for(&key);
	LWLockAcquire(lock, LW_SHARED);
	for (int i = 0; i < hl_shared->nprocs; i++)
	{
		HlCandidate *c = &hl_shared->candidates[i];

		if (i == me || !same_key(&c->key, &key) || c->xact_snapshot)
			continue;
		(*found)[n] = *c;
		(*index)[n++] = i;
	}
	LWLockRelease(lock);
	return n;
}

/* Is candidate "c" waiting under "owner"? */
static bool
has_owner(const HlCandidate *c, text *owner)
{
	return c->ownerlen == VARSIZE_ANY_EXHDR(owner) &&
		memcmp(c->owner, VARDATA_ANY(owner), c->ownerlen) == 0;
}

/* Was the role of candidate "c" dropped while it waited? */
static bool
role_dropped(const HlCandidate *c)
{
	return !SearchSysCacheExists1(AUTHOID, ObjectIdGetDatum(c->roleid));
}

/*
 * The index in found[] (n of them) of the first candidate that "wanted"
 * keeps and whose role has the privileges of "term_roleid", the role of
 * the term it would take or ask for; -1 if there is none.
 */
static int
first_of(const HlCandidate *found, int n, Oid term_roleid,
		 bool (*wanted) (const HlCandidate *c, const void *arg),
		 const void *arg)
{
	int			best = -1;

	for (int i = 0; i < n; i++)
	{
		if (!wanted(&found[i], arg))
			continue;
		if (best >= 0 && !comes_before(&found[i], &found[best]))
			continue;
		if (role_dropped(&found[i]) ||
			!has_privs_of_role(found[i].roleid, term_roleid))
			continue;
		best = i;
	}
	return best;
}

/* What a handoff asks of its candidate: first_of's test "named" */
typedef struct Wanted
{
	text	   *to_owner;		/* NULL: any */
	List	   *except;			/* owners passed over (text *) */
} Wanted;

static bool
named(const HlCandidate *c, const void *arg)
{
	const Wanted *w = (const Wanted *) arg;
	ListCell   *lc;

	if (w->to_owner != NULL && !has_owner(c, w->to_owner))
		return false;
	foreach(lc, w->except)
	{
		if (has_owner(c, (text *) lfirst(lc)))
			return false;
	}
	return true;
}

/* first_of's test for a preemption: above the term's priority, preempting */
static bool
preempts(const HlCandidate *c, const void *arg)
{
	return c->preempt && c->priority > *(const int32 *) arg;
}

/*
 * The first candidate of lease "name" whose owner is "to_owner" (NULL: the
 * first of all) that a term can be handed to, in *pick, for
 * hoplock_handoff; false if there is none.  Only a candidate whose role has
 * the privileges of "term_roleid", the running term's role: the holder
 * hands its term on within its role, and no other role can catch it by
 * waiting under the same owner (nor a superuser's term be handed to an
 * ordinary role: the superuser has the privileges of every role, not every
 * role those of the superuser), as a preempting candidate must have them
 * too (hl_candidate_preemptor).  Never this backend,
 * nor a candidate waiting under REPEATABLE READ or SERIALIZABLE (it could
 * not take the term: the handoff commits after its snapshot), nor one
 * whose role was dropped while it waited.
 */
bool
hl_candidate_pick(text *name, text *to_owner, Oid term_roleid,
				  HlCandidatePick *pick)
{
	return hl_candidate_pick_except(name, to_owner, NIL, term_roleid, pick);
}

/*
 * The same, passing over the candidates whose owner is in "except" (a
 * List of text *): the owners of a lease's other slots (slots.c).
 */
bool
hl_candidate_pick_except(text *name, text *to_owner, List *except,
						 Oid term_roleid, HlCandidatePick *pick)
{
	HlCandidate *found;
	int		   *index;
	int			n;
	int			best;
	Wanted		w = {to_owner, except};

	n = collect(name, &found, &index);
	best = first_of(found, n, term_roleid, named, &w);
	if (best < 0)
		return false;
	pick->owner = cstring_to_text_with_len(found[best].owner,
										   found[best].ownerlen);
	pick->roleid = found[best].roleid;
	pick->ttl = found[best].ttl;
	pick->min_hold = found[best].min_hold;
	pick->session_bound = found[best].session_bound;
	pick->priority = found[best].priority;
	pick->pid = found[best].pid;
	pick->session_start = found[best].session_start;
	pick->value = found[best].valuelen < 0 ? NULL :
		cstring_to_text_with_len(found[best].value, found[best].valuelen);
	pick->index = index[best];
	pick->seq = found[best].seq;
	return true;
}

/*
 * The owner of the first candidate of lease "name" that waits with
 * preempt => true at a priority above "term_priority", the running term's,
 * and may ask the term of role "term_roleid" to step down: its role has
 * the privileges of the term's role (as hoplock_handoff hands a term on
 * only within the holder's roles).  NULL if there is none.  Not a
 * candidate that could not take the term (see collect).
 */
text *
hl_candidate_preemptor(text *name, int32 term_priority, Oid term_roleid)
{
	HlCandidate *found;
	int		   *index;
	int			n;
	int			best;

	n = collect(name, &found, &index);
	best = first_of(found, n, term_roleid, preempts, &term_priority);
	if (best < 0)
		return NULL;
	return cstring_to_text_with_len(found[best].owner, found[best].ownerlen);
}

/*
 * A handoff wrote the term of "generation" of lease "name" for the
 * candidate it picked: mark its entry, if it still waits, so that a wait
 * that ends without the term has the worker end it (hl_candidate_leave).
 */
void
hl_candidate_handed(text *name, const HlCandidatePick *pick, int64 generation)
{
	HlWaitKey	key;
	LWLock	   *lock;
	HlCandidate *c;

	if (hl_shared == NULL)
		return;
	hl_wait_key(name, &key);
	lock = hl_wait_lock_for(&key);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	c = &hl_shared->candidates[pick->index];
	if (same_key(&c->key, &key) && c->seq == pick->seq)
		c->handed = generation;
	LWLockRelease(lock);
}

/*
 * The candidates of this database's leases, in *rows (palloc'd), in no
 * particular order.  Returns how many.
 */
int
hl_candidates_list(HlCandidateRow **rows)
{
	HlCandidate *copy;
	int			n = 0;

	*rows = NULL;
	if (hl_shared == NULL || pg_atomic_read_u32(&hl_shared->ncandidates) == 0)
		return 0;

	/* every partition's lock, in order, as pg_locks takes the lock table's */
	copy = palloc(sizeof(HlCandidate) * hl_shared->nprocs);
	for (int p = 0; p < HL_WAIT_PARTITIONS; p++)
		LWLockAcquire(hl_shared->wait_locks[p], LW_SHARED);
	for (int i = 0; i < hl_shared->nprocs; i++)
	{
		if (hl_shared->candidates[i].key.dboid == MyDatabaseId)
			copy[n++] = hl_shared->candidates[i];
	}
	for (int p = HL_WAIT_PARTITIONS - 1; p >= 0; p--)
		LWLockRelease(hl_shared->wait_locks[p]);

	*rows = palloc(sizeof(HlCandidateRow) * Max(n, 1));
	for (int i = 0; i < n; i++)
	{
		HlCandidateRow *r = &(*rows)[i];

		r->name = cstring_to_text_with_len(copy[i].name, copy[i].namelen);
		r->owner = cstring_to_text_with_len(copy[i].owner, copy[i].ownerlen);
		r->priority = copy[i].priority;
		r->since = copy[i].since;
		r->pid = copy[i].pid;
		r->roleid = copy[i].roleid;
	}
	pfree(copy);
	return n;
}
