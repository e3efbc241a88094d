/*-------------------------------------------------------------------------
 *
 * massexpiry.c
 *		Many terms lapsing at once (a thousand names given the same ttl by
 *		one statement, say), announced by the worker in one
 *		transaction that records only their "expired" events, and their
 *		lease and history rows written after that commit, while the events
 *		are already on their way to the listeners.  One by one, a lapse of
 *		10,000 terms costs some 15 µs each before the first NOTIFY of the
 *		last batch; this way the rows are out of that path
 *		(docs/many-terms.md).
 *
 *		A batch: when HL_MASS_EXPIRY_MIN or more terms are due within
 *		HL_MASS_EXPIRY_SPREAD of the next deadline, the worker wakes
 *		HL_MASS_EXPIRY_AHEAD before it, and in that round's transaction
 *
 *		1. the names are published in the expiry set (expiries.c),
 *		   WATCHED, before their rows are read;
 *		2. each row is read: a running term on its own expiry (no
 *		   keepalive, no hold, no handoff pending), lapsing within the
 *		   spread, not being changed nor locked by a transaction in
 *		   flight, stays in the batch; the rest go back to the usual way.
 *
 *		Once the last of their expiries has passed, in a round's
 *		transaction:
 *
 *		3. the entries become ANNOUNCING, but those a writer touched
 *		   meanwhile, which go back to the usual way (and all of them if a
 *		   statement wrote hoplock's tables through SQL meanwhile);
 *		4. an "expired" event per term is queued, and the delivery row is
 *		   given expiries_after, a number below the batch's events (the
 *		   greatest one sent): a restart can tell which events of the log
 *		   a batch may have left without their rows;
 *		5. the commit, durable as every announcement's; then the entries
 *		   become ANNOUNCED, and the worker sends the events at once.
 *
 *		Then, in the next rounds, the catch-up: each name is looked at the
 *		usual way, and the lease compare-and-swap, finding its entry
 *		ANNOUNCED, writes the row and ends the history without another
 *		event.  An entry goes once its row is written (or was taken over:
 *		a writer that finds an entry ANNOUNCED takes the term over without
 *		an "expired" of its own); the transaction that writes the last
 *		clears expiries_after.  A row found being changed is looked at
 *		again 10 ms later, then twice as late each time up to a second.
 *		No batch begins while one is catching up: meanwhile lapses go the
 *		usual way, term by term.
 *
 *		The set is lost with shared memory, and given up by a worker that
 *		exits.  Until this database's worker has looked at expiries_after
 *		since, writers ask the event log instead (lease.c), and the worker
 *		begins no batch.  Its first rounds read the events above the mark,
 *		a chunk a round, and write the row of each "expired" one the usual
 *		way, the compare-and-swap told that the log holds the event of that
 *		generation (no second one); they move the mark up as they go, never
 *		past a row found being changed (looked at again as above), and
 *		clear it once past the newest event there was when they began.
 *		Then the set is trusted.  An event whose name has no row, or no
 *		event above the mark at all, keeps the mark where it is: a restore
 *		brings the tables one at a time, and the commit of each has the
 *		worker look again (dbhooks.c).  A mark older than
 *		hoplock.event_retention is let go by the pruning (delivery.c).

 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "eventlog.h"
#include "events.h"
#include "expiries.h"
#include "hoplock.h"
#include "lease.h"
#include "massexpiry.h"
#include "shmem.h"
#include "storage.h"

#include "access/xact.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"

typedef enum MassPhase
{
	MASS_IDLE,
	MASS_WATCHING,				/* its rows read, its expiries to come */
	MASS_RECORDING,				/* the batch's transaction is open */
	MASS_CATCHING_UP			/* its events are committed */
} MassPhase;

/* Where each term of a batch stands in the catch-up */
typedef enum MassTermState
{
	TERM_PENDING,
	TERM_WRITTEN,				/* in the transaction open now */
	TERM_DONE					/* committed, its entry gone */
} MassTermState;

