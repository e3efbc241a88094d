/*-------------------------------------------------------------------------
 *
 * shmem.c
 *		hoplock's shared memory: one slot per served database (its worker's
 *		latch, flags, statistics and a mailbox of deadlines), the
 *		launcher's latch, and the condition variables hoplock_wait sleeps
 *		on.  Present only when hoplock is in shared_preload_libraries;
 *		hoplock_shared is NULL otherwise, and every caller copes.
 *
 *		Locking: HoplockShared.mutex (a spinlock) protects slot allocation
 *		(the dboid and state of every slot) and the launcher's fields; each
 *		slot's own mutex protects the rest of the slot, its mailbox
 *		included.  Never hold both, never for more than a few instructions.
 *
 *		The mailbox is a ring of messages from backends to the worker: a
 *		term's deadline when it begins or moves earlier, and a session
 *		that ended without ending its session-bound terms.  When it is
 *		full, the message is dropped and the slot marked "overflowed": the
 *		worker then rescans the lease table, which holds the truth anyway.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "access/twophase.h"
#include "postmaster/autovacuum.h"
#include "postmaster/bgworker_internals.h"
#include "replication/walsender.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

HoplockShared *hoplock_shared = NULL;

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
	return MAXALIGN(add_size(offsetof(HoplockShared, slots),
							 mul_size(hoplock_max_databases,
									  sizeof(HoplockDbSlot))));
}

static Size
sessions_offset(void)
{
	return MAXALIGN(add_size(rings_offset(),
							 mul_size(mul_size(hoplock_max_databases,
											   hoplock_queue_size),
									  sizeof(HoplockMessage))));
}

static Size
shared_size(void)
{
	return add_size(sessions_offset(),
					mul_size(total_procs(), sizeof(pg_atomic_uint64)));
}

#if PG_VERSION_NUM >= 150000
static void
shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(shared_size());
}
#endif

static void
shmem_startup(void)
{
	bool		found;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	hoplock_shared = ShmemInitStruct("hoplock", shared_size(), &found);
	if (!found)
	{
		char	   *rings;

		memset(hoplock_shared, 0, shared_size());
		SpinLockInit(&hoplock_shared->mutex);
		for (int i = 0; i < HOPLOCK_WAIT_BUCKETS; i++)
			ConditionVariableInit(&hoplock_shared->waitcv[i]);
		hoplock_shared->nslots = hoplock_max_databases;
		hoplock_shared->queue_size = hoplock_queue_size;
		hoplock_shared->nprocs = total_procs();
		hoplock_shared->sessions = (pg_atomic_uint64 *)
			((char *) hoplock_shared + sessions_offset());
		for (int i = 0; i < hoplock_shared->nprocs; i++)
			pg_atomic_init_u64(&hoplock_shared->sessions[i], 0);
		rings = (char *) hoplock_shared + rings_offset();
		for (int i = 0; i < hoplock_max_databases; i++)
		{
			HoplockDbSlot *slot = &hoplock_shared->slots[i];

			SpinLockInit(&slot->mutex);
			slot->ring = (HoplockMessage *)
				(rings + (Size) i * hoplock_queue_size * sizeof(HoplockMessage));
		}
	}
	LWLockRelease(AddinShmemInitLock);
}

/* Called from _PG_init while shared_preload_libraries is processed. */
void
hoplock_shmem_init(void)
{
#if PG_VERSION_NUM >= 150000
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = shmem_request;
#else
	RequestAddinShmemSpace(shared_size());
#endif
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = shmem_startup;
}

/* The slot serving "dboid", or NULL. */
HoplockDbSlot *
hoplock_slot_for(Oid dboid)
{
	HoplockDbSlot *found = NULL;

	if (hoplock_shared == NULL)
		return NULL;
	SpinLockAcquire(&hoplock_shared->mutex);
	for (int i = 0; i < hoplock_shared->nslots; i++)
	{
		if (hoplock_shared->slots[i].dboid == dboid)
		{
			found = &hoplock_shared->slots[i];
			break;
		}
	}
	SpinLockRelease(&hoplock_shared->mutex);
	return found;
}

/*
 * Put a message in the mailbox of this database's worker.  Wake the worker
 * if the message needs it sooner than it planned to wake by itself, or if
 * it says a session ended.
 */
