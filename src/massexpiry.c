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
 *		clears expiries_after.  No batch begins while one is catching up.
 *
 *		The set is lost with shared memory, and given up by a worker that
 *		exits.  Until this database's worker has looked at expiries_after
 *		since, writers ask the event log instead (lease.c), and the worker
 *		begins no batch: its first round puts the terms of the events above
 *		expiries_after back in the set, ANNOUNCED, and catches them up.
 *
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
static bool recovered = false;	/* the first round's look is done */
static MemoryContext mass_context = NULL;
static char **batch_names = NULL;
static int *batch_lens = NULL;
static MassTermState *batch_state = NULL;
static Lease *batch_terms = NULL;	/* while WATCHING: each row as read */
static TimestampTz batch_due = 0;	/* ... and the latest expiry */
static uint64 sql_writes_seen = 0;	/* hl_expiries_sql_writes() then */
static int	batch_size = 0;
static int	batch_left = 0;

static void
batch_reset(void)
{
	if (mass_context != NULL)
		MemoryContextReset(mass_context);
	batch_names = NULL;
	batch_lens = NULL;
	batch_state = NULL;
	batch_terms = NULL;
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
}

static void
batch_add(const char *name, int len)
{
	char	   *copy = MemoryContextAlloc(mass_context, len + 1);

	memcpy(copy, name, len);
	copy[len] = '\0';
	batch_names[batch_size] = copy;
	batch_lens[batch_size] = len;
	batch_state[batch_size] = TERM_PENDING;
	batch_size++;
	batch_left++;
}

/* May a batch begin?  Not while one is under way, nor before the first look */
bool
hl_mass_busy(void)
{
	return phase != MASS_IDLE || !recovered || hl_shared == NULL;
}

/* How many names a batch may have now */
int
hl_mass_room(void)
{
	return HL_EXPIRIES_MAX;
}

/* Set or clear the delivery row's expiries_after, in this transaction */
static void
mark_delivery(bool set)
{
	HlDelivery	d;
	Snapshot	latest = RegisterSnapshot(GetLatestSnapshot());

	hl_delivery_read(latest, &d);
	UnregisterSnapshot(latest);
	if (set == d.has_expiries_after)
		return;
	d.has_expiries_after = set;
	/* numbers taken from now on are above the greatest one sent */
	d.expiries_after = set ? d.delivered : 0;
	if (!d.found)
		d.delivered_at = GetCurrentTimestamp();
	hl_delivery_write(&d);
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
	HlRelation	rel;
	SnapshotData dirty;
	int			kept = 0;
	char	  **gone_names = palloc(n * sizeof(char *));
	int		   *gone_lens = palloc(n * sizeof(int));
	int			ngone = 0;

	Assert(phase == MASS_IDLE && recovered);
	for (int i = 0; i < n; i++)
		left_out[i] = true;

	/* 1: published before the rows are read */
	sql_writes_seen = hl_expiries_sql_writes();
	if (hl_expiries_watch(names, lens, n, watched) == 0)
		return 0;
	batch_alloc(n);
	batch_due = 0;

	/* 2: the rows, each as its newest version says */
	if (!hl_open(HL_REL_LEASE, RowExclusiveLock, false, &rel))
	{
		hl_expiries_forget(names, lens, n);
		batch_reset();
		hl_table_busy_error(HL_REL_LEASE);
	}
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
			batch_names[batch_size] = MemoryContextStrdup(mass_context, names[i]);
			batch_lens[batch_size] = lens[i];
			batch_state[batch_size] = TERM_PENDING;
			keep_term(&batch_terms[batch_size], &v.lease);
			batch_due = Max(batch_due, v.lease.expires_at);
			batch_size++;
			left_out[i] = false;
			kept++;
		}
		else
		{
			gone_names[ngone] = names[i];
			gone_lens[ngone] = lens[i];
			ngone++;
		}
		hl_version_release(&v);
	}
	hl_close(&rel, true);
	batch_left = batch_size;

	/* the rest are the usual way's */
	hl_expiries_forget(gone_names, gone_lens, ngone);
	if (kept == 0)
		batch_reset();
	else
		phase = MASS_WATCHING;
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

	/* 4: their events, and the mark a restart looks for */
	for (int i = 0; i < batch_size; i++)
	{
		if (!kept[i])
		{
			left_out(batch_names[i], batch_lens[i], arg);
			continue;
		}
		hl_event("expired", &batch_terms[i]);
		*lag = Max(*lag, now - batch_terms[i].expires_at);
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
	phase = MASS_RECORDING;
	mark_delivery(true);
	hl_count_by(HL_COUNT_EXPIRIES, announced);
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
}