static MassPhase phase = MASS_IDLE;
static MemoryContext mass_context = NULL;
static char **batch_names = NULL;
static int *batch_lens = NULL;
static MassTermState *batch_state = NULL;
static Lease *batch_terms = NULL;	/* while WATCHING: each row as read */
static TimestampTz *batch_next_try = NULL;	/* catching up: a row found
											 * being changed, looked at
											 * again then */
static int *batch_tries = NULL;
static TimestampTz batch_due = 0;	/* ... and the latest expiry */
static bool batch_marked = false;	/* it set the delivery row's mark */
static uint64 sql_writes_seen = 0;	/* hl_expiries_sql_writes() then */

/* A term the recovery found being changed, looked at again later */
typedef struct Leftover
{
	char	   *name;
	int			len;
	int64		generation;
	int64		seq;
	TimestampTz next_try;
	int			tries;
} Leftover;

static bool recovering = false;	/* from the start until the mark is gone */
static bool recovery_begun = false; /* the mark read */
static bool recovery_done = false;	/* this transaction cleared the mark */
static int64 recovery_missing = PG_INT64_MAX;	/* the first event whose
												 * name has no row */
static int64 recovery_events = 0;	/* "expired" events above the mark */
static uint64 recovery_untrusted = 0;	/* hl_expiries_untrusted_count() as
										 * the last recovery began: a set
										 * untrusted since, in any database,
										 * has the mark looked at again */
static int64 recovery_after = 0;	/* the events above it are still to read */
static int64 recovery_until = 0;	/* the newest event when it began */
static TimestampTz recovery_next_try = DT_NOEND;
static MemoryContext recovery_context = NULL;
static Leftover *leftovers = NULL;
static int	nleftovers = 0;
static int	maxleftovers = 0;
static int	batch_size = 0;
static int	batch_left = 0;

static void
recovery_reset(void)
{
	if (recovery_context != NULL)
		MemoryContextReset(recovery_context);
	leftovers = NULL;
	nleftovers = maxleftovers = 0;
	recovery_begun = recovery_done = false;
	recovery_next_try = DT_NOEND;
	recovery_missing = PG_INT64_MAX;
	recovery_events = 0;
}

static void
batch_reset(void)
{
	if (mass_context != NULL)
		MemoryContextReset(mass_context);
	batch_names = NULL;
	batch_lens = NULL;
	batch_state = NULL;
	batch_terms = NULL;
	batch_next_try = NULL;
	batch_tries = NULL;
	batch_size = batch_left = 0;
	phase = MASS_IDLE;
}

/* Room for a batch of "n" names, in the batch's own memory */
static void
batch_alloc(int n)
{
	if (mass_context == NULL)
		mass_context = AllocSetContextCreate(TopMemoryContext,
											 "hoplock mass expiry",
											 ALLOCSET_DEFAULT_SIZES);
	batch_reset();
	batch_names = MemoryContextAlloc(mass_context, n * sizeof(char *));
	batch_lens = MemoryContextAlloc(mass_context, n * sizeof(int));
	batch_state = MemoryContextAllocZero(mass_context,
										 n * sizeof(MassTermState));
	batch_terms = MemoryContextAllocZero(mass_context, n * sizeof(Lease));
	batch_next_try = MemoryContextAllocZero(mass_context,
											n * sizeof(TimestampTz));
	batch_tries = MemoryContextAllocZero(mass_context, n * sizeof(int));
}

/* May a batch begin?  Not while one is under way, nor before the first look */
bool
hl_mass_busy(void)
{
	return phase != MASS_IDLE || recovering || hl_shared == NULL;
}

/* How many names a batch may have now */
int
hl_mass_room(void)
{
	return HL_EXPIRIES_MAX;
}

/*
 * Set, move or clear the delivery row's expiries_after, in this
 * transaction.  Set: unless it is set already (a lower mark stands), to
 * the greatest number sent, below every number taken from now on.  Moved
 * (a recovery's progress): to "after", if that is above it.  Returns
 * whether it changed the row.
 */