void
hoplock_post(const HoplockMessage *msg)
{
	HoplockDbSlot *slot = hoplock_slot_for(MyDatabaseId);
	Latch	   *latch = NULL;

	if (slot == NULL)
		return;

	SpinLockAcquire(&slot->mutex);
	if (slot->head - slot->tail >= (uint64) hoplock_shared->queue_size)
		slot->overflowed = true;
	else
		memcpy(&slot->ring[slot->head++ % hoplock_shared->queue_size], msg,
			   offsetof(HoplockMessage, name) + msg->namelen);
	if (msg->kind == HOPLOCK_MSG_SESSION_END ||
		msg->expires_at < slot->next_wakeup || slot->overflowed)
		latch = slot->latch;
	SpinLockRelease(&slot->mutex);

	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Take the oldest message from a slot's mailbox (worker side).  Returns
 * false when it is empty.  *overflowed reports (and clears) lost messages.
 */
bool
hoplock_take(HoplockDbSlot *slot, HoplockMessage *msg, bool *overflowed)
{
	bool		found = false;

	SpinLockAcquire(&slot->mutex);
	if (slot->overflowed)
	{
		*overflowed = true;
		slot->overflowed = false;
	}
	if (slot->tail != slot->head)
	{
		memcpy(msg, &slot->ring[slot->tail++ % hoplock_shared->queue_size],
			   sizeof(HoplockMessage));
		found = true;
	}
	SpinLockRelease(&slot->mutex);
	return found;
}

/* The condition variable the waiters for lease "name" sleep on. */
ConditionVariable *
hoplock_wait_cv(text *name)
{
	uint32		hash;

	if (hoplock_shared == NULL)
		return NULL;
	hash = hash_bytes((const unsigned char *) VARDATA_ANY(name),
					  VARSIZE_ANY_EXHDR(name));
	hash ^= MyDatabaseId;
	return &hoplock_shared->waitcv[hash % HOPLOCK_WAIT_BUCKETS];
}

/* Wake the launcher, asking it to look at the databases again. */
void
hoplock_wake_launcher(Oid dboid)
{
	Latch	   *latch;

	if (hoplock_shared == NULL)
		return;
	SpinLockAcquire(&hoplock_shared->mutex);
	if (OidIsValid(dboid) &&
		hoplock_shared->nrequests < lengthof(hoplock_shared->requests))
		hoplock_shared->requests[hoplock_shared->nrequests++] = dboid;
	else
		hoplock_shared->rescan_all = true;
	latch = hoplock_shared->launcher_latch;
	SpinLockRelease(&hoplock_shared->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/* Ask the worker of "dboid" to stop (its database or extension is going). */
void
hoplock_stop_worker(Oid dboid, HoplockStopReason reason)
{
	HoplockDbSlot *slot = hoplock_slot_for(dboid);
	Latch	   *latch = NULL;

	if (slot == NULL)
		return;
	SpinLockAcquire(&slot->mutex);
	slot->stop = reason;
	slot->stop_requested_at = GetCurrentTimestamp();
	latch = slot->latch;
	SpinLockRelease(&slot->mutex);
	if (latch != NULL)
		SetLatch(latch);
}

/*
 * Sessions that bound a term.  A backend registers itself (its start time,
 * in the entry of its PGPROC) before its first binding can commit, and
 * unregisters when it has ended its terms at exit; the worker asks whether
 * the session a row names is still there.  Shared memory starts empty, so
 * after a crash-restart, or on a promoted standby, no session of before is.
 */
static int
my_proc_index(PGPROC *proc)
{
	return (int) (proc - ProcGlobal->allProcs);
}

void
hoplock_session_register(void)
{
	if (hoplock_shared == NULL || MyProc == NULL)
		return;
	pg_atomic_write_u64(&hoplock_shared->sessions[my_proc_index(MyProc)],
						(uint64) MyStartTimestamp);
}

void
hoplock_session_unregister(void)
{
	if (hoplock_shared == NULL || MyProc == NULL)
		return;
	pg_atomic_write_u64(&hoplock_shared->sessions[my_proc_index(MyProc)], 0);
}

bool
hoplock_session_alive(int32 pid, TimestampTz start)
{
	PGPROC	   *proc;
	int			i;

	if (hoplock_shared == NULL)
		return true;			/* cannot tell: leave it to the ttl */
	proc = BackendPidGetProc(pid);
	if (proc == NULL)
		return false;
	i = my_proc_index(proc);
	return i >= 0 && i < hoplock_shared->nprocs &&
		pg_atomic_read_u64(&hoplock_shared->sessions[i]) == (uint64) start;
}
