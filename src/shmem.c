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
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

HoplockShared *hoplock_shared = NULL;

static shmem_startup_hook_type prev_shmem_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_shmem_request_hook = NULL;
#endif

static Size
shared_size(void)
{
	Size		size;

	size = add_size(offsetof(HoplockShared, slots),
					mul_size(hoplock_max_databases, sizeof(HoplockDbSlot)));
	size = MAXALIGN(size);
	size = add_size(size, mul_size(mul_size(hoplock_max_databases,
											hoplock_queue_size),
								   sizeof(HoplockMessage)));
	return size;
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
		hoplock_shared->init_time = GetCurrentTimestamp();
		SpinLockInit(&hoplock_shared->mutex);
		for (int i = 0; i < HOPLOCK_WAIT_BUCKETS; i++)
			ConditionVariableInit(&hoplock_shared->waitcv[i]);
		hoplock_shared->nslots = hoplock_max_databases;
		hoplock_shared->queue_size = hoplock_queue_size;
		rings = (char *) hoplock_shared +
			MAXALIGN(offsetof(HoplockShared, slots) +
					 hoplock_max_databases * sizeof(HoplockDbSlot));
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