static bool
mark_delivery(bool set, int64 after)
{
	HlDelivery	d;
	Snapshot	latest = RegisterSnapshot(GetLatestSnapshot());

	hl_delivery_read(latest, &d);
	UnregisterSnapshot(latest);
	if (set && after == 0)
	{
		if (d.has_expiries_after)
			return false;
		d.expiries_after = d.delivered;
	}
	else if (set)
	{
		if (!d.has_expiries_after || after <= d.expiries_after)
			return false;
		d.expiries_after = after;
	}
	else
	{
		if (!d.has_expiries_after)
			return false;
		d.expiries_after = 0;
	}
	d.has_expiries_after = set;
	if (!d.found)
		d.delivered_at = GetCurrentTimestamp();
	hl_delivery_write(&d);
	return true;
}

/* A copy of "term" in the batch's memory */
static void
keep_term(Lease *dst, const Lease *term)
{
	MemoryContext old = MemoryContextSwitchTo(mass_context);

	*dst = *term;
	dst->name = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(term->name));
	dst->owner = (text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(term->owner));
	dst->value = term->value == NULL ? NULL :
		(text *) PG_DETOAST_DATUM_COPY(PointerGetDatum(term->value));
	dst->step_down_to = NULL;
	MemoryContextSwitchTo(old);
}

/*
 * Steps 1 and 2 of a batch (file header), in the worker's round
 * transaction, the tables locked: "n" names due by "until", in the order
 * of their deadlines.  left_out[i] says which the worker is to look at the
 * usual way (a row renewed past "until", being changed, not a term on its
 * own expiry); the others stay WATCHED until the latest of their expiries
 * (hl_mass_watching), then hl_mass_record() announces those no writer
 * touched meanwhile.  Returns how many stay.
 */
int
hl_mass_watch(char **names, const int *lens, int n, TimestampTz until,
			  bool *left_out)
{
	bool	   *watched = palloc(n * sizeof(bool));
	bool	   *keep = palloc0(n * sizeof(bool));
	int		   *at = palloc(n * sizeof(int));
	HlRelation	rel;
	SnapshotData dirty;
	int			kept = 0;
	char	  **gone_names = palloc(n * sizeof(char *));
	int		   *gone_lens = palloc(n * sizeof(int));
	int			ngone = 0;

	Assert(phase == MASS_IDLE && !recovering);
	for (int i = 0; i < n; i++)
		left_out[i] = true;

	/*
	 * 1: published before the rows are read.  The batch holds every name
	 * published from here on, so that an error forgets them all
	 * (hl_mass_aborted).
	 */
	batch_alloc(n);
	batch_due = 0;
	sql_writes_seen = hl_expiries_sql_writes();
	if (hl_expiries_watch(names, lens, n, watched) == 0)
	{
		batch_reset();
		return 0;
	}
	for (int i = 0; i < n; i++)
	{
		if (!watched[i])
			continue;
		at[i] = batch_size;
		batch_names[batch_size] = MemoryContextStrdup(mass_context, names[i]);
		batch_lens[batch_size] = lens[i];
		batch_state[batch_size] = TERM_PENDING;
		batch_size++;
	}
	phase = MASS_WATCHING;

	/* 2: the rows, each as its newest version says */
	if (!hl_open(HL_REL_LEASE, RowExclusiveLock, false, &rel))
		hl_table_busy_error(HL_REL_LEASE);
	InitDirtySnapshot(dirty);
	for (int i = 0; i < n; i++)
	{
		LeaseVersion v;

		if (!watched[i])
			continue;
		CHECK_FOR_INTERRUPTS();
		hl_store_fetch(&rel, cstring_to_text_with_len(names[i], lens[i]),
					   &dirty, &v);

		/*
		 * Not one a transaction in flight changes, or holds locked (the
		 * dirty snapshot reports updaters only): a writer that locked the
		 * row before the name was published is found here.
		 */
		if (v.found && !TransactionIdIsValid(v.inflight) &&
			!TransactionIdIsValid(hl_store_locker(&v)) &&
			v.lease.state == LEASE_STATE_HELD && v.lease.keepalive <= 0 &&
			v.lease.handed_pid == 0 && v.lease.hold_until == 0 &&
			v.lease.generation != 0 && v.lease.expires_at <= until)
		{
			keep_term(&batch_terms[at[i]], &v.lease);
			batch_due = Max(batch_due, v.lease.expires_at);
			keep[i] = true;
		}
		hl_version_release(&v);
	}
	hl_close(&rel, true);

	/* the batch is what it keeps; the rest are the usual way's */
	batch_size = 0;
	for (int i = 0; i < n; i++)
	{
		if (!watched[i])
			continue;
		if (!keep[i])
		{
			gone_names[ngone] = names[i];
			gone_lens[ngone] = lens[i];
			ngone++;
			continue;
		}
		batch_names[batch_size] = batch_names[at[i]];
		batch_lens[batch_size] = batch_lens[at[i]];
		batch_terms[batch_size] = batch_terms[at[i]];
		batch_state[batch_size] = TERM_PENDING;
		batch_size++;
		left_out[i] = false;
		kept++;
	}
	batch_left = batch_size;
	hl_expiries_forget(gone_names, gone_lens, ngone);
	if (kept == 0)
		batch_reset();
	return kept;
}

