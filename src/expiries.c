/*-------------------------------------------------------------------------
 *
 * expiries.c
 *		The terms a worker is announcing in bulk (massexpiry.c), in one
 *		hash table of shared memory for all databases, keyed by database
 *		and a hash of the name.  A mass expiry commits its "expired" events first and
 *		writes the lease rows afterwards, so for a while a lease row says
 *		"running, lapsed, not announced" of a term whose expiry is
 *		recorded.  Every writer of a lease row looks here first, holding
 *		the row's lock, and this is what it finds:
 *
 *		- WATCHED: the worker is about to read the row.  The writer marks
 *		  the entry touched and goes on; the worker leaves a touched term
 *		  out of the batch (it looks at it again the usual way).
 *		- ANNOUNCING (same generation): the event is being committed.  The
 *		  writer reports contention, as if the worker held the row.
 *		- ANNOUNCED (same generation): the event is committed.  The writer
 *		  goes on, and records no "expired" of its own.
 *
 *		The worker publishes an entry before it reads the row, and a
 *		writer looks here only after it has locked the row (with a memory
 *		barrier between): either the worker's read finds the writer's lock
 *		(a change in flight: the term is left out), or the writer finds
 *		the entry.  An entry goes only once the row is written, or is
 *		another term's.
 *
 *		The table is lost with shared memory; the delivery row says which
 *		events a lost batch may have left unwritten (massexpiry.c).
 *
 *		Locking: one LWLock for the table; writers take it shared (an
 *		entry's touched flag is an atomic), the worker exclusive.  Writers
 *		look only while the table has entries (a count read without the
 *		lock), so a database with no mass expiry under way pays one atomic
 *		read per write.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "expiries.h"
#include "hoplock.h"
#include "shmem.h"

#include "common/hashfn.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "storage/ipc.h"
#include "storage/shmem.h"
#include "utils/hsearch.h"
#include "utils/timestamp.h"

/*
 * A name is known by 64 bits of a hash keyed with the server's secret, so
 * that an entry is small.  Two names of a batch that share them: the
 * second is left to the usual way.  A writer of a name that shares them
 * with a name of a batch touches its entry (which only leaves that name
 * to the usual way), and can find no other state of it: those say a
 * generation, and no two terms of any names share one (branch.c).
 */
typedef struct ExpiryKey
{
	Oid			dboid;
	uint32		len;
	uint64		hash;
} ExpiryKey;

typedef struct ExpiryEntry
{
	ExpiryKey	key;
	int64		generation;		/* 0 while WATCHED */
	HlExpiryState state;
	pg_atomic_uint32 touched;	/* a writer locked the row while WATCHED */
} ExpiryEntry;

typedef struct ExpiryShared
{
	LWLock	   *lock;
	pg_atomic_uint32 entries;	/* in the table, all databases */
	pg_atomic_uint64 sql_writes;	/* statements that wrote hoplock's
									 * tables (dbhooks.c), all databases */
	pg_atomic_uint64 untrusted; /* times a database's set stopped being
								 * trusted (hl_expiries_untrust) */
} ExpiryShared;

static ExpiryShared *shared = NULL;
static HTAB *table = NULL;

#define EXPIRIES_TRANCHE	"hoplock expiries"

static shmem_startup_hook_type prev_startup_hook = NULL;
#if PG_VERSION_NUM >= 150000
static shmem_request_hook_type prev_request_hook = NULL;
#endif

static void
expiries_request(void)
{
	RequestAddinShmemSpace(add_size(MAXALIGN(sizeof(ExpiryShared)),
									hash_estimate_size(HL_EXPIRIES_MAX,
													   sizeof(ExpiryEntry))));
	RequestNamedLWLockTranche(EXPIRIES_TRANCHE, 1);
}

#if PG_VERSION_NUM >= 150000
static void
expiries_shmem_request(void)
{
	if (prev_request_hook)
		prev_request_hook();
	expiries_request();
}
#endif

static void
expiries_shmem_startup(void)
{
	bool		found;
	HASHCTL		info;

	if (prev_startup_hook)
		prev_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("hoplock expiries", sizeof(ExpiryShared), &found);
	if (!found)
	{
		shared->lock = &GetNamedLWLockTranche(EXPIRIES_TRANCHE)[0].lock;
		pg_atomic_init_u32(&shared->entries, 0);
		pg_atomic_init_u64(&shared->sql_writes, 0);
		pg_atomic_init_u64(&shared->untrusted, 0);
	}
	memset(&info, 0, sizeof(info));
	info.keysize = sizeof(ExpiryKey);
	info.entrysize = sizeof(ExpiryEntry);
	table = ShmemInitHash("hoplock expiries being announced",
						  HL_EXPIRIES_MAX, HL_EXPIRIES_MAX, &info,
						  HASH_ELEM | HASH_BLOBS | HASH_FIXED_SIZE);
	LWLockRelease(AddinShmemInitLock);
}

