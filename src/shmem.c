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
 *		Sleepers are woken by what they wait for, and by nothing a role
 *		could arrange to share with them.  hoplock_wait sleeps on a
 *		condition variable of its own name: an entry of a shared hash
 *		table of the names being waited for (one per waiting backend at
 *		most), made by the first waiter and removed by the last, keyed by
 *		a digest of the server's secret, the database and the name.  A
 *		change of a name no one waits for wakes nobody; one of another
 *		name could wake the waiters of this one only if the two shared a
 *		64-bit key, which without the secret nobody can tell or aim for.
 *		hoplock_watch sleeps on a condition variable of its database's
 *		event stream, an entry of the same table under a key no lease name
 *		can have (made by the first watcher, removed by the last).  The
 *		secret is drawn with pg_strong_random whenever shared memory is set
 *		up, and never leaves it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "digest.h"
#include "hoplock.h"
#include "settings.h"
#include "shmem.h"
#include "slotkey.h"

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
#include "utils/hsearch.h"
#include "utils/timestamp.h"

#define HL_TRANCHE	"hoplock"

HlShared   *hl_shared = NULL;

/* A name waited for: its key, its waiters, their condition variable */
typedef struct HlWaitEntry
{
	HlWaitKey	key;
	int			nwaiters;
	ConditionVariable cv;
} HlWaitEntry;

/* The names waited for, in shared memory, partitioned */
static HTAB *wait_table = NULL;

/* The entry this backend sleeps on (in hoplock_wait), and its hash */
static HlWaitEntry *my_wait = NULL;
static uint32 my_wait_hash;
static bool my_wait_exit_callback = false;

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
candidates_offset(void)
{
	return MAXALIGN(add_size(evdbs_offset(),
							 mul_size(event_dbs(), sizeof(HlEventDb))));
}

static Size
shared_size(void)
{
	return add_size(candidates_offset(),
					mul_size(total_procs(), sizeof(HlCandidate)));
}

/* Entries of the table of names waited for: one per backend at most */
static int
wait_table_size(void)
{
	return total_procs();
}

/* The first of the tranche's LWLocks that are the wait table's partitions */
static int
wait_locks_base(void)
{
	return 2 + hl_max_databases + event_dbs();
}

static void
request_shmem(void)
{
	RequestAddinShmemSpace(add_size(shared_size(),
									hash_estimate_size(wait_table_size(),
													   sizeof(HlWaitEntry))));

	/*
	 * One for the whole, one for event numbers, one per slot and per evdb,
	 * one per partition of the wait table.
	 */
	RequestNamedLWLockTranche(HL_TRANCHE,
							  wait_locks_base() + HL_WAIT_PARTITIONS);
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
	HASHCTL		info;

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
		if (!pg_strong_random(hl_shared->secret, HL_SECRET_BYTES))
			ereport(FATAL,
					(errcode(ERRCODE_INTERNAL_ERROR),
					 errmsg("could not generate a random secret for hoplock")));
		for (int i = 0; i < HL_WAIT_PARTITIONS; i++)
			hl_shared->wait_locks[i] = &locks[wait_locks_base() + i].lock;
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
		hl_shared->candidates = (HlCandidate *)
			((char *) hl_shared + candidates_offset());
		pg_atomic_init_u32(&hl_shared->ncandidates, 0);
		pg_atomic_init_u32(&hl_shared->nwaiting, 0);
		pg_atomic_init_u64(&hl_shared->candidate_seq, 0);
		pg_atomic_init_u64(&hl_shared->last_minted, 0);
		pg_atomic_init_u64(&hl_shared->reloads, 0);
		rings = (char *) hl_shared + rings_offset();
		for (int i = 0; i < hl_max_databases; i++)
		{
			HlDbSlot   *slot = &hl_shared->slots[i];

			slot->lock = &locks[2 + i].lock;
			pg_atomic_init_u32(&slot->events_pending, 0);
			pg_atomic_init_u32(&slot->terms_changed, 0);
			pg_atomic_init_u32(&slot->keepalives, 1);
			pg_atomic_init_u32(&slot->expiries_trusted, 0);
			for (int c = 0; c < HL_NCOUNTERS; c++)
				pg_atomic_init_u64(&slot->counters[c], 0);
			slot->ring = (HlMessage *)
				(rings + (Size) i * hl_queue_size * sizeof(HlMessage));
		}
	}

	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(HlWaitKey);
	info.entrysize = sizeof(HlWaitEntry);
	info.num_partitions = HL_WAIT_PARTITIONS;
	wait_table = ShmemInitHash("hoplock names waited for",
							   wait_table_size(), wait_table_size(),
							   &info,
							   HASH_ELEM | HASH_BLOBS | HASH_PARTITION |
							   HASH_FIXED_SIZE);
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
	slot->reloads_read = 0;
	slot->overflowed = false;
	slot->head = slot->tail = 0;
	/* not known to have no keepalive until the worker has looked */
	pg_atomic_write_u32(&slot->keepalives, 1);
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