/* Is a batch watched?  Then in *due the latest of its expiries. */
bool
hl_mass_watching(TimestampTz *due)
{
	if (phase != MASS_WATCHING)
		return false;
	*due = batch_due;
	return true;
}

/*
 * Steps 3 and 4 of the batch watched, in the worker's round transaction,
 * now that every term of it lapsed (hl_mass_watching's due).  Each name a
 * writer touched meanwhile is handed to "left_out", for the usual way;
 * the rest are announced once the transaction commits
 * (hl_mass_committed).  Returns how many are; *lag is the greatest delay
 * after expires_at.
 */
int
hl_mass_record(HlMassLeftOut left_out, void *arg, int64 *lag)
{
	int64	   *generations;
	bool	   *kept;
	TimestampTz now = GetCurrentTimestamp();
	int			announced = 0;
	int			k = 0;

	Assert(phase == MASS_WATCHING && now >= batch_due);
	*lag = -1;

	/*
	 * Rows written by SQL since they were read (a superuser's UPDATE, a
	 * restore): the batch is given up, and each name looked at anew.
	 */
	if (hl_expiries_sql_writes() != sql_writes_seen)
	{
		hl_expiries_forget(batch_names, batch_lens, batch_size);
		for (int i = 0; i < batch_size; i++)
			left_out(batch_names[i], batch_lens[i], arg);
		batch_reset();
		return 0;
	}

	/* 3: those no writer touched meanwhile */
	generations = palloc(batch_size * sizeof(int64));
	kept = palloc(batch_size * sizeof(bool));
	for (int i = 0; i < batch_size; i++)
		generations[i] = batch_terms[i].generation;
	hl_expiries_flip(batch_names, batch_lens, generations, batch_size, kept);

	/*
	 * 4: their events, a thousand to a row of the log (events.c), and the
	 * mark a restart looks for
	 */
	for (int i = 0; i < batch_size; i++)
	{
		if (!kept[i])
		{
			left_out(batch_names[i], batch_lens[i], arg);
			continue;
		}
		*lag = Max(*lag, now - batch_terms[i].expires_at);
		batch_terms[k] = batch_terms[i];
		batch_names[k] = batch_names[i];
		batch_lens[k] = batch_lens[i];
		batch_state[k] = TERM_PENDING;
		k++;
		announced++;
	}
	batch_size = batch_left = k;
	if (announced == 0)
	{
		batch_reset();
		return 0;
	}
	hl_event_expired_many(batch_terms, batch_size);
	phase = MASS_RECORDING;
	batch_marked = mark_delivery(true, 0);
	hl_commit_durably(true);
	return announced;
}

