/*-------------------------------------------------------------------------
 *
 * shmem.h
 *		hoplock's shared memory (shmem.c): one slot per served database,
 *		with its worker's latch, state, statistics and mailbox; the
 *		launcher's latch and requests; the registry of sessions that bound
 *		terms; and the condition variables hoplock_wait and hoplock_watch
 *		sleep on.  Present only when hoplock is in shared_preload_libraries:
 *		hl_shared is NULL otherwise, and every caller copes.
 *
 *		Locking (LWLocks of the tranche "hoplock"):
 *		- hl_shared->lock: slot allocation (every slot's dboid and
 *		  generation) and the launcher's fields;
 *		- slot->lock: the rest of the slot, its mailbox included, but
 *		  events_pending, an atomic flag;
 *		- hl_shared->seq_lock: which database has which evdbs[] entry;
 *		- evdb->lock: a database's event numbers, and the seqs[] entries
 *		  of its backends;
 *		- wait_locks[]: the partitions of the table of names waited for,
 *		  and the candidates[] entries of the names of each partition.
 *		A process may take a slot's lock while holding hl_shared->lock,
 *		an evdbs[] entry's while holding seq_lock, and the overflow
 *		entry's (evdbs[0]) while holding another entry's, never the other
 *		way round.  The session registry is a plain array
 *		of atomics, one per PGPROC, written only by its own backend.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SHMEM_H
#define HOPLOCK_SHMEM_H

#include "hoplock.h"

#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "storage/latch.h"
#include "storage/lwlock.h"

/* Partitions (and LWLocks) of the table of names waited for */
#define HL_WAIT_PARTITIONS	16
/* Bytes of the server's secret, drawn when shared memory is set up */
#define HL_SECRET_BYTES		32
#define HL_MAX_REQUESTS		16

typedef enum HlMessageKind
{
	HL_MSG_DEADLINE = 1,		/* a term begins or moves its expiry earlier */
	HL_MSG_SESSION_END,			/* a session ended, its bound term did not */
	HL_MSG_READ_AGAIN,			/* a transaction began many terms, the
								 * first lapsing at expires_at: read the
								 * table again */
	HL_MSG_ABANDONED,			/* a candidate stopped waiting after a
								 * handoff wrote it the term of
								 * generation session_start: end it */
	HL_MSG_PREEMPT				/* a candidate waits with preempt => true:
								 * ask the holder to step down to it */
} HlMessageKind;

typedef struct HlMessage
{
	TimestampTz expires_at;		/* DEADLINE */
	TimestampTz session_start;	/* SESSION_END */
	int32		session_pid;	/* SESSION_END */
	uint8		kind;
	uint16		namelen;
	char		name[HL_MAX_NAME_BYTES];
} HlMessage;

typedef enum HlWorkerState
{
	WORKER_FREE = 0,			/* slot unused */
	WORKER_STARTING,			/* launcher registered it */
	WORKER_SCANNING,			/* reading the lease table */
	WORKER_ANNOUNCING,			/* ending lapsed terms */
	WORKER_SLEEPING,			/* waiting for the next expiry */
	WORKER_FAILING,				/* waiting to retry after an error */
	WORKER_ABSENT,				/* exited: hoplock is not installed */
	WORKER_STOPPED				/* exited: asked to stop */
} HlWorkerState;

typedef enum HlStopReason
{
	STOP_NONE = 0,
	STOP_EXTENSION_DROPPED,
	STOP_DATABASE_BUSY,			/* being dropped, copied, renamed or moved:
								 * it must have no sessions */
	STOP_NOT_WANTED				/* hoplock.databases no longer lists it */
} HlStopReason;

/* Per-database counters, for hoplock_stats: atomics, added to by every call */
typedef enum HlCounter
{
	HL_COUNT_TERMS_BEGUN,
	HL_COUNT_CONTENDED,
	HL_COUNT_RENEWALS,
	HL_COUNT_RELEASES,
	HL_COUNT_FORCE_RELEASES,
	HL_COUNT_EXPIRIES,
	HL_COUNT_WAITS,
	HL_COUNT_WAKEUPS,
	HL_COUNT_EVENTS_DELIVERED,
	HL_COUNT_DELIVERIES,
	HL_COUNT_FENCES_REFUSED,
	HL_COUNT_WRITES_REFUSED,
	HL_NCOUNTERS
} HlCounter;

/* What a worker reports of itself, for hoplock_workers */
typedef struct HlWorkerStats
{
	TimestampTz started_at;
	TimestampTz last_wakeup;
	TimestampTz next_expiry;
	int64		tracked;
	int64		announced;
	int64		last_lag;		/* microseconds */
	int64		terminated;		/* sessions ended for holding up a lapsed
								 * term */
	char		last_error[128];	/* while failing: what went wrong */
} HlWorkerStats;