/*
 * The catch-up, in the worker's round transaction: up to "limit" names of
 * the batch looked at ("look" writes the row; false: being changed, look
 * again next round).  The transaction that writes the last clears
 * expiries_after.  Returns true if more is left for the next round.
 */
bool
hl_mass_catch_up(int limit, HlMassLook look, void *arg)
{
	int			written = 0;
	int			left = 0;

	if (phase != MASS_CATCHING_UP)
		return false;
	for (int i = 0; i < batch_size && written < limit; i++)
	{
		if (batch_state[i] != TERM_PENDING)
			continue;
		CHECK_FOR_INTERRUPTS();
		if (look(batch_names[i], batch_lens[i], arg))
		{
			batch_state[i] = TERM_WRITTEN;
			written++;
		}
	}
	for (int i = 0; i < batch_size; i++)
		if (batch_state[i] == TERM_PENDING)
			left++;
	if (left == 0)
		mark_delivery(false);
	return left > 0;
}

/* The catch-up's transaction committed: the rows it wrote leave the set */
void
hl_mass_caught_up(void)
{
	int			n = 0;
	char	  **names;
	int		   *lens;

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

/* The worker starts: what shared memory says of this database is its own */
void
hl_mass_start(void)
{
	hl_expiries_forget_all();
	hl_expiries_set_trusted(false);
	batch_reset();
	recovered = false;
}

/* The collector of hl_mass_recover() */
typedef struct Pending
{
	int			n;
	int			max;
	char	  **names;
	int		   *lens;
	int64	   *generations;
	bool		overflow;
} Pending;

static bool
collect_expired(const HlLoggedEvent *e, void *arg)
{
	Pending    *p = (Pending *) arg;

	if (VARSIZE_ANY_EXHDR(e->event) != 7 ||
		memcmp(VARDATA_ANY(e->event), "expired", 7) != 0)
		return true;
	if (p->n == p->max)
	{
		p->overflow = true;
		return false;
	}
	p->names[p->n] = text_to_cstring(e->name);
	p->lens[p->n] = VARSIZE_ANY_EXHDR(e->name);
	p->generations[p->n] = e->generation;
	p->n++;
	return true;
}

/*
 * The worker's first round, in its transaction: if the delivery row says a
 * batch may have left rows unwritten (a restart, a worker that exited),
 * its terms go back in the set, ANNOUNCED, and are caught up; then the set
 * says it all.  Until this is done, writers ask the event log.
 */
void
hl_mass_recover(void)
{
	HlDelivery	d;
	Snapshot	latest;
	Pending		p = {0};
	bool	   *added;

	if (recovered || hl_shared == NULL)
		return;
	latest = RegisterSnapshot(GetLatestSnapshot());
	hl_delivery_read(latest, &d);
	if (!d.has_expiries_after)
	{
		UnregisterSnapshot(latest);
		hl_expiries_set_trusted(true);
		recovered = true;
		return;
	}
	p.max = HL_EXPIRIES_MAX;
	p.names = palloc(p.max * sizeof(char *));
	p.lens = palloc(p.max * sizeof(int));
	p.generations = palloc(p.max * sizeof(int64));
	(void) hl_eventlog_scan(d.expiries_after, PG_INT64_MAX, latest,
							collect_expired, &p);
	UnregisterSnapshot(latest);

	added = palloc(Max(p.n, 1) * sizeof(bool));
	if (!p.overflow &&
		hl_expiries_add_announced(p.names, p.lens, p.generations, p.n,
								  added) == p.n)
	{
		batch_alloc(Max(p.n, 1));
		for (int i = 0; i < p.n; i++)
			batch_add(p.names[i], p.lens[i]);
		phase = MASS_CATCHING_UP;
		hl_expiries_set_trusted(true);
		recovered = true;
		/* nothing to write: the first catch-up clears the mark at once */
		return;
	}

	/*
	 * No room (other databases' batches, or more than a batch's worth
	 * above the mark): the writers go on asking the event log, and the
	 * next round tries again.
	 */
	{
		int			n = 0;

		for (int i = 0; i < p.n; i++)
			if (added[i])
			{
				p.names[n] = p.names[i];
				p.lens[n] = p.lens[i];
				n++;
			}
		hl_expiries_forget(p.names, p.lens, n);
	}
}

/* The worker exits: its entries go, and writers ask the event log */
void
hl_mass_exit(void)
{
	hl_expiries_set_trusted(false);
	hl_expiries_forget_all();
}