/*
 * Step 5: the worker's transaction committed.  Returns how many events a
 * batch recorded in it (0 if none), for the worker to send at once.
 */
int
hl_mass_committed(void)
{
	if (phase != MASS_RECORDING)
		return 0;
	hl_expiries_announced(batch_names, batch_lens, batch_size);
	phase = MASS_CATCHING_UP;
	hl_count_by(HL_COUNT_EXPIRIES, batch_size);

	/*
	 * Whoever waits for one of these names may take it now: wake the
	 * database's waiters once, rather than digest thousands of names (a
	 * waiter for another name looks and sleeps again).
	 */
	if (hl_names_waited_for())
		hl_wake_all_waiters(MyDatabaseId);
	return batch_size;
}

/*
 * The worker's transaction aborted (an error, say).  A batch that had not
 * committed announced nothing: its entries go, and its names are found
 * again by the worker's pass over the table.  One catching up looks again
 * at the names written in that transaction.
 */
void
hl_mass_aborted(void)
{
	if (phase == MASS_RECORDING || phase == MASS_WATCHING)
	{
		hl_expiries_forget(batch_names, batch_lens, batch_size);
		batch_reset();
	}
	else if (phase == MASS_CATCHING_UP)
	{
		for (int i = 0; i < batch_size; i++)
			if (batch_state[i] == TERM_WRITTEN)
				batch_state[i] = TERM_PENDING;
	}

	/* a recovery starts again from the mark as committed */
	if (recovering)
		recovery_reset();
}

/*
 * When a row found being changed is looked at again: 10 ms, doubling up to
 * a second (a transaction in flight, maybe one that holds it for long).
 */
static TimestampTz
retry_after(TimestampTz now, int tries)
{
	return now + Min(10000L << Min(tries, 7), USECS_PER_SEC);
}

/*
 * The catch-up, in the worker's round transaction: up to "limit" names of
 * the batch whose time has come looked at ("look" writes the row; false:
 * being changed, looked at again a little later).  The transaction that
 * writes the last clears expiries_after.  Returns true if more is due
 * right now; hl_mass_next_try() says when otherwise.
 */
bool
hl_mass_catch_up(int limit, HlMassLook look, void *arg)
{
	int			written = 0;
	int			left = 0;
	bool		due_now = false;
	TimestampTz now = GetCurrentTimestamp();

	if (phase != MASS_CATCHING_UP)
		return false;
	for (int i = 0; i < batch_size; i++)
	{
		if (batch_state[i] != TERM_PENDING)
			continue;
		if (batch_next_try[i] > now)
		{
			left++;
			continue;
		}
		if (written >= limit)
		{
			left++;
			due_now = true;
			continue;
		}
		CHECK_FOR_INTERRUPTS();
		if (look(batch_names[i], batch_lens[i], 0, arg) != 0)
		{
			batch_state[i] = TERM_WRITTEN;
			written++;
		}
		else
		{
			batch_next_try[i] = retry_after(now, batch_tries[i]++);
			left++;
		}
	}
	/*
	 * (Not a mark the batch found set: a recovery's, which stays for rows
	 * a restore has yet to bring; nor while one is under way.)
	 */
	if (left == 0 && !recovering && batch_marked)
		(void) mark_delivery(false, 0);
	return due_now;
}

/* When a batch catching up, or a recovery, looks again at a row */
bool
hl_mass_next_try(TimestampTz *when)
{
	bool		found = false;

	*when = DT_NOEND;
	if (phase == MASS_CATCHING_UP)
	{
		for (int i = 0; i < batch_size; i++)
		{
			if (batch_state[i] != TERM_PENDING)
				continue;
			*when = Min(*when, batch_next_try[i]);
			found = true;
		}
	}
	if (recovering && recovery_next_try != DT_NOEND)
	{
		*when = Min(*when, recovery_next_try);
		found = true;
	}
	return found;
}