typedef struct HlDbSlot
{
	LWLock	   *lock;			/* protects the fields below but dboid and
								 * generation */
	Oid			dboid;			/* under hl_shared->lock; 0: free */
	uint32		generation;		/* of the worker started in it last; under
								 * hl_shared->lock */
	HlWorkerState state;
	pid_t		pid;
	Latch	   *latch;
	HlStopReason stop;
	TimestampTz stop_requested_at;
	pid_t		busy_pid;		/* the backend running a statement that
								 * needs the database alone */
	TimestampTz next_wakeup;	/* 0 while awake: it drains before sleeping */
	uint64		reloads_read;	/* hl_shared->reloads as of the worker's last
								 * reload: where one the postmaster starts
								 * again with the same HlWorkerArg begins */
	bool		overflowed;
	pg_atomic_uint32 events_pending;	/* events committed since the worker
										 * last looked (no lock) */
	pg_atomic_uint32 terms_changed; /* and among them, others than
									 * "renewed" (no lock) */
	pg_atomic_uint32 keepalives;	/* 0: the database has no keepalive row
									 * (keepalive.c); set under lock */
	pg_atomic_uint32 expiries_trusted;	/* 1: the worker looked for a mass
										 * expiry a restart cut short, and
										 * the expiry set says the rest
										 * (expiries.c) */
	uint64		keepalives_begun;	/* under lock: keepalives begun */
	uint64		head;			/* mailbox: messages [tail, head) */
	uint64		tail;
	HlMessage  *ring;
	HlWorkerStats stats;
	/* hoplock_stats: no lock, atomics; reset under the slot's lock */
	pg_atomic_uint64 counters[HL_NCOUNTERS];
	TimestampTz stats_reset;
} HlDbSlot;

/* A database the launcher would serve but cannot (hoplock_workers) */
#define HL_MAX_UNSERVED		64
typedef struct HlUnserved
{
	Oid			dboid;
	char		reason[160];
} HlUnserved;

/* Per PGPROC: the first event number its running transaction took */
typedef struct HlSeqEntry
{
	Oid			dboid;
	int64		first_seq;		/* 0: none */
} HlSeqEntry;

/*
 * A database's event numbers (events.c): the clock part of the last one
 * taken.  Entries are claimed by the first number a database takes in
 * this server run, under hl_shared->seq_lock, and given to another
 * database when all are taken and this one has none in flight.
 */
typedef struct HlEventDb
{
	LWLock	   *lock;			/* the fields below, and the seqs[] entries
								 * of backends of this database */
	Oid			dboid;			/* 0: free */
	int64		last_c;
	TimestampTz last_used;
} HlEventDb;

/*
 * A name waited for in a database: the first 64 bits of the SHA-256 digest
 * of the server's secret, the database and the name.  Nobody can tell
 * without the secret which names share a key, nor find two that do short
 * of about 2^64 tries (SHA-256 being what it is).
 */
typedef struct HlWaitKey
{
	Oid			dboid;
	uint32		pad;			/* zero */
	uint64		digest;
} HlWaitKey;

/*
 * A candidate (candidates.c): a backend waiting for a lease in
 * hoplock_wait, one entry per PGPROC.  Written by its own backend under the
 * lock of its key's partition of the wait table, read under it.
 */
typedef struct HlCandidate
{
	HlWaitKey	key;			/* key.dboid 0: not a candidate */
	int32		priority;
	int32		pid;
	Oid			roleid;
	uint64		seq;			/* order of arrival, across the server */
	TimestampTz since;
	int64		ttl;			/* its term's, should it be handed one */
	int64		min_hold;		/* ... and that term's min_hold; 0: none */
	bool		session_bound;
	bool		preempt;		/* asks a holder of lower priority to step
								 * down (hoplock_wait's preempt) */
	int32		slots;			/* the slots it waits with; 1: none */
	TimestampTz session_start;	/* MyStartTimestamp */
	int16		valuelen;		/* -1: no value */
	bool		xact_snapshot;	/* waits under REPEATABLE READ or
								 * SERIALIZABLE: cannot take a term handed
								 * to it, so is never picked */
	int64		handed;			/* the generation a handoff wrote for it
								 * (its transaction may not have
								 * committed); 0: none */
	char		value[HL_MAX_NAME_BYTES];
	uint16		namelen;
	uint16		ownerlen;
	char		name[HL_MAX_NAME_BYTES];
	char		owner[HL_MAX_NAME_BYTES];
} HlCandidate;