/* Add "n" to one of this database's counters. */
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

/*
 * The key of lease "name" of this database in the table of names waited
 * for (a slot's: its name's), in *key; false if its digest could not be
 * computed.  Raises no
 * error once hl_wait_key_prepare() has been called.  Shared memory must
 * be there (it holds the secret).
 */
bool
hl_wait_key_try(text *name, HlWaitKey *key)
{
	int			slot;

	/* a slot's waiters are its name's (slotkey.h) */
	int			len = hl_slot_split(VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name),
									&slot);
	uint8		buf[HL_SECRET_BYTES + sizeof(Oid) + HL_MAX_NAME_BYTES];
	uint8	   *data = buf;
	uint8		digest[PG_SHA256_DIGEST_LENGTH];
	Size		total = HL_SECRET_BYTES + sizeof(Oid) + len;
	bool		ok;

	/* the last name's key, kept: a term change asks for it more than once */
	static char last_name[HL_MAX_NAME_BYTES];
	static int	last_len = -1;
	static Oid	last_db = InvalidOid;
	static HlWaitKey last_key;

	Assert(hl_shared != NULL);
	if (len == last_len && MyDatabaseId == last_db &&
		memcmp(VARDATA_ANY(name), last_name, len) == 0)
	{
		*key = last_key;
		return true;
	}
	if (total > sizeof(buf))
	{
		data = palloc_extended(total, MCXT_ALLOC_NO_OOM);
		if (data == NULL)
			return false;
	}
	memcpy(data, hl_shared->secret, HL_SECRET_BYTES);
	memcpy(data + HL_SECRET_BYTES, &MyDatabaseId, sizeof(Oid));
	memcpy(data + HL_SECRET_BYTES + sizeof(Oid), VARDATA_ANY(name), len);
	ok = hl_sha256_try(data, total, digest);
	if (data != buf)
		pfree(data);
	if (!ok)
		return false;

	memset(key, 0, sizeof(*key));
	key->dboid = MyDatabaseId;
	memcpy(&key->digest, digest, sizeof(key->digest));

	if (len <= HL_MAX_NAME_BYTES)
	{
		memcpy(last_name, VARDATA_ANY(name), len);
		last_len = len;
		last_db = MyDatabaseId;
		last_key = *key;
	}
	return true;
}

/* The same, raising an error if the digest could not be computed. */
void
hl_wait_key(text *name, HlWaitKey *key)
{
	if (!hl_wait_key_try(name, key))
		elog(ERROR, "could not compute SHA-256 digest");
}

/* Make sure that hl_wait_key_try() will raise no error. */
void
hl_wait_key_prepare(void)
{
	hl_sha256_prepare();
}

/*
 * Is any backend entered among the waiters of a name (or of an event
 * stream)?  Read without a lock, after a full barrier: a transaction that
 * has released its locks and then sees none knows that whoever enters
 * later will look at the lease after it, and see its change.
 */
bool
hl_names_waited_for(void)
{
	if (hl_shared == NULL)
		return false;
	pg_memory_barrier();
	return pg_atomic_read_u32(&hl_shared->nwaiting) > 0;
}

static LWLock *
wait_partition_lock(uint32 hash)
{
	return hl_shared->wait_locks[hash % HL_WAIT_PARTITIONS];
}

