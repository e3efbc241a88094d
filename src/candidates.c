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
 *		This file calls nothing of hoplock's but shared memory (shmem.c).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "candidates.h"
#include "shmem.h"

#include "miscadmin.h"
#include "storage/ipc.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

static bool entered = false;	/* this backend's entry is in use */
static bool exit_callback_registered = false;

static HlCandidate *
my_entry(void)
{
	return &hl_shared->candidates[hl_proc_index()];
}

static bool
same_key(const HlWaitKey *a, const HlWaitKey *b)
{
	return a->dboid == b->dboid && a->digest == b->digest;
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
 * This backend waits for lease "name" as "owner", with "priority", for a
 * term of "ttl", bound to the session or not, with "value" (NULL: none),
 * should it be handed one: enter it among the lease's
 * candidates.  Nothing without shared memory.
 */
void
hl_candidate_enter(text *name, text *owner, int32 priority, int64 ttl,
				   bool session_bound, text *value)
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
	me->key = key;
	me->priority = priority;
	me->pid = MyProcPid;
	me->roleid = GetUserId();
	me->since = GetCurrentTimestamp();
	me->ttl = ttl;
	me->session_bound = session_bound;
	me->session_start = MyStartTimestamp;
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

	if (!entered)
		return;
	me = my_entry();
	key = me->key;
	lock = hl_wait_lock_for(&key);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	me->key.dboid = InvalidOid;
	entered = false;
	pg_atomic_fetch_sub_u32(&hl_shared->ncandidates, 1);
	LWLockRelease(lock);
	if (!acquired)
		hl_wake_waiters(&key);
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
 * The first candidate of lease "name" whose owner is "to_owner" (NULL: the
 * first of all), in *pick, for hoplock_handoff; false if there is none.
 * This backend is never picked.
 */
bool
hl_candidate_pick(text *name, text *to_owner, HlCandidatePick *pick)
{
	HlWaitKey	key;
	LWLock	   *lock;
	HlCandidate first;
	bool		found = false;
	int			me;

	if (hl_shared == NULL ||
		pg_atomic_read_u32(&hl_shared->ncandidates) == 0)
		return false;
	hl_wait_key(name, &key);
	me = hl_proc_index();
	lock = hl_wait_lock_for(&key);
	LWLockAcquire(lock, LW_SHARED);
	for (int i = 0; i < hl_shared->nprocs; i++)
	{
		HlCandidate *c = &hl_shared->candidates[i];

		if (i == me || !same_key(&c->key, &key))
			continue;
		if (to_owner != NULL &&
			(c->ownerlen != VARSIZE_ANY_EXHDR(to_owner) ||
			 memcmp(c->owner, VARDATA_ANY(to_owner), c->ownerlen) != 0))
			continue;
		if (!found || comes_before(c, &first))
		{
			first = *c;
			found = true;
		}
	}
	LWLockRelease(lock);
	if (!found)
		return false;
	pick->owner = cstring_to_text_with_len(first.owner, first.ownerlen);
	pick->roleid = first.roleid;
	pick->ttl = first.ttl;
	pick->session_bound = first.session_bound;
	pick->pid = first.pid;
	pick->session_start = first.session_start;
	pick->value = first.valuelen < 0 ? NULL :
		cstring_to_text_with_len(first.value, first.valuelen);
	return true;
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
