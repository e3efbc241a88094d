/*-------------------------------------------------------------------------
 *
 * worker.c
 *		The expiry worker: one background worker per database that has
 *		hoplock, started by the launcher.  It sleeps until the next
 *		deadline, then, for each lease due, reads the row and either
 *		announces the lapsed term ("expired", through the same
 *		compare-and-swap as every call) or, if the term was renewed,
 *		schedules it again at its new expiry.  It also ends the
 *		session-bound terms of sessions that are gone, and the sessions
 *		that keep a lapsed term from ending (hoplock.hung_holder_timeout).
 *
 *		Deadlines come from backends through the slot's mailbox (shmem.c,
 *		mailbox.c): a new term, or a renewal that moves the expiry earlier,
 *		posts one at commit and wakes the worker if it would otherwise sleep
 *		past it.  Renewals that move it later post nothing; the worker finds
 *		out when it looks.  The table is read again -- at start (which also
 *		announces terms that lapsed while the server was down), when the
 *		mailbox overflowed or a transaction began more terms than it had
 *		room for, and when the schedule reaches its horizon -- in passes of
 *		SCAN_BATCH rows per round, in name order, between which the worker
 *		goes on announcing what is due: the work of a round is bounded, and
 *		a pass in progress absorbs every overflow that happens meanwhile
 *		(one more pass follows it).  No index on expires_at is needed, so
 *		renewals stay HOT.
 *
 *		A pass costs the worker the whole table, whatever the transaction
 *		that asked for it cost its role: a pass that messages ask for (an
 *		overflow, a "read again") begins no sooner than PASS_PAUSE_FACTOR
 *		times the time the last pass took after that one ended, so that
 *		passes take at most a fraction of the worker's time, however often
 *		they are asked for.
 *
 *		The mailbox is read before each round's snapshot is taken: a
 *		message is posted after its transaction committed, so the round
 *		sees every term it was told of.
 *
 *		A lease being changed right now is looked at again for what its
 *		committed state still has due: a lapsed term a little later, the
 *		later the longer it has been lapsed (10 ms to 1 s), the end of a
 *		hold (min_hold) alike once over, a running term at its expiry, an
 *		ended name never (the change posts what it begins once committed):
 *		a lease held up for long costs the worker almost nothing.
 *
 *		Housekeeping (forgetting old released names, trimming the history)
 *		forgets each name in a subtransaction of its own: a row that cannot
 *		be removed (a user's foreign key references it) is reported and
 *		left, and stops neither the other names nor the trimming.
 *
 *		The loop is worker_spi's: latch, SIGHUP reloads, SIGTERM (die) ends
 *		the worker at once, even inside a commit waiting for a synchronous
 *		standby.  A table locked by maintenance (LOCK TABLE, VACUUM FULL) is
 *		contention, not an error: each round first locks the tables it
 *		works on, without waiting more than a call would, and if it cannot,
 *		leaves its work as it is and looks again BUSY_RETRY_US later, so a
 *		term that lapsed meanwhile is announced as soon as the lock goes.
 *		An error does not end it: it is logged, and the worker tries again
 *		after a pause that doubles up to hoplock.naptime (so a damaged
 *		table is reported, not crashed on in a loop).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "candidates.h"
#include "compat.h"
#include "delivery.h"
#include "floor.h"
#include "history.h"
#include "hoplock.h"
#include "keepalive.h"
#include "lease.h"
#include "massexpiry.h"
#include "schedule.h"
#include "settings.h"
#include "shmem.h"
#include "slotkey.h"
#include "storage.h"
#include "subxact.h"
#include "termlock.h"
#include "workers.h"

#include <signal.h>


#include "access/subtrans.h"
#include "access/xact.h"
#include "commands/async.h"
#include "commands/dbcommands.h"
#include "libpq/pqsignal.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/resowner.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/*
 * Names forgotten, or ended sessions' terms ended, per transaction; and the
 * leases looked at per transaction whatever the time (ANNOUNCE_BATCH).
 * Small: the rows a transaction announces or forgets stay locked until it
 * commits, and an acquire of one of them waits for that (lease.c,
 * ANNOUNCE_WAIT_POLLS).
 */
#define BATCH			64

/*
 * Terms announced per transaction when many are due at once (a mass
 * lapse): at most ANNOUNCE_BATCH, and past BATCH no more once the batch
 * has worked ANNOUNCE_BATCH_US, so that an acquire of one of them never
 * waits for it longer than ANNOUNCE_WAIT_POLLS allow.  Each term is still
 * announced on its own (its row read again under its term lock, its own
 * event, history row and waiters); what a larger batch saves is the
 * commits, with their WAL flushes, and the delivery transactions after
 * them.  A term renewed meanwhile is left out, and the batch locks no row
 * but those of the lapsed terms it announces: renewals of other terms
 * never wait for it.
 */
#define ANNOUNCE_BATCH		512
#define ANNOUNCE_BATCH_US	(20 * 1000)

/* Rows of the table read per round of a pass */
#define SCAN_BATCH		1000

/* A lease being changed right now is looked at again this much later */
#define RETRY_MIN_US	(10 * 1000)
#define RETRY_MAX_US	(1000 * 1000)
/* look again this soon after ending a hung holder: there may be another */
#define AFTER_END_US	(50 * 1000)

/*
 * A table locked by maintenance (LOCK TABLE, VACUUM FULL, CLUSTER...) is
 * contention, not an error: the worker looks again this much later.
 */
#define BUSY_RETRY_US	(20 * 1000)

/*
 * A pass that messages ask for waits, after the end of the last one, this
 * many times the time that one spent reading
 */
#define PASS_PAUSE_FACTOR	9

/* Pause after an error: doubles from this up to hoplock.naptime */
#define ERROR_PAUSE_MIN_MS	1000
#define ERROR_PAUSE_MAX_S	10		/* and hoplock.naptime at most */

/*
 * What a backend asked the worker to do to a lease, kept until done: end
 * the term bound to a session that ended (pid, start: the session's); end
 * a term of generation "start" handed to a candidate that stopped waiting
 * (pid ENDS_ABANDONED); ask the holder to step down for a candidate that
 * waits with preempt => true (pid ENDS_PREEMPT).
 */
#define ENDS_ABANDONED	0
#define ENDS_PREEMPT	(-1)

typedef struct SessionEnd
{
	/* hash key */
	char		name[HL_MAX_NAME_BYTES + 1];
	int32		pid;
	TimestampTz start;
	/* state */
	TimestampTz first_tried;
	TimestampTz next_try;
} SessionEnd;

#define SESSION_END_KEYSIZE	offsetof(SessionEnd, first_tried)

static HlDbSlot *my_slot;
static HlWorkerArg my_arg;
static uint64 my_reloads;		/* hl_shared->reloads as of the last reload
								 * read, or as the launcher asked for this */
static char *my_dbname;
static Schedule *schedule;
static HTAB *session_ends;

/* The extension is no longer installed */
static bool gone = false;

/* The generation floor was brought up to date since the worker started */
static bool floor_refreshed = false;

/* The last round found a table locked by maintenance */
static bool table_busy = false;

/* Memory of one round, reset at the start of each */
static MemoryContext round_context = NULL;

/* Housekeeping: forgetting old released names, trimming the history */
#define HOUSEKEEPING_EVERY_US	(10 * USECS_PER_SEC)
#define PRUNE_BATCH		5000
static TimestampTz next_sweep = 0;
static TimestampTz next_trim = 0;
static bool in_sweep = false;
static bool in_trim = false;
static text *sweep_after = NULL;	/* in TopMemoryContext */

/*
 * Each reads a whole table (the sweep the lease table, the trimming the
 * history), so each runs again only when it may find something to do: a
 * term began or ended since its last whole run began (every change of a
 * term records events, and the transaction that recorded them, if any
 * was other than "renewed", sets the slot's terms_changed once it
 * committed: changes_seen counts the times the worker found it set), a
 * name that run saw released has since passed
 * hoplock.released_retention, or that run left something it could not
 * remove.  Many leases held, none changing: the worker reads neither
 * table.
 *
 * Some writes record no event: a pg_restore's (or a superuser's) own rows
 * of the tables, written after the worker's first run found them empty.
 * So each also runs whole at least every HOUSEKEEPING_WHOLE_US, and the
 * sweep at least every hoplock.released_retention if that is shorter: a
 * name such a write left released is forgotten, and a history it left
 * too long trimmed, however long nothing changes.
 */
#define HOUSEKEEPING_WHOLE_US	(3600 * USECS_PER_SEC)