/* Called from _PG_init while shared_preload_libraries is processed. */
void
hl_expiries_shmem_init(void)
{
#if PG_VERSION_NUM >= 150000
	prev_request_hook = shmem_request_hook;
	shmem_request_hook = expiries_shmem_request;
#else
	expiries_request();
#endif
	prev_startup_hook = shmem_startup_hook;
	shmem_startup_hook = expiries_shmem_startup;
}

static void
make_key(ExpiryKey *key, const char *name, int len)
{
	uint64		seed;

	memset(key, 0, sizeof(*key));
	key->dboid = MyDatabaseId;
	key->len = (uint32) len;
	memcpy(&seed, hl_shared->secret, sizeof(seed));
	key->hash = hash_bytes_extended((const unsigned char *) name, len, seed);
}

/*
 * A writer of the lease row of "name", whose term is "generation", holding
 * the row's lock: what the set says of that term (see the file header).
 * With "touch", marks a WATCHED entry touched (only a writer holding the
 * row's lock may: the worker's read of the row relies on it).
 */
HlExpiryState
hl_expiries_check(text *name, int64 generation, bool touch)
{
	ExpiryKey	key;
	ExpiryEntry *e;
	HlExpiryState state = HL_EXPIRY_NONE;

	if (shared == NULL)
		return HL_EXPIRY_NONE;

	/* the row lock taken before, the count read after (file header) */
	pg_memory_barrier();
	if (pg_atomic_read_u32(&shared->entries) == 0)
		return HL_EXPIRY_NONE;
	make_key(&key, VARDATA_ANY(name), VARSIZE_ANY_EXHDR(name));
	LWLockAcquire(shared->lock, LW_SHARED);
	e = hash_search(table, &key, HASH_FIND, NULL);
	if (e != NULL)
	{
		if (e->state == HL_EXPIRY_WATCHED)
		{
			if (touch)
				pg_atomic_write_u32(&e->touched, 1);
			state = HL_EXPIRY_WATCHED;
		}
		else if (e->generation == generation)
			state = e->state;
	}
	LWLockRelease(shared->lock);
	return state;
}

/*
 * The worker, before it reads the rows of "n" names: publish them WATCHED.
 * watched[i] says which are (not one already there, nor beyond the room
 * left).  Returns how many.
 */
int
hl_expiries_watch(char **names, const int *lens, int n, bool *watched)
{
	int			added = 0;

	if (shared == NULL)
	{
		memset(watched, 0, n * sizeof(bool));
		return 0;
	}
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		ExpiryKey	key;
		ExpiryEntry *e;
		bool		found;

		watched[i] = false;
		make_key(&key, names[i], lens[i]);
		e = hash_search(table, &key, HASH_ENTER_NULL, &found);
		if (e == NULL || found)
			continue;
		e->generation = 0;
		e->state = HL_EXPIRY_WATCHED;
		pg_atomic_init_u32(&e->touched, 0);
		watched[i] = true;
		added++;
	}
	pg_atomic_fetch_add_u32(&shared->entries, added);
	LWLockRelease(shared->lock);

	/* published before the rows are read (file header) */
	pg_memory_barrier();
	return added;
}

/* Remove an entry; caller holds the lock exclusively */
static void
remove_entry(const char *name, int len)
{
	ExpiryKey	key;
	bool		found;

	make_key(&key, name, len);
	(void) hash_search(table, &key, HASH_REMOVE, &found);
	if (found)
		pg_atomic_fetch_sub_u32(&shared->entries, 1);
}

/*
 * The worker, having read the rows: the names whose row it found lapsed
 * and unchanged (generations[i] nonzero) become ANNOUNCING, unless a
 * writer touched them meanwhile; the rest go.  kept[i] says which stay.
 */
void
hl_expiries_flip(char **names, const int *lens, const int64 *generations,
				 int n, bool *kept)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		ExpiryKey	key;
		ExpiryEntry *e;

		kept[i] = false;
		make_key(&key, names[i], lens[i]);
		e = hash_search(table, &key, HASH_FIND, NULL);
		if (e == NULL || e->state != HL_EXPIRY_WATCHED)
			continue;
		if (generations[i] == 0 || pg_atomic_read_u32(&e->touched) != 0)
		{
			remove_entry(names[i], lens[i]);
			continue;
		}
		e->generation = generations[i];
		e->state = HL_EXPIRY_ANNOUNCING;
		kept[i] = true;
	}
	LWLockRelease(shared->lock);
}

/*
 * The worker: the events of these names are committed; writers may take
 * the terms over now, recording no "expired" of their own.
 */