/*
 * The worker's round transaction committed: the rows a catch-up wrote
 * leave the set; a recovery that cleared the mark is done, and the set is
 * trusted.
 */
void
hl_mass_caught_up(void)
{
	int			n = 0;
	char	  **names;
	int		   *lens;

	if (recovering && recovery_done)
	{
		if (hl_expiries_trust(recovery_untrusted))
			recovering = false;
		recovery_reset();
	}
	if (phase != MASS_CATCHING_UP)
		return;
	names = palloc(batch_size * sizeof(char *));
	lens = palloc(batch_size * sizeof(int));
	for (int i = 0; i < batch_size; i++)
	{
		if (batch_state[i] != TERM_WRITTEN)
			continue;
		batch_state[i] = TERM_DONE;
		names[n] = batch_names[i];
		lens[n] = batch_lens[i];
		n++;
		batch_left--;
	}
	hl_expiries_forget(names, lens, n);
	pfree(names);
	pfree(lens);
	if (batch_left == 0)
		batch_reset();
}

/*
 * The recovery (file header): the events above the mark, read in chunks,
 * each "expired" one's row written the usual way with no second event;
 * the rows found being changed looked at again a little later, the mark
 * moved up to just below the first of them.
 */
#define RECOVERY_CHUNK		512




/* The worker starts: what shared memory says of this database is its own */
void
hl_mass_start(void)
{
	hl_expiries_forget_all();
	hl_expiries_untrust();
	batch_reset();
	if (recovery_context == NULL)
		recovery_context = AllocSetContextCreate(TopMemoryContext,
												 "hoplock mass expiry recovery",
												 ALLOCSET_DEFAULT_SIZES);
	recovery_reset();
	recovering = true;
}

/* The collector of a recovery's chunk */
typedef struct Chunk
{
	int			n;
	int			visited;
	int64		last;
	Leftover	terms[RECOVERY_CHUNK];
} Chunk;

static bool
collect_expired(const HlLoggedEvent *e, void *arg)
{
	Chunk	   *c = (Chunk *) arg;

	c->visited++;
	c->last = e->seq;
	if (VARSIZE_ANY_EXHDR(e->event) == 7 &&
		memcmp(VARDATA_ANY(e->event), "expired", 7) == 0)
	{
		Leftover   *t = &c->terms[c->n++];

		t->name = text_to_cstring(e->name);
		t->len = VARSIZE_ANY_EXHDR(e->name);
		t->generation = e->generation;
		t->seq = e->seq;
	}
	return c->n < RECOVERY_CHUNK && c->visited < 8 * RECOVERY_CHUNK;
}

static void
add_leftover(const Leftover *t, TimestampTz now)
{
	Leftover   *l;

	if (nleftovers == maxleftovers)
	{
		maxleftovers = Max(16, maxleftovers * 2);
		leftovers = leftovers == NULL ?
			MemoryContextAlloc(recovery_context, maxleftovers * sizeof(Leftover)) :
			repalloc(leftovers, maxleftovers * sizeof(Leftover));
	}
	l = &leftovers[nleftovers++];
	*l = *t;
	l->name = MemoryContextStrdup(recovery_context, t->name);
	l->tries = 1;
	l->next_try = retry_after(now, 0);
}

/*
 * The worker's rounds after it starts, in their transactions, until the
 * mark is gone (file header): with no mark, the set is trusted at once;
 * otherwise a chunk of the events above it, and the rows found being
 * changed before, whose time has come.  Returns true if more is due right
 * now.  Until it is done, writers ask the event log, and no batch begins.
 */