static uint64 changes_seen = 0;
static bool sweep_clean = false;	/* a whole sweep ran, and ... */
static uint64 sweep_changes = 0;	/* ... began at this changes_seen */
static TimestampTz sweep_waiting = DT_NOEND;	/* the earliest end of a
												 * name it left for later */
static bool sweep_again = false;	/* it left a name it could not forget */
static TimestampTz sweep_began = 0;	/* ... and began then */
static uint64 sweep_run_changes = 0;	/* of the sweep in progress */
static TimestampTz sweep_run_began = 0;
static TimestampTz sweep_run_waiting = DT_NOEND;
static bool sweep_run_again = false;
static bool trim_clean = false; /* a whole trimming ran, and ... */
static uint64 trim_changes = 0; /* ... began at this changes_seen */
static TimestampTz trim_began = 0;	/* ... and began then */
static uint64 trim_run_changes = 0; /* of the trimming in progress */
static TimestampTz trim_run_began = 0;

/*
 * Sending the events (delivery.c): after each round, if a transaction that
 * took event numbers ended since the last look (the slot's flag), or the
 * last batch was full, or it failed; at start, to send what was left.
 * With the NOTIFY queue too full, again DELIVERY_PAUSE_US later.
 */
#define DELIVERY_PAUSE_US		(1000 * 1000)
static bool delivery_due = true;
static TimestampTz delivery_paused_until = 0;
static TimestampTz next_event_prune = 0;

/* Reading the table again */
static bool pass_wanted = true; /* start one at the next round */
static bool pass_asked = false; /* a message asked for one: start it at
								 * pass_not_before */
static TimestampTz pass_not_before = 0;
static int64 pass_spent = 0;	/* microseconds the pass spent reading */
static bool in_pass = false;
static text *pass_after = NULL; /* last name read, in TopMemoryContext */

/* Is this slot still ours (the launcher may have given it to a successor)? */
static bool
slot_is_mine(void)
{
	return hl_shared->incarnation == my_arg.incarnation &&
		my_slot->dboid == my_arg.dboid &&
		my_slot->generation == my_arg.generation;
}

static void
set_state(HlWorkerState state)
{
	LWLockAcquire(my_slot->lock, LW_EXCLUSIVE);
	if (slot_is_mine())
		my_slot->state = state;
	LWLockRelease(my_slot->lock);
}

static void
detach(int code, Datum arg)
{
	bool		mine;

	/*
	 * The expiries it was announcing in bulk go first, while no other
	 * worker can have the slot: the next one finds them from the delivery
	 * row (massexpiry.c).
	 */
	LWLockAcquire(my_slot->lock, LW_SHARED);
	mine = slot_is_mine() && my_slot->pid == MyProcPid;
	LWLockRelease(my_slot->lock);
	if (mine && OidIsValid(MyDatabaseId))
		hl_mass_exit();

	LWLockAcquire(my_slot->lock, LW_EXCLUSIVE);
	if (slot_is_mine() && my_slot->pid == MyProcPid)
	{
		my_slot->pid = 0;
		my_slot->latch = NULL;
		my_slot->next_wakeup = 0;
		if (my_slot->state != WORKER_ABSENT)
			my_slot->state = WORKER_STOPPED;
	}
	LWLockRelease(my_slot->lock);
	ereport(LOG,
			(errmsg("hoplock worker for database \"%s\" stopped", my_dbname)));
}

static TimestampTz
retry_at(TimestampTz now, TimestampTz since)
{
	int64		delay = (now - since) / 4;

	return now + Min(Max(delay, RETRY_MIN_US), RETRY_MAX_US);
}

static void
remember_session_end(const char *name, int namelen, int32 pid,
					 TimestampTz start)
{
	SessionEnd	key;
	SessionEnd *end;
	bool		found;

	memset(&key, 0, sizeof(key));
	memcpy(key.name, name, Min(namelen, HL_MAX_NAME_BYTES));
	key.pid = pid;
	key.start = start;
	end = hash_search(session_ends, &key, HASH_ENTER, &found);
	if (!found)
	{
		end->first_tried = GetCurrentTimestamp();
		end->next_try = 0;
	}
}

/* ---------------------------------------------------------------------
 * Reading the table
 * ---------------------------------------------------------------------
 */

/*
 * Schedule running term "lease" at "when": a term attached to a keepalive
 * by its keepalive, which one entry watches for all of its terms.
 */
static void
schedule_term(const char *name, int namelen, const Lease *lease,
			  TimestampTz when)
{
	char		key[HL_KEEPALIVE_KEY_LEN];

	if (lease->keepalive > 0)
		hl_schedule_add(schedule, key, hl_keepalive_key(lease->keepalive, key),
						when);
	else
		hl_schedule_add(schedule, name, namelen, when);
}

static bool
scan_row(const Lease *lease, void *arg)
{
	/* no hoplock function writes such a name: the table was written to */
	if (VARSIZE_ANY_EXHDR(lease->name) > HL_MAX_NAME_BYTES)
		return true;

	/* a released term's hold, whose end is to be announced */
	if (hl_hold_pending(lease))
	{
		hl_schedule_add(schedule, VARDATA_ANY(lease->name),
						VARSIZE_ANY_EXHDR(lease->name), lease->hold_until);
		return true;
	}
	if (lease->state != LEASE_STATE_HELD)
		return true;

	/* a term bound to a session that is gone */
	if (lease->session_pid != 0 &&
		!hl_session_alive(lease->session_pid, lease->session_start))
		remember_session_end(VARDATA_ANY(lease->name),
							 VARSIZE_ANY_EXHDR(lease->name),
							 lease->session_pid, lease->session_start);

	/*
	 * A term handed to a candidate that is not waiting for it any more, and
	 * has not taken it: its message was lost (a restart, a full mailbox),
	 * or it took the term in a transaction that is still open (the end
	 * then finds the term taken, or waits for that transaction).
	 */
	if (lease->handed_pid != 0 &&
		!hl_candidate_waits(lease->name, lease->handed_pid,
							lease->handed_start))
		remember_session_end(VARDATA_ANY(lease->name),
							 VARSIZE_ANY_EXHDR(lease->name),
							 ENDS_ABANDONED, lease->generation);

	/* the schedule keeps the earliest, whatever order the rows come in */
	schedule_term(VARDATA_ANY(lease->name), VARSIZE_ANY_EXHDR(lease->name),
				  lease, lease->expires_at);
	return true;
}

/* Schedule keepalive "k" (hl_keepalive_scan) at its expiry. */
static void
schedule_keepalive(const Keepalive *k, void *arg)
{
	char		key[HL_KEEPALIVE_KEY_LEN];

	hl_schedule_add(schedule, key, hl_keepalive_key(k->id, key),
					k->expires_at);
}

/* One round of a pass: the next SCAN_BATCH rows. */
static void
pass_round(void)
{
	text	   *last;
	int			rows;
	MemoryContext old;

	set_state(WORKER_SCANNING);
	rows = hl_store_scan(pass_after, SCAN_BATCH, scan_row, NULL, &last);

	old = MemoryContextSwitchTo(TopMemoryContext);
	if (pass_after != NULL)
		pfree(pass_after);
	pass_after = last != NULL ?
		(text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(last)) : NULL;
	MemoryContextSwitchTo(old);

	if (rows < SCAN_BATCH)
	{
		in_pass = false;		/* the end of the table */
		/* and every keepalive, named by a running term or not any more */
		hl_keepalive_scan(schedule_keepalive, NULL);
		/* none at all: term changes need not look for one */
		hl_keepalives_try_clear();
	}
}

/* ---------------------------------------------------------------------
 * Housekeeping
 * ---------------------------------------------------------------------
 */
typedef struct SweepRound
{
	MemoryContext context;		/* where "names" lives */
	TimestampTz cutoff;
	List	   *names;			/* of text *, to forget */
	int64		greatest;		/* their greatest generation */
} SweepRound;

static bool
sweep_row(const Lease *lease, void *arg)
{
	SweepRound *round = (SweepRound *) arg;
	MemoryContext old;

	/*
	 * A name released or lapsed before the cutoff (nor one whose hold's end
	 * is still to be announced, nor a slot's row: it goes with its name's,
	 * all of them together once none is in use -- slotforget.c)
	 */
	if (lease->state == LEASE_STATE_HELD ||
		VARSIZE_ANY_EXHDR(lease->name) > HL_MAX_NAME_BYTES ||
		memchr(VARDATA_ANY(lease->name), HL_SLOT_SEP,
			   VARSIZE_ANY_EXHDR(lease->name)) != NULL)
		return true;
	if (hl_hold_pending(lease))
	{
		/* its hold ends soon: look again then */
		sweep_run_again = true;
		return true;
	}
	if (lease->expires_at >= round->cutoff)
	{
		/* forgotten by a later sweep, due when this one passes retention */
		sweep_run_waiting = Min(sweep_run_waiting, lease->expires_at);
		return true;
	}
	old = MemoryContextSwitchTo(round->context);
	round->names = lappend(round->names,
						   PG_DETOAST_DATUM_COPY(PointerGetDatum(lease->name)));
	round->greatest = Max(round->greatest, lease->generation);
	MemoryContextSwitchTo(old);
	/* a round forgets at most BATCH names: stop reading there */
	return list_length(round->names) < BATCH;
}