/* before_shmem_exit: a backend leaving in hoplock_wait (FATAL) waits no more */
static void
wait_unregister_at_exit(int code, Datum arg)
{
	hl_wait_unregister();
}

/*
 * Enter this backend among the waiters of the name with "key": returns the
 * condition variable to sleep on, theirs, until hl_wait_unregister().
 * NULL when there is none: no shared memory, or (which the table's size
 * rules out) this backend waits already, or the table is full; the caller
 * then polls.
 */
ConditionVariable *
hl_wait_register(const HlWaitKey *key)
{
	HlWaitEntry *entry;
	uint32		hash;
	LWLock	   *lock;
	bool		found;

	if (hl_shared == NULL || my_wait != NULL)
		return NULL;
	if (!my_wait_exit_callback)
	{
		before_shmem_exit(wait_unregister_at_exit, (Datum) 0);
		my_wait_exit_callback = true;
	}

	hash = get_hash_value(wait_table, key);
	lock = wait_partition_lock(hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	entry = hash_search_with_hash_value(wait_table, key, hash,
										HASH_ENTER_NULL, &found);
	if (entry != NULL)
	{
		/* nobody sleeps on a new entry's condition variable: set it up */
		if (!found)
		{
			entry->nwaiters = 0;
			ConditionVariableInit(&entry->cv);
		}
		entry->nwaiters++;
		pg_atomic_fetch_add_u32(&hl_shared->nwaiting, 1);
	}
	LWLockRelease(lock);

	if (entry == NULL)
		return NULL;
	my_wait = entry;
	my_wait_hash = hash;
	return &entry->cv;
}

/*
 * This backend waits no more: off the condition variable's list of
 * sleepers first, then out of the table, so that the entry can be removed
 * (and its memory given to another name) with nobody on that list.
 */
void
hl_wait_unregister(void)
{
	HlWaitEntry *entry = my_wait;
	LWLock	   *lock;

	if (entry == NULL)
		return;
	ConditionVariableCancelSleep();
	my_wait = NULL;

	lock = wait_partition_lock(my_wait_hash);
	LWLockAcquire(lock, LW_EXCLUSIVE);
	Assert(entry->nwaiters > 0);
	pg_atomic_fetch_sub_u32(&hl_shared->nwaiting, 1);
	if (--entry->nwaiters == 0)
		(void) hash_search_with_hash_value(wait_table, &entry->key,
										   my_wait_hash, HASH_REMOVE, NULL);
	LWLockRelease(lock);
}

/* The lock of the partition of the wait table that "key" falls in */
LWLock *
hl_wait_lock_for(const HlWaitKey *key)
{
	return wait_partition_lock(get_hash_value(wait_table, key));
}

/*
 * Wake the waiters of the name with "key", if there are any.  The
 * broadcast is made under the partition's lock, so that the entry cannot
 * be removed and set up again for another name meanwhile.
 */
void
hl_wake_waiters(const HlWaitKey *key)
{
	HlWaitEntry *entry;
	uint32		hash;
	LWLock	   *lock;

	if (hl_shared == NULL)
		return;
	hash = get_hash_value(wait_table, key);
	lock = wait_partition_lock(hash);
	LWLockAcquire(lock, LW_SHARED);
	entry = hash_search_with_hash_value(wait_table, key, hash,
										HASH_FIND, NULL);
	if (entry != NULL)
		ConditionVariableBroadcast(&entry->cv);
	LWLockRelease(lock);
}

/*
 * Wake every waiter of database "dboid": those of each name, and of its
 * event stream.  For a wake-up whose key could not be computed (which
 * never happens with PostgreSQL's own SHA-256; OpenSSL's could fail):
 * spurious looks are cheap, a missed one would leave a waiter asleep
 * until the old term's expiry.  All partitions are locked, in order, for
 * the scan.  Raises no error, allocates nothing.
 */
void
hl_wake_all_waiters(Oid dboid)
{
	HASH_SEQ_STATUS status;
	HlWaitEntry *entry;

	if (hl_shared == NULL)
		return;
	for (int i = 0; i < HL_WAIT_PARTITIONS; i++)
		LWLockAcquire(hl_shared->wait_locks[i], LW_SHARED);
	hash_seq_init(&status, wait_table);
	while ((entry = hash_seq_search(&status)) != NULL)
	{
		if (entry->key.dboid == dboid)
			ConditionVariableBroadcast(&entry->cv);
	}
	for (int i = HL_WAIT_PARTITIONS - 1; i >= 0; i--)
		LWLockRelease(hl_shared->wait_locks[i]);
}

/*
 * The key of database "dboid"'s event stream in the table of names waited
 * for: a digest of the secret, the database and a byte no lease name has
 * (names are valid UTF-8, which never holds 0xFF).  This backend's own
 * database's is kept; the secret changes only with shared memory, which
 * no backend outlives.
 */
static void
event_key(Oid dboid, HlWaitKey *key)
{
	static const uint8 tail[] = {0xFF, 'e', 'v', 'e', 'n', 't', 's'};
	static Oid	cached_dboid = InvalidOid;
	static HlWaitKey cached;
	uint8		buf[HL_SECRET_BYTES + sizeof(Oid) + sizeof(tail)];
	uint8		digest[PG_SHA256_DIGEST_LENGTH];

	if (OidIsValid(cached_dboid) && dboid == cached_dboid)
	{
		*key = cached;
		return;
	}
	memcpy(buf, hl_shared->secret, HL_SECRET_BYTES);
	memcpy(buf + HL_SECRET_BYTES, &dboid, sizeof(Oid));
	memcpy(buf + HL_SECRET_BYTES + sizeof(Oid), tail, sizeof(tail));
	hl_sha256(buf, sizeof(buf), digest);
	memset(key, 0, sizeof(*key));
	key->dboid = dboid;
	memcpy(&key->digest, digest, sizeof(key->digest));
	if (dboid == MyDatabaseId)
	{
		cached = *key;
		cached_dboid = dboid;
	}
}

/*
 * Enter this backend among the hoplock_watch sleepers of database "dboid":
 * returns the condition variable to sleep on, theirs alone, until
 * hl_wait_unregister(); NULL without shared memory.  It is entered (under
 * a lock: a full barrier) before the sleeper first looks at the log, and a
 * transaction looks for it (in hl_wake_event_readers) after its events
 * were committed: either the sleeper sees the events, or the transaction
 * sees it.
 */
ConditionVariable *
hl_watch_register(Oid dboid)
{
	HlWaitKey	key;

	if (hl_shared == NULL)
		return NULL;
	event_key(dboid, &key);
	return hl_wait_register(&key);
}

/*
 * A transaction of database "dboid" that took event numbers ended: wake
 * the worker, which sends the events committed (once per batch: the flag
 * stays set until it looks), and the sessions in hoplock_watch.  "terms":
 * some of its events were others than "renewed" (a term began or ended),
 * which the worker's housekeeping looks for.  The slot
 * is remembered; one given to another database meanwhile is noticed by
 * its dboid, read without a lock.
 */
void
hl_wake_event_readers(Oid dboid, bool terms)
{
	static HlDbSlot *cached = NULL;
	HlWaitKey	key;

	if (hl_shared == NULL)
		return;
	if (cached == NULL || cached->dboid != dboid)
		cached = hl_slot_for(dboid);
	if (cached != NULL && terms)
		pg_atomic_write_u32(&cached->terms_changed, 1);
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

	/* the events are committed: now look for the sleepers */
	pg_memory_barrier();
	event_key(dboid, &key);
	hl_wake_waiters(&key);
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

/* This backend may hold session-bound terms: say so to the worker. */
void
hl_session_register(void)
{
	if (hl_shared == NULL || MyProc == NULL)
		return;
	pg_atomic_write_u64(&hl_shared->sessions[proc_index(MyProc)],
						(uint64) MyStartTimestamp);
}

/* This backend holds no session-bound terms any more. */
void
hl_session_unregister(void)
{
	if (hl_shared == NULL || MyProc == NULL)
		return;
	pg_atomic_write_u64(&hl_shared->sessions[proc_index(MyProc)], 0);
}

/* Is the backend "pid", started at "start", still registered? */
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