bool
hl_mass_recover(HlMassLook look, void *arg)
{
	TimestampTz now;
	int64		lowest_left = PG_INT64_MAX;
	int			kept = 0;

	if (hl_shared == NULL)
		return false;

	/*
	 * SQL wrote hoplock's tables since the set was trusted (a restore):
	 * look at the mark again.  (A batch being watched gives up when it
	 * would record; one catching up goes on.)
	 */
	if (!recovering &&
		(!hl_expiries_trusted() ||
		 hl_expiries_untrusted_count() != recovery_untrusted))
	{
		recovery_reset();
		recovering = true;
	}
	if (!recovering)
		return false;
	if (!recovery_begun)
	{
		HlDelivery	d;
		Snapshot	latest;

		/* (a write by SQL committed from now on is looked at again) */
		recovery_untrusted = hl_expiries_untrusted_count();
		pg_memory_barrier();
		latest = RegisterSnapshot(GetLatestSnapshot());

		hl_delivery_read(latest, &d);
		if (d.has_expiries_after)
			(void) hl_eventlog_newest(PG_INT64_MAX, latest, true,
									  &recovery_until);
		UnregisterSnapshot(latest);
		if (!d.has_expiries_after)
		{
			/* nothing was cut short: the set says it all */
			if (hl_expiries_trust(recovery_untrusted))
				recovering = false;
			else
				recovery_reset();
			return false;
		}
		recovery_after = d.expiries_after;
		recovery_begun = true;
	}

	now = GetCurrentTimestamp();
	recovery_next_try = DT_NOEND;
	for (int i = 0; i < nleftovers; i++)
	{
		Leftover   *l = &leftovers[i];
		int			r = l->next_try <= now ? look(l->name, l->len, l->generation, arg) : 0;

		if (r < 0)
			recovery_missing = Min(recovery_missing, l->seq);
		if (r != 0)
			continue;
		if (l->next_try <= now)
			l->next_try = retry_after(now, l->tries++);
		recovery_next_try = Min(recovery_next_try, l->next_try);
		lowest_left = Min(lowest_left, l->seq);
		leftovers[kept++] = *l;
	}
	nleftovers = kept;

	if (recovery_after < recovery_until)
	{
		Chunk	   *c = palloc0(sizeof(Chunk));
		Snapshot	latest = RegisterSnapshot(GetLatestSnapshot());

		(void) hl_eventlog_scan(recovery_after, recovery_until, latest,
								collect_expired, c);
		UnregisterSnapshot(latest);
		for (int i = 0; i < c->n; i++)
		{
			int			r;

			CHECK_FOR_INTERRUPTS();
			r = look(c->terms[i].name, c->terms[i].len,
					 c->terms[i].generation, arg);
			recovery_events++;
			if (r < 0)
				recovery_missing = Min(recovery_missing, c->terms[i].seq);
			if (r != 0)
				continue;
			add_leftover(&c->terms[i], now);
			recovery_next_try = Min(recovery_next_try,
									leftovers[nleftovers - 1].next_try);
			lowest_left = Min(lowest_left, c->terms[i].seq);
		}
		recovery_after = c->visited == 0 ? recovery_until : c->last;
	}

	/*
	 * The mark: below the first row still to write; gone once every row is
	 * written.  An event whose name has no row, or none above the mark at
	 * all, keeps it where it is: a restore brings tables back one at a
	 * time, and the rows (or the events) may come in a later transaction,
	 * whose commit has the worker look again.  (A mark older than
	 * hoplock.event_retention is let go by the pruning: delivery.c.)
	 */
	lowest_left = Min(lowest_left, recovery_missing);
	if (recovery_after >= recovery_until && nleftovers == 0)
	{
		if (recovery_events > 0 && recovery_missing == PG_INT64_MAX)
			(void) mark_delivery(false, 0);
		else if (lowest_left != PG_INT64_MAX)
			(void) mark_delivery(true, lowest_left - 1);
		recovery_done = true;
	}
	else
		(void) mark_delivery(true, Min(recovery_after, lowest_left - 1));
	return recovery_after < recovery_until;
}

/* The worker exits: its entries go, and writers ask the event log */
void
hl_mass_exit(void)
{
	hl_expiries_untrust();
	hl_expiries_forget_all();
}