/*
 * A name the sweep could not forget (a user's foreign key references its
 * row, say): reported once, then tried again at each sweep without more
 * words, until it goes.  At most UNFORGETTABLE_MAX are remembered; beyond
 * that, each failure is reported.
 */
#define UNFORGETTABLE_MAX	1024
static HTAB *unforgettable = NULL;

typedef struct Unforgettable
{
	char		name[HL_MAX_NAME_BYTES + 1];	/* hash key */
} Unforgettable;

static void
report_unforgettable(text *name, ErrorData *edata)
{
	Unforgettable key;
	bool		found = false;

	if (unforgettable == NULL)
	{
		HASHCTL		ctl;

		memset(&ctl, 0, sizeof(ctl));
		ctl.keysize = sizeof(Unforgettable);
		ctl.entrysize = sizeof(Unforgettable);
		ctl.hcxt = TopMemoryContext;
		unforgettable = hash_create("hoplock unforgettable names", 64, &ctl,
									HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
	}
	memset(&key, 0, sizeof(key));
	memcpy(key.name, VARDATA_ANY(name),
		   Min(VARSIZE_ANY_EXHDR(name), HL_MAX_NAME_BYTES));
	if (hash_get_num_entries(unforgettable) < UNFORGETTABLE_MAX)
		(void) hash_search(unforgettable, &key, HASH_ENTER, &found);
	else
		(void) hash_search(unforgettable, &key, HASH_FIND, &found);
	ereport(found ? DEBUG1 : LOG,
			(errmsg("hoplock worker could not forget lease \"%s\"",
					text_to_cstring(name)),
			 edata->detail != NULL ?
			 errdetail_internal("%s: %s", edata->message, edata->detail) :
			 errdetail_internal("%s", edata->message),
			 errhint("The worker leaves it and tries again at each sweep; the others are forgotten meanwhile.")));
}

/*
 * Forget "name" in a subtransaction of its own: a row that cannot be
 * removed -- a user's foreign key references it, a user's trigger on the
 * table fails -- is reported and left, and the sweep goes on with the
 * others.  (A round forgets at most BATCH names, so its subtransactions
 * stay within what PGPROC caches.)
 */
static void
forget_isolated(text *name, TimestampTz cutoff, int64 floor_raised)
{
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(context);
	PG_TRY();
	{
		bool		done = hl_forget(name, cutoff, floor_raised);

		ReleaseCurrentSubTransaction();
		MemoryContextSwitchTo(context);
		CurrentResourceOwner = owner;
		if (!done)
			sweep_run_again = true;
		if (done && unforgettable != NULL &&
			hash_get_num_entries(unforgettable) > 0)
		{
			Unforgettable key;

			memset(&key, 0, sizeof(key));
			memcpy(key.name, VARDATA_ANY(name),
				   Min(VARSIZE_ANY_EXHDR(name), HL_MAX_NAME_BYTES));
			(void) hash_search(unforgettable, &key, HASH_REMOVE, NULL);
		}
	}
	PG_CATCH();
	{
		ErrorData  *edata;

		edata = hl_subxact_caught(context, owner);
		sweep_run_again = true;
		report_unforgettable(name, edata);
		FreeErrorData(edata);
	}
	PG_END_TRY();
}

/*
 * One round of the sweep, every HOUSEKEEPING_EVERY_US: it forgets the names
 * released or lapsed longer than hoplock.released_retention ago, reading up
 * to SCAN_BATCH rows and forgetting up to BATCH names a round (one raise
 * of the generation floor for the names of a round), each name in a
 * subtransaction of its own, so that one that cannot be forgotten stops
 * neither the others nor the trimming of the history.
 */
static void
sweep_round(TimestampTz now)
{
	SweepRound	round = {0};
	MemoryContext old;
	ListCell   *lc;
	text	   *last;
	int			rows;

	if (!in_sweep)
	{
		if (now < next_sweep)
			return;
		if (hl_released_retention <= 0)
		{
			next_sweep = now + HOUSEKEEPING_EVERY_US;
			return;
		}
		in_sweep = true;
		if (sweep_after != NULL)
			pfree(sweep_after);
		sweep_after = NULL;
		sweep_run_changes = changes_seen;
		sweep_run_began = now;
		sweep_run_waiting = DT_NOEND;
		sweep_run_again = false;
	}

	round.context = CurrentMemoryContext;
	round.cutoff = now - (int64) hl_released_retention * USECS_PER_SEC;
	rows = hl_store_scan(sweep_after, SCAN_BATCH, sweep_row, &round, &last);
	if (round.names != NIL && hl_floor_raise_forgotten(round.greatest))
	{
		foreach(lc, round.names)
		{
			CHECK_FOR_INTERRUPTS();
			forget_isolated((text *) lfirst(lc), round.cutoff,
							round.greatest);
		}
	}
	else if (round.names != NIL)
		sweep_run_again = true; /* the floor is busy: next sweep */
	old = MemoryContextSwitchTo(TopMemoryContext);
	if (sweep_after != NULL)
		pfree(sweep_after);
	sweep_after = last != NULL ?
		(text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(last)) : NULL;
	MemoryContextSwitchTo(old);
	if (rows < SCAN_BATCH && list_length(round.names) < BATCH)
	{
		/* the end of the table */
		in_sweep = false;
		next_sweep = now + HOUSEKEEPING_EVERY_US;
		sweep_clean = true;
		sweep_changes = sweep_run_changes;
		sweep_began = sweep_run_began;
		sweep_waiting = sweep_run_waiting;
		sweep_again = sweep_run_again;
	}
}

/*
 * Is a sweep due now?  When one is not wanted (see changes_seen), the next
 * look is HOUSEKEEPING_EVERY_US later.
 */
static bool
sweep_due(TimestampTz now)
{
	if (in_sweep)
		return true;
	if (now < next_sweep)
		return false;
	if (hl_released_retention > 0)
	{
		int64		retention = (int64) hl_released_retention * USECS_PER_SEC;

		if (!sweep_clean || sweep_again || changes_seen != sweep_changes ||
			(sweep_waiting != DT_NOEND && sweep_waiting < now - retention) ||
			now - sweep_began >= Min(retention, HOUSEKEEPING_WHOLE_US))
			return true;
	}
	next_sweep = now + HOUSEKEEPING_EVERY_US;
	return false;
}

/*
 * One round of trimming the history to hoplock.history_size, every
 * HOUSEKEEPING_EVERY_US, PRUNE_BATCH rows a round.  Apart from the sweep:
 * neither waits for the other to finish.
 */
static void
trim_round(TimestampTz now)
{
	bool		left = false;

	if (!in_trim)
	{
		if (now < next_trim)
			return;
		in_trim = true;
		trim_run_changes = changes_seen;
		trim_run_began = now;
	}
	if (hl_history_size <= 0 ||
		hl_history_prune(PRUNE_BATCH, &left) < PRUNE_BATCH)
	{
		in_trim = false;
		next_trim = now + HOUSEKEEPING_EVERY_US;
		/* rows it could not drop: tried again at each trimming */
		trim_clean = !left;
		trim_changes = trim_run_changes;
		trim_began = trim_run_began;
	}
}

/*
 * Is a trimming due now?  When one is not wanted (see changes_seen), the
 * next look is HOUSEKEEPING_EVERY_US later.
 */
static bool
trim_due(TimestampTz now)
{
	if (in_trim)
		return true;
	if (now < next_trim)
		return false;
	if (!trim_clean || changes_seen != trim_changes ||
		now - trim_began >= HOUSEKEEPING_WHOLE_US)
		return true;
	next_trim = now + HOUSEKEEPING_EVERY_US;
	return false;
}

/*
 * Lock the lease table and the keepalive table (and, for announcing, the
 * history, the event log and the event sequence) for the rest of the
 * transaction, as every call does, waiting no more than a call would
 * (hl_open); what the worker does next then finds them locked already.
 * Returns false, leaving the round's work for a little later, if maintenance holds or awaits a conflicting lock (LOCK
 * TABLE, VACUUM FULL, CLUSTER, REINDEX...): that is contention, not an
 * error, in every path of the worker.
 */
static bool
lock_tables(bool announcing)
{
	HlRelation	rel;

	if (!hl_open(HL_REL_LEASE, RowExclusiveLock, false, &rel))
		return false;
	hl_close(&rel, true);

	/*
	 * Every reader of a term attached to a keepalive reads the keepalive
	 * too, and would raise, not contend, if its table were locked: held
	 * for the round, later openings find the lock taken.
	 */
	if (!hl_open(HL_REL_KEEPALIVE, AccessShareLock, false, &rel))
		return false;
	hl_close(&rel, true);
	if (!announcing)
		return true;
	if (hl_history_size > 0)
	{
		if (!hl_open(HL_REL_HISTORY, RowExclusiveLock, false, &rel))
			return false;
		hl_close(&rel, true);
	}
	/* (an announcement's event would otherwise raise, not contend) */
	if (!hl_lock_table(HL_REL_EVENT, RowExclusiveLock, NULL, NULL))
		return false;
	return hl_history_lock();
}

/* ---------------------------------------------------------------------
 * One round: read the mailbox, look at what is due
 * ---------------------------------------------------------------------
 */

/*
 * Take every message from the mailbox into "msgs" (palloc'd in the current
 * context); returns how many.
 */
static int
read_mailbox(HlMessage **msgs)
{
	HlMessage	msg;
	bool		overflowed = false;
	int			n = 0;
	int			max = 16;

	*msgs = palloc(max * sizeof(HlMessage));
	while (hl_take(my_slot, &msg, &overflowed))
	{
		if (n == max)
		{
			max *= 2;
			*msgs = repalloc(*msgs, max * sizeof(HlMessage));
		}
		(*msgs)[n++] = msg;
	}
	if (overflowed)
		pass_asked = true;
	return n;
}

static void
apply_messages(HlMessage *msgs, int n)
{
	for (int i = 0; i < n; i++)
	{
		switch (msgs[i].kind)
		{
			case HL_MSG_DEADLINE:
				hl_schedule_add(schedule, msgs[i].name, msgs[i].namelen,
								msgs[i].expires_at);
				break;
			case HL_MSG_SESSION_END:
				remember_session_end(msgs[i].name, msgs[i].namelen,
									 msgs[i].session_pid,
									 msgs[i].session_start);
				break;
			case HL_MSG_READ_AGAIN:
				/* read before taking the round's snapshot: the pass sees them */
				pass_asked = true;
				break;
			case HL_MSG_ABANDONED:
				remember_session_end(msgs[i].name, msgs[i].namelen,
									 ENDS_ABANDONED, msgs[i].session_start);
				break;
			case HL_MSG_PREEMPT:
				remember_session_end(msgs[i].name, msgs[i].namelen,
									 ENDS_PREEMPT, 0);
				break;
		}
	}
}

/*
 * May the worker end the session of role "session_role" for holding up a
 * term that role "term_role" began?  Only if the session could have acted
 * for the term itself: its role has the privileges of the term's role.
 * Another role's SECURITY DEFINER code (a trigger of a table the session
 * writes, say) can fence or renew its own term inside a victim's
 * transaction; ending the victim then would let any role end other roles'
 * sessions, which pg_terminate_backend does not allow it.  Nor is a
 * superuser's session ended for a term a non-superuser began.  Processes
 * without a role (autovacuum) are never ended.
 */
static bool
may_end_holder(Oid session_role, Oid term_role)
{
	if (!OidIsValid(session_role) || !OidIsValid(term_role))
		return false;
	if (superuser_arg(session_role) && !superuser_arg(term_role))
		return false;
	return has_privs_of_role(session_role, term_role);
}

/*
 * Session "pid" holds up "what" (for the log: a lease, or an owner's
 * keepalive), of role "owner_roleid", lapsed at "expires_at", longer than
 * hoplock.hung_holder_timeout after: end it, if it may (may_end_holder).
 * "fence": it holds a fence, not an uncommitted change ("change": what).
 */
static bool
end_holder(int pid, const char *what, const char *change, Oid owner_roleid,
		   TimestampTz expires_at, bool fence)
{
	PGPROC	   *proc;

	if (pid == 0 || pid == MyProcPid)
		return false;
	proc = BackendPidGetProc(pid);
	if (proc == NULL)
		return false;
	if (!may_end_holder(proc->roleId, owner_roleid))
	{
		ereport(LOG,
				(errmsg("hoplock: not ending process %d, which holds up %s after it lapsed",
						pid, what),
				 errdetail("The role of its session does not have the privileges of the role that began the term.")));
		return false;
	}

	ereport(LOG,
			(errmsg("hoplock: terminating process %d, which holds up %s after it lapsed",
					pid, what),
			 fence ?
			 errdetail("It has held a fence of the term since before it lapsed at %s, longer than \"hoplock.hung_holder_timeout\" (%d ms) after.",
					   timestamptz_to_str(expires_at), hl_hung_holder_timeout) :
			 errdetail("Its transaction has left %s uncommitted for longer than \"hoplock.hung_holder_timeout\" (%d ms) after it lapsed at %s.",
					   change, hl_hung_holder_timeout,
					   timestamptz_to_str(expires_at))));
	if (kill(pid, SIGTERM) != 0)
		return false;
	LWLockAcquire(my_slot->lock, LW_EXCLUSIVE);
	if (slot_is_mine())
		my_slot->stats.terminated++;
	LWLockRelease(my_slot->lock);
	return true;
}

/*
 * A lapsed term is held up by a session -- a fence of it, or an
 * uncommitted renewal of it, in a transaction that does not end -- for
 * longer than hoplock.hung_holder_timeout after it lapsed: end that
 * session, so that the ttl bounds a hung holder, if it may
 * (may_end_holder).  A term change in flight (a new term not yet
 * committed) is left alone.
 */
static bool
end_hung_holder(text *name, const Lease *lease, TimestampTz now)
{
	HlBlockerKind kind;
	int			pid;

	if (hl_hung_holder_timeout <= 0 ||
		now - lease->expires_at < (int64) hl_hung_holder_timeout * 1000)
		return false;
	pid = hl_lease_blocker(name, &kind);
	if (kind != BLOCKER_FENCE && kind != BLOCKER_ROW_CHANGE)
		return false;
	return end_holder(pid,
					  psprintf("lease %s (generation " INT64_FORMAT ")",
							   quote_literal_cstr(text_to_cstring(name)),
							   lease->generation),
					  "a change of the term", lease->owner_roleid, lease->expires_at,
					  kind == BLOCKER_FENCE);
}

/*
 * A lapsed keepalive "k" is held up by transaction "xid" (a renewal of it,
 * uncommitted; it may be a subtransaction): every term attached to it is
 * in flight to the lease core until that ends.  End its session as a hung
 * holder of a term is ended (end_hung_holder).
 */
static bool
end_keepalive_holder(const Keepalive *k, TransactionId xid, TimestampTz now)
{
	if (hl_hung_holder_timeout <= 0 ||
		now - k->expires_at < (int64) hl_hung_holder_timeout * 1000)
		return false;
	return end_holder(BackendXidGetPid(SubTransGetTopmostTransaction(xid)),
					  psprintf("the keepalive of owner %s",
							   quote_literal_cstr(text_to_cstring(k->owner))),
					  "a write of the keepalive", k->owner_roleid, k->expires_at, false);
}

/*
 * When to look again at a lapsed term that a session holds up, "since" the
 * moment the term lapsed: at the backoff of retry_at, but no later than
 * the moment hoplock.hung_holder_timeout lets the holder be ended, and
 * soon after one was ended ("ended"), as another session may hold the
 * term up too (a leader's fence, and its renewal on another connection).
 */
static TimestampTz
held_up_retry_at(TimestampTz now, TimestampTz since, bool ended)
{
	TimestampTz next = retry_at(now, since);
	TimestampTz due;

	if (ended)
		return Min(next, now + AFTER_END_US);
	if (hl_hung_holder_timeout <= 0)
		return next;
	due = since + (int64) hl_hung_holder_timeout * 1000;
	return due > now ? Min(next, due) : next;
}

/*
 * An announced term whose fence is still held keeps the lease from changing
 * hands: look again when hoplock.hung_holder_timeout is up, and end the
 * fencing session if it still holds it then.
 */
static void
watch_fence(const char *name, int namelen, text *tname, const Lease *lease,
			TimestampTz now)
{
	int			fence_pid;
	int			change_pid;
	TimestampTz due;

	if (hl_hung_holder_timeout <= 0)
		return;
	hl_term_lock_holders(tname, &fence_pid, &change_pid);
	if (fence_pid == 0)
		return;
	due = lease->expires_at + (int64) hl_hung_holder_timeout * 1000;
	if (now >= due)
		due = held_up_retry_at(now, lease->expires_at,
							   end_hung_holder(tname, lease, now));
	hl_schedule_add(schedule, name, namelen, due);
}

/* Whether the last look_at() found a row of its name */
static bool last_look_found = false;

/* Announce one lease if its term lapsed; otherwise schedule it again. */
static LeaseOutcome
look_at(const char *name, int namelen, int64 recorded, int64 *announced,
		int64 *lag)
{
	LeaseRequest req = {0};
	Lease		result;
	bool		found;
	LeaseOutcome outcome;
	TimestampTz now;

	req.op = LEASE_OP_EXPIRE;
	req.fn = "hoplock worker";
	req.name = cstring_to_text_with_len(name, namelen);
	req.busy_is_contention = true;
	req.expired_recorded = recorded;
	outcome = hl_lease_cas(&req, &result, &found);
	last_look_found = found;
	now = GetCurrentTimestamp();

	if (outcome == LEASE_DONE)
	{
		/* (or it announced the end of a released term's hold) */
		if (result.state != LEASE_STATE_RELEASED)
		{
			(*announced)++;
			*lag = now - result.expires_at;
			watch_fence(name, namelen, req.name, &result, now);
		}
	}
	else if (outcome == LEASE_CONTENDED)
	{
		/*
		 * Being changed right now, or a table is locked: look again at what
		 * the committed state still has due.  (What the change begins, it
		 * posts itself once committed.)  A lapsed term, later the longer it
		 * has been lapsed; so the end of a hold (min_hold), once over, and
		 * not before; a running term at its expiry; a name ended and
		 * announced, never.  So a change left open costs the worker almost
		 * nothing, however long it lasts.
		 */
		if (!found)
			hl_schedule_add(schedule, name, namelen, retry_at(now, now));
		else if (result.state == LEASE_STATE_HELD && result.expires_at <= now)
			hl_schedule_add(schedule, name, namelen,
							held_up_retry_at(now, result.expires_at,
											 end_hung_holder(req.name, &result,
															 now)));
		else if (result.state == LEASE_STATE_HELD)
			hl_schedule_add(schedule, name, namelen, result.expires_at);
		else if (hl_hold_pending(&result))
			hl_schedule_add(schedule, name, namelen,
							Max(retry_at(now, Min(now, result.hold_until)),
								result.hold_until));
	}
	else if (found && result.state == LEASE_STATE_HELD)
		schedule_term(name, namelen, &result, result.expires_at);
	else if (found && hl_hold_pending(&result))
		hl_schedule_add(schedule, name, namelen, result.hold_until);
	else if (found && result.state == LEASE_STATE_EXPIRED)
		watch_fence(name, namelen, req.name, &result, now);
	return outcome;
}

/* A keepalive was deleted: see at the next round whether any is left */
static bool keepalive_deleted = false;

/* The names of the terms attached to one keepalive (collect_attached) */
typedef struct Attached
{
	int64		id;
	int			limit;			/* the room left in the round's batch */
	char	  **names;
	int		   *lens;
	int			n;
} Attached;

static bool
collect_attached(const Lease *lease, void *arg)
{
	Attached   *a = (Attached *) arg;

	if (lease->keepalive != a->id || lease->state != LEASE_STATE_HELD)
		return true;
	if (a->n == a->limit)
		return false;			/* (n + 1: more are left) */
	a->lens[a->n] = VARSIZE_ANY_EXHDR(lease->name);
	a->names[a->n] = MemoryContextAlloc(round_context, a->lens[a->n]);
	memcpy(a->names[a->n], VARDATA_ANY(lease->name), a->lens[a->n]);
	a->n++;
	return true;
}

/*
 * Collect into "a" the names of up to "room" (at least one) terms attached
 * to keepalive "id".  Returns what hl_store_scan_keepalive returns (below
 * zero: its index is locked), or -1 if the lease table is locked.
 */
static int
collect_keepalive_terms(int64 id, int room, Attached *a)
{
	HlRelation	lease_rel;
	Snapshot	snapshot;
	int			rows;

	if (!hl_open(HL_REL_LEASE, AccessShareLock, false, &lease_rel))
		return -1;
	a->id = id;
	a->limit = Max(room, 1);
	a->names = MemoryContextAlloc(round_context, sizeof(char *) * a->limit);
	a->lens = MemoryContextAlloc(round_context, sizeof(int) * a->limit);
	snapshot = RegisterSnapshot(GetLatestSnapshot());
	rows = hl_store_scan_keepalive(&lease_rel, id, false, snapshot,
								   collect_attached, a);
	UnregisterSnapshot(snapshot);
	hl_close(&lease_rel, false);
	return rows;
}

/*
 * Keepalive "id" is due (key: its schedule key) and its row is gone: a
 * superuser deleted it, or a restore brought its terms without it.  The
 * terms still attached to it run on their own expires_at (as every reader
 * takes it, hl_keepalive_apply): look at each by name, announcing those
 * lapsed and scheduling the others, at most "room" (at least one) in this
 * round.  Returns how many it looked at.
 */
static int
look_at_orphans(int64 id, const char *key, int keylen, int room,
				int64 *announced, int64 *lag)
{
	TimestampTz now = GetCurrentTimestamp();
	Attached	a = {0};
	int			rows;

	rows = collect_keepalive_terms(id, room, &a);
	if (rows < 0 || (rows > 0 && a.n == a.limit))
		hl_schedule_add(schedule, key, keylen,
						rows < 0 ? retry_at(now, now) : now);
	for (int i = 0; i < a.n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		(void) look_at(a.names[i], a.lens[i], 0, announced, lag);
	}
	return Max(a.n, 1);
}

/*
 * Keepalive "id" is due (key: its schedule key).  Still running: schedule
 * it again.  Lapsed: write its row first, so that a renewal racing this
 * finds it being changed (and one that wrote first makes this wait), then
 * announce each of its terms as look_at announces any term -- each its
 * own "expired" event, its waiters woken -- and delete it once none is
 * left.  At most "room" terms (at least one) in this round, whose
 * transaction announces at most ANNOUNCE_BATCH terms; past the first "sure"
 * ones, none once it is "stop_at" (the round's batch has worked long
 * enough): the rest at the next round.  Returns how many it looked at.
 */
static int
look_at_keepalive(int64 id, const char *key, int keylen, int room, int sure,
				  TimestampTz stop_at, int64 *announced, int64 *lag)
{
	HlRelation	rel;
	SnapshotData dirty;
	Keepalive	k;
	TimestampTz now = GetCurrentTimestamp();
	Attached	a = {0};
	int			left = 0;
	int			rows;
	int			i;
	bool		more;

	if (!hl_open(HL_REL_KEEPALIVE, RowExclusiveLock, false, &rel))
	{
		hl_schedule_add(schedule, key, keylen, retry_at(now, now));
		return 1;
	}
	InitDirtySnapshot(dirty);
	hl_keepalive_fetch(&rel, id, &dirty, &k);
	now = GetCurrentTimestamp();
	if (!k.found)
	{
		hl_close(&rel, false);
		return look_at_orphans(id, key, keylen, room, announced, lag);
	}
	if (now < k.expires_at)
	{
		hl_close(&rel, false);
		hl_schedule_add(schedule, key, keylen, k.expires_at);
		return 1;
	}
	if (TransactionIdIsValid(k.inflight) ||
		hl_keepalive_update(&rel, &k) != TM_Ok)
	{
		/* a renewal left uncommitted holds up every term of it */
		bool		ended = TransactionIdIsValid(k.inflight) &&
			end_keepalive_holder(&k, k.inflight, now);

		hl_close(&rel, false);
		hl_schedule_add(schedule, key, keylen,
						held_up_retry_at(now, k.expires_at, ended));
		return 1;
	}

	/* its terms, a batch at a time */
	rows = collect_keepalive_terms(id, room, &a);
	if (rows < 0)
	{
		/* a table or its index is locked: contention */
		hl_close(&rel, true);
		hl_schedule_add(schedule, key, keylen, retry_at(now, k.expires_at));
		return 1;
	}
	more = rows > 0 && a.n == a.limit;

	for (i = 0; i < a.n; i++)
	{
		CHECK_FOR_INTERRUPTS();
		if (i >= sure && GetCurrentTimestamp() >= stop_at)
		{
			more = true;
			break;
		}
		if (look_at(a.names[i], a.lens[i], 0, announced, lag) ==
			LEASE_CONTENDED)
			left++;
	}
	if (left == 0 && !more)
	{
		(void) hl_keepalive_delete(&rel, &k.tid);
		keepalive_deleted = true;
	}
	else
		hl_schedule_add(schedule, key, keylen,
						more && left == 0 ? now : retry_at(now, k.expires_at));
	hl_close(&rel, true);
	return Max(i, 1);
}

/*
 * Do what backends asked (SessionEnd), those due for a try: end the terms
 * of sessions that ended and of handed terms nobody took, ask holders to
 * step down for preempting candidates; keep those still contended, to try
 * again later.  Returns the time of the next try
 * (DT_NOEND if none is left).
 */
static TimestampTz
end_sessions(void)
{
	HASH_SEQ_STATUS status;
	SessionEnd *end;
	TimestampTz next = DT_NOEND;
	int			n = 0;

	hash_seq_init(&status, session_ends);
	while ((end = hash_seq_search(&status)) != NULL)
	{
		LeaseRequest req = {0};
		Lease		result;
		bool		found;
		TimestampTz now = GetCurrentTimestamp();

		if (end->next_try > now || n >= BATCH)
		{
			next = Min(next, Max(end->next_try, now));
			continue;
		}
		n++;
		req.fn = "hoplock worker";
		req.name = cstring_to_text(end->name);
		if (end->pid == ENDS_ABANDONED)
		{
			req.op = LEASE_OP_ABANDONED;
			req.generation = end->start;
		}
		else if (end->pid == ENDS_PREEMPT)
		{
			req.op = LEASE_OP_STEP_DOWN;
			req.preempt = true;
		}
		else
		{
			req.op = LEASE_OP_SESSION_END;
			req.session_pid = end->pid;
			req.session_start = end->start;
		}
		req.busy_is_contention = true;
		if (hl_lease_cas(&req, &result, &found) == LEASE_CONTENDED)
		{
			end->next_try = retry_at(now, end->first_tried);
			next = Min(next, end->next_try);
		}
		else
			(void) hash_search(session_ends, end, HASH_REMOVE, NULL);
	}
	return next;
}

/* Should the table be read again now? */
static bool
horizon_reached(TimestampTz now)
{
	TimestampTz horizon = hl_schedule_horizon(schedule);
	TimestampTz next;

	/*
	 * Only once everything up to the horizon is done: leases due exactly at
	 * the horizon may share it with some that were left out, and a pass
	 * before they are done would only find them again.
	 */
	return horizon <= now &&
		(!hl_schedule_next(schedule, &next) || next > horizon);
}

/*
 * One round of a housekeeping step, in a transaction of its own.  A step
 * that works on the lease table first locks it (lock_tables).
 */
static void
housekeeping(void (*step) (TimestampTz now), const char *activity,
			 bool lease_table, bool *gone)
{
	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, activity);
	if (!hl_extension_installed())
		*gone = true;
	else if (lease_table && !lock_tables(false))
		table_busy = true;
	else
		step(GetCurrentTimestamp());
	PopActiveSnapshot();
	CommitTransactionCommand();
}

