/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		hoplock's shared memory: its layout, its LWLocks, and the few
 *		operations on it that backends, the launcher and the workers share
 *		(see shmem.h for what lives there and which lock protects what).
 *
 *		The mailbox is a ring of messages from backends to a database's
 *		worker: a term's deadline when it begins or moves earlier, and a
 *		session that ended without ending its session-bound terms.  When it
 *		is full, the message is dropped and the slot marked "overflowed":
 *		the worker then reads the lease table again, which holds the truth
 *		anyway.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"
#include "shmem.h"

#include "access/twophase.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/autovacuum.h"
#include "postmaster/bgworker_internals.h"
#include "replication/walsender.h"
#include "storage/ipc.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#define HL_TRANCHE	"hoplock"

HlShared   *hl_shared = NULL;

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

/* Entries of PGPROC's allProcs array, as proc.c counts them. */
static int
total_procs(void)
{
#if PG_VERSION_NUM >= 150000
	return MaxBackends + NUM_AUXILIARY_PROCS + max_prepared_xacts;
#else
	/* MaxBackends is not computed yet when _PG_init asks for shmem */
	return MaxConnections + autovacuum_max_workers + 1 +
		max_worker_processes + max_wal_senders +
		NUM_AUXILIARY_PROCS + max_prepared_xacts;
#endif
}

static Size
rings_offset(void)
{
	return MAXALIGN(add_size(offsetof(HlShared, slots),
							 mul_size(hl_max_databases, sizeof(HlDbSlot))));
}

static Size
sessions_offset(void)
{
	return MAXALIGN(add_size(rings_offset(),
							 mul_size(mul_size(hl_max_databases,
											   hl_queue_size),
									  sizeof(HlMessage))));
}

static Size
seqs_offset(void)
{
	return MAXALIGN(add_size(sessions_offset(),
							 mul_size(total_procs(), sizeof(pg_atomic_uint64))));
}

/* Databases that can number events at once: twice those served, and some */
static int
event_dbs(void)
{
	return 2 * hl_max_databases + 8;
}

static Size
evdbs_offset(void)
{
	return MAXALIGN(add_size(seqs_offset(),
							 mul_size(total_procs(), sizeof(HlSeqEntry))));
}

static Size
shared_size(void)
{
	return add_size(evdbs_offset(),
					mul_size(event_dbs(), sizeof(HlEventDb)));
}

static void
request_shmem(void)
{
	RequestAddinShmemSpace(shared_size());
	/* one for the whole, one for event numbers, one per slot and per evdb */
	RequestNamedLWLockTranche(HL_TRANCHE, 2 + hl_max_databases + event_dbs());
}

#if PG_VERSION_NUM >= 150000
static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	request_shmem();
}
#endif