typedef struct HlShared
{
	LWLock	   *lock;			/* slot allocation, launcher fields */
	uint64		incarnation;	/* new at every start of shared memory */
	pid_t		launcher_pid;
	Latch	   *launcher_latch;
	bool		rescan_all;
	int			nrequests;
	Oid			requests[HL_MAX_REQUESTS];	/* databases that just got the
											 * extension */
	int			nslots;
	int			queue_size;
	int			nprocs;			/* entries of sessions[] and seqs[] */
	pg_atomic_uint64 *sessions; /* per PGPROC: start time of a backend that
								 * bound a term, 0 otherwise */
	LWLock	   *seq_lock;		/* which database has which evdbs[] entry */
	HlSeqEntry *seqs;			/* per PGPROC */
	int			nevdbs;
	HlEventDb  *evdbs;
	int			nunserved;		/* under lock */
	HlUnserved	unserved[HL_MAX_UNSERVED];
	uint8		secret[HL_SECRET_BYTES];	/* random, new at every start of
											 * shared memory: keys the
											 * choice of condition variables */
	LWLock	   *wait_locks[HL_WAIT_PARTITIONS];
	pg_atomic_uint32 nwaiting;	/* backends entered among the waiters of a
								 * name or event stream, across the server */
	HlCandidate *candidates;	/* per PGPROC */
	pg_atomic_uint32 ncandidates;	/* entries in use, across the server */
	pg_atomic_uint64 candidate_seq; /* the last seq handed out */
	pg_atomic_uint64 last_minted;	/* clock part of the last value minted
								 * (branch.c): no two sessions mint one */
	pg_atomic_uint64 reloads;	/* the configuration reloads the launcher
								 * has read (see HlWorkerArg) */
	HlDbSlot	slots[FLEXIBLE_ARRAY_MEMBER];
} HlShared;

extern HlShared *hl_shared;

/*
 * What the launcher hands a worker in bgw_extra.  "reloads": hl_shared's
 * count when the launcher asked for the worker.  A reload the postmaster
 * signals between forking a background worker and the worker setting its
 * SIGHUP handler is lost to it (StartBackgroundWorker ignores SIGHUP until
 * then), and the worker runs on with the settings it was forked with; the
 * launcher reads every reload too, and counts it, so a worker whose count
 * is behind reads the configuration files again.  Nothing makes a worker
 * read an edit no reload was asked for.
 */
typedef struct HlWorkerArg
{
	Oid			dboid;
	uint32		generation;		/* must match its slot's */
	uint64		incarnation;	/* must match hl_shared's */
	uint64		reloads;		/* hl_shared->reloads when it was asked for */
} HlWorkerArg;

extern void hl_shmem_init(void);
extern HlDbSlot *hl_slot_for(Oid dboid);
extern void hl_slot_reset(HlDbSlot *slot);
extern void hl_post(Oid dboid, const HlMessage *msg);
extern bool hl_take(HlDbSlot *slot, HlMessage *msg, bool *overflowed);
extern int	hl_mailbox_room(Oid dboid);
extern bool hl_mailbox_empty(HlDbSlot *slot);
extern void hl_wait_key(text *name, HlWaitKey *key);
extern bool hl_wait_key_try(text *name, HlWaitKey *key);
extern void hl_wait_key_prepare(void);
extern bool hl_names_waited_for(void);
extern ConditionVariable *hl_wait_register(const HlWaitKey *key);
extern void hl_wait_unregister(void);
extern void hl_wake_waiters(const HlWaitKey *key);
extern void hl_wake_all_waiters(Oid dboid);
extern LWLock *hl_wait_lock_for(const HlWaitKey *key);
extern ConditionVariable *hl_watch_register(Oid dboid);
extern void hl_wake_event_readers(Oid dboid, bool terms);
extern void hl_wake_launcher(Oid dboid);
extern void hl_nudge_launcher(void);
extern void hl_stop_worker(Oid dboid, HlStopReason reason);
extern void hl_count(HlCounter counter);
extern void hl_count_by(HlCounter counter, int64 n);
extern int	hl_proc_index(void);
extern void hl_session_register(void);
extern void hl_session_unregister(void);
extern bool hl_session_alive(int32 pid, TimestampTz start);

/* mailbox.c: deadlines posted when the transaction that set them commits */
extern void hl_post_deadline_at_commit(text *name, TimestampTz expires_at);
extern void hl_post_session_end(text *name, int32 pid, TimestampTz start);
extern void hl_post_abandoned(text *name, int64 generation);
extern void hl_post_handed_at_commit(text *name, int64 generation,
									 TimestampTz expires_at);
extern void hl_post_preempt(text *name);
extern void hl_post_read_again(void);
extern void hl_mailbox_init(void);

#endif							/* HOPLOCK_SHMEM_H */