/*
 * Announcements still due after this round's batch (a mass lapse), and
 * since when: housekeeping waits for them, HOUSEKEEPING_DEFER_US at most
 */
static bool due_left = false;
static TimestampTz due_left_since = 0;

#define HOUSEKEEPING_DEFER_US	(1 * USECS_PER_SEC)

/*
 * May housekeeping (the trimming, the sweep) run after this round?  Not
 * while terms are still due from a mass lapse: a round of it (thousands of
 * rows) would delay their events.  But not put off for more than
 * HOUSEKEEPING_DEFER_US, however long lapses keep coming.
 */
static bool
may_keep_house(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (!due_left)
	{
		due_left_since = 0;
		return true;
	}
	if (due_left_since == 0)
		due_left_since = now;
	return now - due_left_since >= HOUSEKEEPING_DEFER_US;
}

/*
 * A name of a mass expiry's batch, or of one a restart cut short: its row
 * written the usual way (with no event: the batch's is in the log).  1:
 * done; 0: being changed, look again later; -1: the name has no row.
 */
static int
catch_up_look(const char *name, int namelen, int64 recorded, void *arg)
{
	int64		ignored = 0;
	int64		lag = -1;

	if (look_at(name, namelen, recorded, &ignored, &lag) == LEASE_CONTENDED)
		return 0;
	return last_look_found ? 1 : -1;
}