void
hl_expiries_announced(char **names, const int *lens, int n)
{
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
	{
		ExpiryKey	key;
		ExpiryEntry *e;

		make_key(&key, names[i], lens[i]);
		e = hash_search(table, &key, HASH_FIND, NULL);
		if (e != NULL && e->state == HL_EXPIRY_ANNOUNCING)
			e->state = HL_EXPIRY_ANNOUNCED;
	}
	LWLockRelease(shared->lock);
}

/* The worker: these names' rows are written (or their batch failed) */
void
hl_expiries_forget(char **names, const int *lens, int n)
{
	if (shared == NULL || n == 0)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < n; i++)
		remove_entry(names[i], lens[i]);
	LWLockRelease(shared->lock);
}

/*
 * Every entry of this database: when its worker starts, and when it exits
 * (the delivery row says what a batch it left may have left unwritten).
 */
void
hl_expiries_forget_all(void)
{
	HASH_SEQ_STATUS status;
	ExpiryEntry *e;

	if (shared == NULL)
		return;
	LWLockAcquire(shared->lock, LW_EXCLUSIVE);
	hash_seq_init(&status, table);
	while ((e = hash_seq_search(&status)) != NULL)
	{
		if (e->key.dboid == MyDatabaseId)
		{
			(void) hash_search(table, &e->key, HASH_REMOVE, NULL);
			pg_atomic_fetch_sub_u32(&shared->entries, 1);
		}
	}
	LWLockRelease(shared->lock);
}

/*
 * This database's slot, NULL if it has none (no worker serves it).  That
 * it has none is believed for a second: every write of a lease row asks,
 * and finding none takes the lock of the slots.  (Not trusting a set is
 * never wrong, only slower.)
 */
static HlDbSlot *
this_db_slot(void)
{
	static HlDbSlot *cached = NULL;
	static TimestampTz none_until = 0;

	if (hl_shared == NULL)
		return NULL;
	if (cached != NULL && cached->dboid == MyDatabaseId)
		return cached;
	if (cached == NULL && none_until != 0 && GetCurrentTimestamp() < none_until)
		return NULL;
	cached = hl_slot_for(MyDatabaseId);
	none_until = cached == NULL ? GetCurrentTimestamp() + USECS_PER_SEC : 0;
	return cached;
}

/*
 * Does the set say all there is of this database's mass expiries: has its
 * worker, since shared memory was set up, looked for a batch whose rows a
 * restart left unwritten (and written them)?  Otherwise a writer asks the
 * event log (hl_eventlog_expiry_pending).
 */
bool
hl_expiries_trusted(void)
{
	HlDbSlot   *slot = this_db_slot();

	return slot != NULL && pg_atomic_read_u32(&slot->expiries_trusted) != 0;
}

/*
 * The set no longer says it all: the worker starts or exits, or SQL wrote
 * hoplock's tables.  The count first, then the flag (hl_expiries_trust).
 */
void
hl_expiries_untrust(void)
{
	/* (looked up afresh: a miss remembered may be a worker begun since) */
	HlDbSlot   *slot = hl_shared != NULL ? hl_slot_for(MyDatabaseId) : NULL;

	if (shared != NULL)
		pg_atomic_fetch_add_u64(&shared->untrusted, 1);
	pg_memory_barrier();
	if (slot != NULL)
		pg_atomic_write_u32(&slot->expiries_trusted, 0);
}

/*
 * The worker, having found no batch cut short (or finished it): the set
 * says it all from now on, unless the set stopped being trusted since it
 * read hl_expiries_untrusted_count() as "seen" -- then false, and it
 * looks again.  The flag first, then the count (hl_expiries_untrust).
 */
bool
hl_expiries_trust(uint64 seen)
{
	HlDbSlot   *slot = this_db_slot();

	if (slot == NULL || shared == NULL)
		return false;
	pg_atomic_write_u32(&slot->expiries_trusted, 1);
	pg_memory_barrier();
	if (pg_atomic_read_u64(&shared->untrusted) != seen)
	{
		pg_atomic_write_u32(&slot->expiries_trusted, 0);
		return false;
	}
	return true;
}

/*
 * How many times a set stopped being trusted, in any database: what a
 * backend remembers of the delivery row's mark is good while this stays
 * (hl_eventlog_expiry_pending).  A database no worker serves never had
 * a set to trust.
 */
uint64
hl_expiries_untrusted_count(void)
{
	return shared == NULL ? 0 : pg_atomic_read_u64(&shared->untrusted);
}

/*
 * A statement wrote hoplock's tables through SQL (a superuser's UPDATE, a
 * restore's COPY): a batch whose rows were read before gives up.
 */
void
hl_expiries_note_sql_write(void)
{
	if (shared != NULL)
		pg_atomic_fetch_add_u64(&shared->sql_writes, 1);
}

/* How many such statements there were (the worker compares two reads) */
uint64
hl_expiries_sql_writes(void)
{
	return shared == NULL ? 0 : pg_atomic_read_u64(&shared->sql_writes);
}