static void
shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	hl_shared = ShmemInitStruct("hoplock", shared_size(), &found);
	if (!found)
	{
		LWLockPadded *locks = GetNamedLWLockTranche(HL_TRANCHE);
		char	   *rings;

		memset(hl_shared, 0, shared_size());
		hl_shared->lock = &locks[0].lock;
		/* tells workers of an earlier incarnation (crash-restart) apart */
		hl_shared->incarnation = (uint64) GetCurrentTimestamp();
		for (int i = 0; i < HL_WAIT_BUCKETS; i++)
			ConditionVariableInit(&hl_shared->waitcv[i]);
		for (int i = 0; i < HL_EVENT_BUCKETS; i++)
			ConditionVariableInit(&hl_shared->eventcv[i]);
		hl_shared->nslots = hl_max_databases;
		hl_shared->queue_size = hl_queue_size;
		hl_shared->nprocs = total_procs();
		hl_shared->sessions = (pg_atomic_uint64 *)
			((char *) hl_shared + sessions_offset());
		for (int i = 0; i < hl_shared->nprocs; i++)
			pg_atomic_init_u64(&hl_shared->sessions[i], 0);
		hl_shared->seq_lock = &locks[1].lock;
		hl_shared->seqs = (HlSeqEntry *) ((char *) hl_shared + seqs_offset());
		hl_shared->nevdbs = event_dbs();
		hl_shared->evdbs = (HlEventDb *) ((char *) hl_shared + evdbs_offset());
		for (int i = 0; i < hl_shared->nevdbs; i++)
			hl_shared->evdbs[i].lock = &locks[2 + hl_max_databases + i].lock;
		rings = (char *) hl_shared + rings_offset();
		for (int i = 0; i < hl_max_databases; i++)
		{
			HlDbSlot   *slot = &hl_shared->slots[i];

			slot->lock = &locks[2 + i].lock;
			pg_atomic_init_u32(&slot->events_pending, 0);
			for (int c = 0; c < HL_NCOUNTERS; c++)
				pg_atomic_init_u64(&slot->counters[c], 0);
			slot->ring = (HlMessage *)
				(rings + (Size) i * hl_queue_size * sizeof(HlMessage));
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Called from _PG_init while shared_preload_libraries is processed. */
void
hl_shmem_init(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
#else
	request_shmem();
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
}

/* The slot serving "dboid", or NULL. */
HlDbSlot *
hl_slot_for(Oid dboid)
{
	HlDbSlot   *found = NULL;

	if (hl_shared == NULL || !OidIsValid(dboid))
		return NULL;
	LWLockAcquire(hl_shared->lock, LW_SHARED);
	for (int i = 0; i < hl_shared->nslots; i++)
	{
		if (hl_shared->slots[i].dboid == dboid)
		{
			found = &hl_shared->slots[i];
			break;
		}
	}
	LWLockRelease(hl_shared->lock);
	return found;
}

/*
 * Everything of a slot but its lock, ring, dboid and generation, as a
 * fresh slot has it; its counters start again.  Caller holds the slot's
 * lock.
 */
void
hl_slot_reset(HlDbSlot *slot)
{
	slot->state = WORKER_FREE;
	slot->pid = 0;
	slot->latch = NULL;
	slot->stop = STOP_NONE;
	slot->stop_requested_at = 0;
	slot->busy_pid = 0;
	slot->next_wakeup = 0;
	slot->overflowed = false;
	slot->head = slot->tail = 0;
	memset(&slot->stats, 0, sizeof(slot->stats));
	for (int c = 0; c < HL_NCOUNTERS; c++)
		pg_atomic_write_u64(&slot->counters[c], 0);
	slot->stats_reset = GetCurrentTimestamp();
}

/*
 * Add one (or n) to a counter of this database (hoplock_stats).  The slot is
 * remembered; a slot given to another database meanwhile is noticed by its
 * dboid, read without a lock (an Oid is read atomically).  A database
 * without a slot (no worker serves it) keeps no counters, but tells the
 * launcher, every few seconds at most, that it uses hoplock: a launcher
 * short of slots may not have looked.
 */
void
hl_count(HlCounter counter)
{
	hl_count_by(counter, 1);
}

void
hl_count_by(HlCounter counter, int64 n)
{
	static HlDbSlot *cached = NULL;
	static TimestampTz told_launcher = 0;

	if (hl_shared == NULL)
		return;
	if (cached == NULL || cached->dboid != MyDatabaseId)
	{
		cached = hl_slot_for(MyDatabaseId);
		if (cached == NULL)
		{
			TimestampTz now = GetCurrentTimestamp();

			if (now - told_launcher >= 10 * USECS_PER_SEC)
			{
				told_launcher = now;
				hl_wake_launcher(MyDatabaseId);
			}
			return;
		}
	}
	pg_atomic_fetch_add_u64(&cached->counters[counter], n);
}

/* This backend's entry in the per-PGPROC arrays */
int
hl_proc_index(void)
{
	return (int) (MyProc - ProcGlobal->allProcs);
}

/*
 * Put a message in the mailbox of database "dboid"'s worker.  Wake the
 * worker if the message needs it sooner than it planned to wake by itself,
 * or if it says a session ended.
 */
void
hl_post(Oid dboid, const HlMessage *msg)
{
	HlDbSlot   *slot = hl_slot_for(dboid);
	Latch	   *latch = NULL;

	if (slot == NULL)
		return;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (slot->dboid == dboid)
	{
		if (slot->head - slot->tail >= (uint64) hl_shared->queue_size)
			slot->overflowed = true;
		else
			memcpy(&slot->ring[slot->head++ % hl_shared->queue_size], msg,
				   offsetof(HlMessage, name) + msg->namelen);
		if (msg->kind != HL_MSG_DEADLINE ||
			msg->expires_at < slot->next_wakeup || slot->overflowed)
			latch = slot->latch;
	}
	LWLockRelease(slot->lock);

	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Take the oldest message from a slot's mailbox (worker side).  Returns
 * false when it is empty.  *overflowed reports (and clears) lost messages.
 */
bool
hl_take(HlDbSlot *slot, HlMessage *msg, bool *overflowed)
{
	bool		found = false;

	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (slot->overflowed)
	{
		*overflowed = true;
		slot->overflowed = false;
	}
	if (slot->tail != slot->head)
	{
		memcpy(msg, &slot->ring[slot->tail++ % hl_shared->queue_size],
			   sizeof(HlMessage));
		found = true;
	}
	LWLockRelease(slot->lock);
	return found;
}

/*
 * How many more messages the mailbox of database "dboid"'s worker has room
 * for now (0 if no worker serves it).
 */
int
hl_mailbox_room(Oid dboid)
{
	HlDbSlot   *slot = hl_slot_for(dboid);
	int			room = 0;

	if (slot == NULL)
		return 0;
	LWLockAcquire(slot->lock, LW_SHARED);
	if (slot->dboid == dboid && !slot->overflowed)
		room = hl_shared->queue_size - (int) (slot->head - slot->tail);
	LWLockRelease(slot->lock);
	return Max(room, 0);
}

/* Is the mailbox empty?  Caller holds the slot's lock. */
bool
hl_mailbox_empty(HlDbSlot *slot)
{
	return slot->head == slot->tail && !slot->overflowed;
}

/* The condition variable the waiters for lease "name" sleep on. */
ConditionVariable *
hl_wait_cv(text *name)
{
	if (hl_shared == NULL)
		return NULL;
	return &hl_shared->waitcv[hl_name_bucket(name, HL_WAIT_BUCKETS)];
}

/* The condition variable hoplock_watch sleeps on in database "dboid". */
ConditionVariable *
hl_event_cv(Oid dboid)
{
	if (hl_shared == NULL)
		return NULL;
	return &hl_shared->eventcv[dboid % HL_EVENT_BUCKETS];
}

/*
 * A transaction of database "dboid" that took event numbers ended: wake
 * the worker, which sends the events committed (once per batch: the flag
 * stays set until it looks), and the sessions in hoplock_watch.  The slot
 * is remembered; one given to another database meanwhile is noticed by
 * its dboid, read without a lock.
 */
void
hl_wake_event_readers(Oid dboid)
{
	static HlDbSlot *cached = NULL;

	if (hl_shared == NULL)
		return;
	if (cached == NULL || cached->dboid != dboid)
		cached = hl_slot_for(dboid);
	if (cached != NULL &&
		pg_atomic_exchange_u32(&cached->events_pending, 1) == 0)
	{
		Latch	   *latch = NULL;

		LWLockAcquire(cached->lock, LW_SHARED);
		if (cached->dboid == dboid)
			latch = cached->latch;
		LWLockRelease(cached->lock);
		if (latch != NULL)
			SetLatch(latch);
	}
	ConditionVariableBroadcast(hl_event_cv(dboid));
}

/*
 * Wake the launcher, asking it to look at database "dboid".  A database is
 * asked for once however many ask before the launcher looks.  A request
 * that finds the list full is dropped (the launcher is still woken), never
 * turned into a look into every database, which any role able to ask could
 * then repeat at will: what it asked for comes anyway -- a database just
 * created is new to the launcher, a worker stopped for a statement is
 * started again when its slot is harvested, and a database that uses
 * hoplock without a worker asks again as its sessions go on calling it
 * (hl_count_by).
 */
void
hl_wake_launcher(Oid dboid)
{
	Latch	   *latch;
	bool		found = false;

	if (hl_shared == NULL)
		return;
	LWLockAcquire(hl_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < hl_shared->nrequests; i++)
	{
		if (hl_shared->requests[i] == dboid)
			found = true;
	}
	if (OidIsValid(dboid) && !found &&
		hl_shared->nrequests < HL_MAX_REQUESTS)
		hl_shared->requests[hl_shared->nrequests++] = dboid;
	latch = hl_shared->launcher_latch;
	LWLockRelease(hl_shared->lock);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Wake the launcher with no request: it reads pg_database again (as on
 * every wake-up), and starts or lists workers as that says, but looks into
 * no database it has not been asked to.
 */
void
hl_nudge_launcher(void)
{
	Latch	   *latch;

	if (hl_shared == NULL)
		return;
	LWLockAcquire(hl_shared->lock, LW_SHARED);
	latch = hl_shared->launcher_latch;
	LWLockRelease(hl_shared->lock);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Ask the worker of "dboid" to stop, and send it SIGTERM: it leaves at once,
 * even from inside a commit that waits for a synchronous standby.  Its pid
 * is read and signalled under the slot's lock, which it takes to clear the
 * pid on its way out, so the signal cannot reach a process that reused it.
 */
void
hl_stop_worker(Oid dboid, HlStopReason reason)
{
	HlDbSlot   *slot = hl_slot_for(dboid);
	Latch	   *latch;

	if (slot == NULL)
		return;
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	if (slot->dboid == dboid)
	{
		slot->stop = reason;
		slot->stop_requested_at = GetCurrentTimestamp();
		if (reason == STOP_DATABASE_BUSY)
			slot->busy_pid = MyProcPid;
		if (slot->pid != 0)
			(void) kill(slot->pid, SIGTERM);
	}
	LWLockRelease(slot->lock);

	/* the launcher keeps the postmaster from starting it again */
	LWLockAcquire(hl_shared->lock, LW_SHARED);
	latch = hl_shared->launcher_latch;
	LWLockRelease(hl_shared->lock);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Sessions that bound a term.  A backend registers itself (its start time,
 * in the entry of its PGPROC) before its first binding can commit, and
 * unregisters on its way out, however it leaves (see session.c); the
 * worker asks whether the session a row names is still there.  Shared
 * memory starts empty, so after a crash-restart, or on a promoted standby,
 * no session of before is.
 */
static int
proc_index(PGPROC *proc)
{
	return (int) (proc - ProcGlobal->allProcs);
}

void
hl_session_register(void)
{
	if (hl_shared == NULL || MyProc == NULL)
		return;
	pg_atomic_write_u64(&hl_shared->sessions[proc_index(MyProc)],
						(uint64) MyStartTimestamp);
}

void
hl_session_unregister(void)
{
	if (hl_shared == NULL || MyProc == NULL)
		return;
	pg_atomic_write_u64(&hl_shared->sessions[proc_index(MyProc)], 0);
}

bool
hl_session_alive(int32 pid, TimestampTz start)
{
	PGPROC	   *proc;
	int			i;

	if (hl_shared == NULL)
		return true;			/* cannot tell: leave it to the ttl */
	proc = BackendPidGetProc(pid);
	if (proc == NULL)
		return false;
	i = proc_index(proc);
	return i >= 0 && i < hl_shared->nprocs &&
		pg_atomic_read_u64(&hl_shared->sessions[i]) == (uint64) start;
}