/* A name a batch leaves to the usual way: due now */
static void
left_to_look_at(const char *name, int namelen, void *arg)
{
	hl_schedule_add(schedule, name, namelen, *(TimestampTz *) arg);
}

/*
 * A batch that kept too few of the names it took (their rows being
 * changed, or not running terms on their own expiry: holds ending, say)
 * leaves them to the usual way, whose looks again back off; no batch is
 * tried again before this, or it would take them all again every round.
 */
#define MASS_RETRY_PAUSE_US		USECS_PER_SEC
static TimestampTz mass_paused_until = 0;

/*
 * Will many terms lapse together soon: HL_MASS_EXPIRY_MIN of them within
 * HL_MASS_EXPIRY_SPREAD of the next deadline?  Then in *first that one.
 */
static bool
mass_expiry_coming(TimestampTz *first)
{
	return !hl_mass_busy() && GetCurrentTimestamp() >= mass_paused_until &&
		hl_schedule_next(schedule, first) &&
		hl_schedule_count_due(schedule, *first + HL_MASS_EXPIRY_SPREAD,
							  HL_MASS_EXPIRY_MIN) >= HL_MASS_EXPIRY_MIN;
}

/*
 * Many terms lapsing together, announced in bulk (massexpiry.c): their
 * rows are read HL_MASS_EXPIRY_AHEAD before the first of them lapses,
 * and once the last has, the batch records their events.  Every name
 * taken from the schedule that the batch does not keep goes back to it,
 * due as before, for the usual way.  Returns true if the batch has work
 * left for the next round (its commit, then its rows).
 */
static bool
announce_in_bulk(TimestampTz now, int64 *announced, int64 *lag)
{
	TimestampTz first;
	TimestampTz due;

	if (!hl_mass_watching(&due) && mass_expiry_coming(&first) &&
		first <= now + HL_MASS_EXPIRY_AHEAD)
	{
		int			room = hl_mass_room();
		char	  **names = palloc(room * sizeof(char *));
		int		   *lens = palloc(room * sizeof(int));
		TimestampTz *whens = palloc(room * sizeof(TimestampTz));
		bool	   *left_out = palloc(room * sizeof(bool));
		int			n = 0;
		int			nkeys = 0;
		char		name[HL_MAX_NAME_BYTES + 1];
		int			namelen;
		TimestampTz when;

		while (n + nkeys < room &&
			   hl_schedule_take_due(schedule, first + HL_MASS_EXPIRY_SPREAD,
									name, &namelen, &when))
		{
			int64		keepalive;
			int			at;

			/* a keepalive's terms, the usual way (look_at_keepalive) */
			if (hl_keepalive_parse_key(name, namelen, &keepalive))
				at = room - 1 - nkeys++;
			else
				at = n++;
			names[at] = pnstrdup(name, namelen);
			lens[at] = namelen;
			whens[at] = when;
			left_out[at] = true;
		}
		if (hl_mass_watch(names, lens, n, first + HL_MASS_EXPIRY_SPREAD,
						  left_out) < HL_MASS_EXPIRY_MIN)
			mass_paused_until = GetCurrentTimestamp() + MASS_RETRY_PAUSE_US;
		for (int i = 0; i < n; i++)
			if (left_out[i])
				hl_schedule_add(schedule, names[i], lens[i], whens[i]);
		for (int i = room - nkeys; i < room; i++)
			hl_schedule_add(schedule, names[i], lens[i], whens[i]);
	}
	if (hl_mass_watching(&due))
	{
		int64		batch_lag = -1;
		int			recorded;

		now = GetCurrentTimestamp();
		if (now < due)
			return false;		/* sleep_until_due wakes the worker then */
		recorded = hl_mass_record(left_to_look_at, &now, &batch_lag);
		*announced += recorded;
		if (recorded > 0)
			*lag = Max(*lag, batch_lag);
		return recorded > 0;
	}
	return false;
}

/*
 * The round's work on the lease table, which lock_tables() locked: a round
 * of the pass in progress, the leases due (ANNOUNCE_BATCH at most, in
 * the order of their deadlines), the ended sessions due.  Returns true if
 * more is due right now; sets *next_session.
 */
static bool
announce_round(int64 *announced, int64 *lag, TimestampTz *next_session)
{
	char		name[HL_MAX_NAME_BYTES + 1];
	int			namelen;
	TimestampTz when;
	TimestampTz now;
	TimestampTz stop_at;
	int			n = 0;
	bool		more;
	bool		bulk_more = false;

	now = GetCurrentTimestamp();
	if (!in_pass &&
		(pass_wanted || (pass_asked && now >= pass_not_before) ||
		 horizon_reached(now)))
	{
		in_pass = true;
		pass_wanted = pass_asked = false;
		pass_spent = 0;
		if (pass_after != NULL)
			pfree(pass_after);
		pass_after = NULL;
		hl_schedule_reopen(schedule);
	}
	if (in_pass)
	{
		TimestampTz start = now;

		pass_round();
		now = GetCurrentTimestamp();
		pass_spent += now - start;
		if (!in_pass)
			pass_not_before = now + PASS_PAUSE_FACTOR * pass_spent;
	}

	/* the last keepalive deleted in an earlier round: maybe none is left */
	if (keepalive_deleted)
	{
		keepalive_deleted = false;
		hl_keepalives_try_clear();
	}

	set_state(WORKER_ANNOUNCING);
	now = GetCurrentTimestamp();

	/* a mass expiry's rows, or a mass expiry (massexpiry.c) */
	if (hl_mass_catch_up(ANNOUNCE_BATCH, catch_up_look, NULL))
		bulk_more = true;
	else if (announce_in_bulk(now, announced, lag))
		bulk_more = true;

	stop_at = now + ANNOUNCE_BATCH_US;
	while (n < ANNOUNCE_BATCH &&
		   (n < BATCH || GetCurrentTimestamp() < stop_at) &&
		   hl_schedule_take_due(schedule, now, name, &namelen, &when))
	{
		int64		keepalive;

		CHECK_FOR_INTERRUPTS();
		if (hl_keepalive_parse_key(name, namelen, &keepalive))
			n += look_at_keepalive(keepalive, name, namelen,
								   ANNOUNCE_BATCH - n, Max(BATCH - n, 1),
								   stop_at, announced, lag);
		else
		{
			(void) look_at(name, namelen, 0, announced, lag);
			n++;
		}
	}
	due_left = n >= ANNOUNCE_BATCH ||
		(n >= BATCH && GetCurrentTimestamp() >= stop_at);
	more = due_left || bulk_more || in_pass || pass_wanted ||
		(pass_asked && now >= pass_not_before);
	if (hash_get_num_entries(session_ends) > 0)
		*next_session = end_sessions();
	return more;
}

/*
 * Send the events committed since the last batch, if any, and drop the
 * old ones now and then: batch after batch while there are more to drop,
 * so that the log is kept to hoplock.event_retention however fast events
 * come (a session can record some 20,000 a second).  Returns true if more
 * is due right now.
 */
static bool
deliver_events(void)
{
	TimestampTz now = GetCurrentTimestamp();

	if (now >= next_event_prune)
	{
		/* (an error in it waits for the next round) */
		next_event_prune = now + HOUSEKEEPING_EVERY_US;
		if (hl_prune_events())
			next_event_prune = now;
	}
	if (pg_atomic_exchange_u32(&my_slot->events_pending, 0) != 0)
		delivery_due = true;
	/* (a renewal, even announced, begins and ends no term) */
	if (pg_atomic_exchange_u32(&my_slot->terms_changed, 0) != 0)
		changes_seen++;
	if (!delivery_due || now < delivery_paused_until)
		return false;
	/* (stays due if it fails: the error pause, then again) */
	switch (hl_deliver())
	{
		case HL_DELIVERY_DONE:
			delivery_due = false;
			return false;
		case HL_DELIVERY_MORE:
			return true;
		case HL_DELIVERY_PAUSED:
			delivery_paused_until = now + DELIVERY_PAUSE_US;
			return false;
		case HL_DELIVERY_BUSY:
			delivery_paused_until = now + BUSY_RETRY_US;
			return false;
	}
	return false;
}

/*
 * One transaction's worth of work.  Returns true if more is due right now;
 * sets *gone if the extension is no longer installed, *next_session to the
 * time the next ended session is due for a try.
 */
static bool
run_round(bool *gone, TimestampTz *next_session)
{
	MemoryContext old;
	HlMessage  *msgs;
	int			nmsgs;
	int64		announced = 0;
	int64		lag = -1;
	bool		more = false;
	int			bulk;

	*next_session = DT_NOEND;
	table_busy = false;
	due_left = false;
	MemoryContextReset(round_context);
	old = MemoryContextSwitchTo(round_context);
	nmsgs = read_mailbox(&msgs);

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	pgstat_report_activity(STATE_RUNNING, "announcing lease expiries");

	if (!hl_extension_installed())
		*gone = true;
	else
	{
		/* after a promotion, say: record the timeline before any term does */
		if (!floor_refreshed)
			floor_refreshed = hl_floor_refresh();
		apply_messages(msgs, nmsgs);
		if (!lock_tables(true))
			table_busy = true;
		else
		{
			more = hl_mass_recover(catch_up_look, NULL);
			more = announce_round(&announced, &lag, next_session) || more;
		}
	}

	PopActiveSnapshot();
	CommitTransactionCommand();
	bulk = hl_mass_committed();
	hl_mass_caught_up();
	hl_notify_after_commit();

	/*
	 * The events committed meanwhile, this round's announcements among
	 * them; all of a mass expiry's at once, before its rows are written.
	 */
	if (!*gone)
	{
		bool		deliver_more = deliver_events();

		for (int i = 0; deliver_more && i < bulk / HL_DELIVERY_BATCH + 1; i++)
			deliver_more = deliver_events();
		more = deliver_more || more;
	}

	LWLockAcquire(my_slot->lock, LW_EXCLUSIVE);
	if (slot_is_mine())
	{
		my_slot->stats.last_error[0] = '\0';
		my_slot->stats.announced += announced;
		if (lag >= 0)
			my_slot->stats.last_lag = lag;
		my_slot->stats.tracked = hl_schedule_count(schedule);
	}
	LWLockRelease(my_slot->lock);

	/*
	 * Housekeeping in transactions of its own, so that the rows announced
	 * above are not kept locked while it runs: the trimming, then the sweep.
	 */
	if (!*gone && !table_busy && may_keep_house() &&
		trim_due(GetCurrentTimestamp()))
		housekeeping(trim_round, "hoplock housekeeping: trimming the history",
					 false, gone);
	if (!*gone && !table_busy && may_keep_house() &&
		sweep_due(GetCurrentTimestamp()))
		housekeeping(sweep_round, "hoplock housekeeping: forgetting names",
					 true, gone);
	more = more || ((in_sweep || in_trim) && !table_busy);

	pgstat_report_activity(STATE_IDLE, NULL);
	pgstat_report_stat(false);
	MemoryContextSwitchTo(old);
	if (table_busy)
		return false;			/* sleep_until_due looks again shortly */
	return more || *next_session <= GetCurrentTimestamp();
}

/*
 * Sleep until the next deadline, the horizon, the next try of an ended
 * session, or hoplock.naptime, unless the mailbox has something first;
 * BUSY_RETRY_US if a table was locked by maintenance.
 */
static void
sleep_until_due(TimestampTz next_session)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz wake = now + (int64) hl_naptime * USECS_PER_SEC;
	TimestampTz next;
	bool		has_next = hl_schedule_next(schedule, &next);

	/*
	 * A SIGTERM that arrived while a commit waited for a synchronous standby
	 * ended that wait, which consumed the latch: act on it before sleeping.
	 */
	CHECK_FOR_INTERRUPTS();

	if (table_busy)
	{
		/* what is due waits for the table: look again shortly */
		wake = Min(wake, now + BUSY_RETRY_US);
	}
	else
	{
		TimestampTz first;
		TimestampTz due;

		if (has_next)
			wake = Min(wake, next);
		/* a mass expiry's rows are read ahead, its events at its end */
		if (hl_mass_watching(&due))
			wake = Min(wake, due);
		else if (mass_expiry_coming(&first))
			wake = Min(wake, first - HL_MASS_EXPIRY_AHEAD);
		/* ... and the rows found being changed looked at again */
		if (hl_mass_next_try(&due))
			wake = Min(wake, due);
		wake = Min(wake, hl_schedule_horizon(schedule));
		if (pass_asked)
			wake = Min(wake, pass_not_before);
		wake = Min(wake, next_session);
		wake = Min(wake, next_sweep);
		wake = Min(wake, next_trim);
	}
	wake = Min(wake, next_event_prune);
	if (delivery_due)
		wake = Min(wake, Max(delivery_paused_until, now));

	LWLockAcquire(my_slot->lock, LW_EXCLUSIVE);
	if (!hl_mailbox_empty(my_slot) ||
		pg_atomic_read_u32(&my_slot->events_pending) != 0)
	{
		/* something arrived since we last looked: look again first */
		LWLockRelease(my_slot->lock);
		return;
	}
	my_slot->next_wakeup = wake;
	my_slot->stats.next_expiry = has_next ? next : 0;
	my_slot->state = WORKER_SLEEPING;
	LWLockRelease(my_slot->lock);

	if (wake > now)
	{
		/*
		 * The latch waits in whole milliseconds: wait the whole ones, then
		 * the rest, under a millisecond, in a plain sleep, so that a
		 * deadline is met to the microsecond rather than up to a
		 * millisecond late.  (A message posted meanwhile waits that long
		 * at most; a signal ends the sleep.)
		 */
		long		ms = (long) Min((wake - now) / 1000, (int64) PG_INT32_MAX);
		int			rc = 0;

		if (ms > 0)
			rc = WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						   ms, PG_WAIT_EXTENSION);
		if (!(rc & WL_LATCH_SET))
		{
			now = GetCurrentTimestamp();
			if (wake > now && wake - now < 1000)
			{
				pgstat_report_wait_start(PG_WAIT_EXTENSION);
				pg_usleep((long) (wake - now));
				pgstat_report_wait_end();
			}
		}
	}
	ResetLatch(MyLatch);
}

static void
reload_settings(void)
{
	int			old_max = hl_max_tracked;
	int			old_history_size = hl_history_size;

	ConfigReloadPending = false;
	my_reloads = pg_atomic_read_u64(&hl_shared->reloads);
	ProcessConfigFile(PGC_SIGHUP);
	LWLockAcquire(my_slot->lock, LW_EXCLUSIVE);
	if (slot_is_mine())
		my_slot->reloads_read = my_reloads;
	LWLockRelease(my_slot->lock);
	if (hl_history_size != old_history_size)
		trim_clean = false;
	if (hl_max_tracked != old_max)
	{
		hl_schedule_reset(schedule, hl_max_tracked);
		pass_wanted = true;
	}
}

/*
 * After an error: the transaction is gone, and the schedule may be half
 * updated; start it again from the table, after a pause.
 */
static void
recover_from_error(long *pause_ms)
{
	LWLockAcquire(my_slot->lock, LW_EXCLUSIVE);
	if (slot_is_mine())
		my_slot->state = WORKER_FAILING;
	LWLockRelease(my_slot->lock);

	hl_schedule_reset(schedule, hl_max_tracked);
	hash_destroy(session_ends);
	session_ends = NULL;
	in_pass = false;
	pass_wanted = true;
	if (pass_after != NULL)
		pfree(pass_after);
	pass_after = NULL;
	in_sweep = false;
	in_trim = false;
	sweep_clean = trim_clean = false;
	if (sweep_after != NULL)
		pfree(sweep_after);
	sweep_after = NULL;
	delivery_due = true;
	next_sweep = next_trim = GetCurrentTimestamp() + HOUSEKEEPING_EVERY_US;

	(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
					 *pause_ms, PG_WAIT_EXTENSION);
	ResetLatch(MyLatch);
	*pause_ms = Min(*pause_ms * 2, Min((long) hl_naptime, ERROR_PAUSE_MAX_S) * 1000L);
}

static HTAB *
create_session_ends(void)
{
	HASHCTL		ctl;

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = SESSION_END_KEYSIZE;
	ctl.entrysize = sizeof(SessionEnd);
	ctl.hcxt = TopMemoryContext;
	return hash_create("hoplock ended sessions", 64, &ctl,
					   HASH_ELEM | HASH_BLOBS | HASH_CONTEXT);
}

/* A database's worker: expiries, deliveries and housekeeping. */
void
hoplock_worker_main(Datum arg)
{
	sigjmp_buf	local_sigjmp_buf;
	bool		mine;
	static long pause_ms = ERROR_PAUSE_MIN_MS;	/* static: kept across
													 * longjmp */

	memcpy(&my_arg, MyBgworkerEntry->bgw_extra, sizeof(HlWorkerArg));
	my_reloads = my_arg.reloads;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();

	if (hl_shared == NULL || DatumGetInt32(arg) < 0 ||
		DatumGetInt32(arg) >= hl_shared->nslots)
		proc_exit(0);
	my_slot = &hl_shared->slots[DatumGetInt32(arg)];

	/*
	 * An earlier worker of this slot, restarted after the slot moved on, or
	 * after a crash-restart gave shared memory a new incarnation.
	 */
	LWLockAcquire(my_slot->lock, LW_EXCLUSIVE);
	mine = slot_is_mine() && my_slot->stop == STOP_NONE;
	if (mine)
	{
		my_slot->pid = MyProcPid;
		my_slot->latch = MyLatch;
		my_slot->state = WORKER_STARTING;
		my_slot->stats.started_at = GetCurrentTimestamp();
		my_slot->next_wakeup = 0;

		/*
		 * Started again by the postmaster after an exit, with the launcher's
		 * HlWorkerArg of the first start: what the last worker of the slot
		 * read counts too, or this one would read an edit no reload asked
		 * for.
		 */
		my_reloads = Max(my_reloads, my_slot->reloads_read);
	}
	LWLockRelease(my_slot->lock);
	if (!mine)
		proc_exit(0);
	my_dbname = "?";
	before_shmem_exit(detach, (Datum) 0);

	BackgroundWorkerInitializeConnectionByOid(my_arg.dboid, InvalidOid, 0);
	hl_mass_start();

	/*
	 * The worker writes whatever the database's defaults say, like
	 * autovacuum: a read-only or serializable default would only make it
	 * fail and retry.
	 */
	SetConfigOption("default_transaction_read_only", "off",
					PGC_SUSET, PGC_S_OVERRIDE);
	SetConfigOption("default_transaction_isolation", "read committed",
					PGC_SUSET, PGC_S_OVERRIDE);

	/* a database without the extension: leave quietly, the launcher notes it */
	StartTransactionCommand();
	my_dbname = MemoryContextStrdup(TopMemoryContext,
									get_database_name(MyDatabaseId));
	/* (an extension that must be updated is the round's error: it waits) */
	gone = !OidIsValid(get_extension_oid("hoplock", true));
	CommitTransactionCommand();
	if (gone)
	{
		ereport(DEBUG1,
				(errmsg_internal("hoplock is not installed in database \"%s\"",
								 my_dbname)));
		set_state(WORKER_ABSENT);
		proc_exit(0);
	}

	ereport(LOG,
			(errmsg("hoplock worker for database \"%s\" started", my_dbname)));

	schedule = hl_schedule_create(TopMemoryContext, hl_max_tracked);
	session_ends = create_session_ends();
	round_context = AllocSetContextCreate(TopMemoryContext, "hoplock round",
										  ALLOCSET_DEFAULT_SIZES);

	/* an error: report it, clean up, pause, and start over (autovacuum's way) */
	if (sigsetjmp(local_sigjmp_buf, 1) != 0)
	{
		ErrorData  *edata;

		HOLD_INTERRUPTS();
		EmitErrorReport();
		MemoryContextSwitchTo(TopMemoryContext);
		edata = CopyErrorData();
		AbortOutOfAnyTransaction();
		hl_mass_aborted();
		FlushErrorState();
		/* what went wrong, for hoplock_workers */
		LWLockAcquire(my_slot->lock, LW_EXCLUSIVE);
		if (slot_is_mine())
			strlcpy(my_slot->stats.last_error, edata->message,
					sizeof(my_slot->stats.last_error));
		LWLockRelease(my_slot->lock);
		FreeErrorData(edata);
		RESUME_INTERRUPTS();
		recover_from_error(&pause_ms);
		session_ends = create_session_ends();
	}
	PG_exception_stack = &local_sigjmp_buf;

	for (;;)
	{
		TimestampTz next_session;

		CHECK_FOR_INTERRUPTS();
		/* (a reload's SIGHUP, or one the launcher read that this lost) */
		if (ConfigReloadPending ||
			pg_atomic_read_u64(&hl_shared->reloads) != my_reloads)
			reload_settings();

		LWLockAcquire(my_slot->lock, LW_EXCLUSIVE);
		if (!slot_is_mine() || my_slot->stop != STOP_NONE)
		{
			LWLockRelease(my_slot->lock);
			break;
		}
		my_slot->next_wakeup = 0;	/* awake: no need to wake us */
		my_slot->stats.last_wakeup = GetCurrentTimestamp();
		LWLockRelease(my_slot->lock);

		if (run_round(&gone, &next_session))
		{
			pause_ms = ERROR_PAUSE_MIN_MS;
			continue;
		}
		pause_ms = ERROR_PAUSE_MIN_MS;
		if (gone)
			break;
		sleep_until_due(next_session);
	}

	set_state(gone ? WORKER_ABSENT : WORKER_STOPPED);
	proc_exit(0);
}
