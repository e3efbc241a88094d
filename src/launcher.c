/*-------------------------------------------------------------------------
 *
 * launcher.c
 *		The launcher: a background worker, registered at server start,
 *		connected to no database, that keeps one expiry worker running per
 *		database that has hoplock installed (and that hoplock.databases,
 *		when set, lists).  It starts after recovery, so a hot standby runs
 *		no workers until it is promoted.
 *
 *		Whether a database has the extension can only be seen from inside
 *		it, so the launcher starts a worker for every database it has not
 *		ruled out; a worker that finds no extension exits, marking its slot
 *		"absent", and the launcher remembers.  It looks again when:
 *
 *		- CREATE EXTENSION hoplock commits (dbhooks.c),
 *		- CREATE DATABASE ends (dbhooks.c),
 *		- hoplock.databases changes (SIGHUP),
 *		- every hoplock.naptime, as a safety net; every 5 seconds while a
 *		  database that wants a worker cannot have one (no slot free, or
 *		  max_worker_processes reached), which hoplock_workers lists.
 *
 *		Stopping a worker (DROP EXTENSION, a statement that needs the
 *		database alone, hoplock.databases) is asked of it through its slot
 *		and SIGTERM, by whoever needs it (dbhooks.c); the launcher then
 *		keeps the postmaster from starting it again, and starts a new one
 *		when the database wants one again: for a statement that needed the
 *		database alone, as soon as both the old worker and the statement
 *		are gone, in whichever order they go, but at most once a second
 *		(MIN_RESTART_MS).
 *
 *		Locking: slots are allocated and freed under hl_shared->lock, with
 *		the slot's own lock held too when its dboid changes (see shmem.h).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "settings.h"
#include "shmem.h"
#include "workers.h"

#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_database.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "storage/proc.h"
#include "storage/procarray.h"
#include "tcop/tcopprot.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"

/* A database the launcher knows of */
typedef struct KnownDatabase
{
	Oid			dboid;			/* hash key */
	bool		absent;			/* its worker found no extension */
	TimestampTz requested_at;	/* last asked to serve it (CREATE
								 * EXTENSION...): an "absent" from a worker
								 * started before that does not count */
	bool		seen;			/* in the latest list of databases */
	bool		wanted;			/* allowed by hoplock.databases */
	char		name[NAMEDATALEN];
	bool		confirmed;		/* known to have hoplock: a worker found it
								 * there, or it asked to be served */
	const char *excluded;		/* why it cannot be served at all (a
								 * template, no connections), or NULL */
	char		why[96];		/* why it has no worker: "" if none failed */
	bool		warned;			/* about "why" */
	TimestampTz started_at;		/* when its last worker was started */
	bool		held_back;		/* its worker was stopped for a statement
								 * that needed it alone: the next one waits
								 * for MIN_RESTART_MS after started_at */
} KnownDatabase;

static HTAB *known = NULL;
static BackgroundWorkerHandle **handles = NULL;

/* How soon to try again when a database could not get a worker (ms) */
#define RETRY_UNSERVED_MS	5000

/*
 * A worker stopped for a statement that needed its database alone is
 * started again once the statement is over, whether it worked or not, but
 * no sooner than this after the one before it was started (ms): without a
 * bound, a database owner running such statements in a loop, each failing
 * at once, would have the postmaster start hundreds of workers a second,
 * taking their slots from everyone else's parallel queries.
 */
#define MIN_RESTART_MS	1000

/* ---------------------------------------------------------------------
 * Registration (postmaster)
 * ---------------------------------------------------------------------
 */
/*
 * A background worker of hoplock's: connected, started once recovery is
 * over (so none runs on a hot standby), restarted a second after it dies.
 */
static void
describe_worker(BackgroundWorker *worker, const char *function,
				const char *type)
{
	memset(worker, 0, sizeof(*worker));
	worker->bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker->bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker->bgw_restart_time = 1;
	snprintf(worker->bgw_library_name, BGW_MAXLEN, "hoplock");
	snprintf(worker->bgw_function_name, BGW_MAXLEN, "%s", function);
	snprintf(worker->bgw_type, BGW_MAXLEN, "%s", type);
}

/* Register the launcher, from _PG_init while preloading. */
void
hl_register_launcher(void)
{
	BackgroundWorker worker;

	describe_worker(&worker, "hoplock_launcher_main", "hoplock launcher");
	snprintf(worker.bgw_name, BGW_MAXLEN, "hoplock launcher");
	RegisterBackgroundWorker(&worker);
}

/* ---------------------------------------------------------------------
 * The launcher
 * ---------------------------------------------------------------------
 */
static void
launcher_detach(int code, Datum arg)
{
	LWLockAcquire(hl_shared->lock, LW_EXCLUSIVE);
	hl_shared->launcher_pid = 0;
	hl_shared->launcher_latch = NULL;
	LWLockRelease(hl_shared->lock);
	ereport(LOG, (errmsg("hoplock launcher stopped")));
}

/* Refresh "known" from pg_database. */
static void
read_databases(void)
{
	Relation	rel;
	TableScanDesc scan;
	HeapTuple	tuple;
	HASH_SEQ_STATUS status;
	KnownDatabase *db;

	hash_seq_init(&status, known);
	while ((db = hash_seq_search(&status)) != NULL)
	{
		db->seen = false;
		db->excluded = NULL;
	}

	SetCurrentStatementStartTimestamp();
	StartTransactionCommand();
	PushActiveSnapshot(GetTransactionSnapshot());
	rel = table_open(DatabaseRelationId, AccessShareLock);
	scan = table_beginscan_catalog(rel, 0, NULL);
	while ((tuple = heap_getnext(scan, ForwardScanDirection)) != NULL)
	{
		Form_pg_database form = (Form_pg_database) GETSTRUCT(tuple);
		bool		found;

		if (!form->datallowconn || form->datistemplate)
		{
			/* one it served before: its owner took it out of service */
			db = hash_search(known, &form->oid, HASH_FIND, NULL);
			if (db != NULL)
				db->excluded = !form->datallowconn ?
					"the database does not allow connections" :
					"the database is a template";
			continue;
		}
		db = hash_search(known, &form->oid, HASH_ENTER, &found);
		if (!found)
		{
			db->excluded = NULL;
			db->absent = false;
			db->requested_at = 0;
			db->confirmed = false;
			db->why[0] = '\0';
			db->warned = false;
			db->started_at = 0;
			db->held_back = false;
		}
		db->seen = true;
		strlcpy(db->name, NameStr(form->datname), NAMEDATALEN);
		db->wanted = hl_database_listed(db->name);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
}

/* Has the worker of slot i exited? */
static bool
worker_gone(int i)
{
	pid_t		pid;

	if (handles[i] != NULL)
		return GetBackgroundWorkerPid(handles[i], &pid) == BGWH_STOPPED;
	/* started by an earlier launcher: trust the slot */
	return hl_shared->slots[i].pid == 0;
}

/* Free slot i; its worker must have exited. */
static void
free_slot(int i)
{
	HlDbSlot   *slot = &hl_shared->slots[i];

	if (handles[i] != NULL)
	{
		pfree(handles[i]);
		handles[i] = NULL;
	}
	LWLockAcquire(hl_shared->lock, LW_EXCLUSIVE);
	LWLockAcquire(slot->lock, LW_EXCLUSIVE);
	slot->dboid = InvalidOid;
	hl_slot_reset(slot);
	LWLockRelease(slot->lock);
	LWLockRelease(hl_shared->lock);
}

static bool
requested_now(Oid dboid, const Oid *requested, int nrequested)
{
	for (int i = 0; i < nrequested; i++)
	{
		if (requested[i] == dboid)
			return true;
	}
	return false;
}

/*
 * Collect slots whose worker is done, and stop those that are no longer
 * wanted.  "requested" are the databases just asked for.
 */
static void
harvest_slots(const Oid *requested, int nrequested)
{
	for (int i = 0; i < hl_shared->nslots; i++)
	{
		HlDbSlot   *slot = &hl_shared->slots[i];
		Oid			dboid;
		KnownDatabase *db;
		HlWorkerState state;
		HlStopReason stop;
		TimestampTz stop_at;
		TimestampTz started_at;
		pid_t		pid;
		pid_t		busy_pid;

		LWLockAcquire(slot->lock, LW_SHARED);
		dboid = slot->dboid;
		state = slot->state;
		stop = slot->stop;
		stop_at = slot->stop_requested_at;
		started_at = slot->stats.started_at;
		pid = slot->pid;
		busy_pid = slot->busy_pid;
		LWLockRelease(slot->lock);
		if (!OidIsValid(dboid))
			continue;
		db = hash_search(known, &dboid, HASH_FIND, NULL);

		/* asked to stop: the postmaster must not start it again */
		if (stop != STOP_NONE && handles[i] != NULL)
			TerminateBackgroundWorker(handles[i]);

		if (db == NULL || !db->seen)
		{
			/* the database is gone; so is its worker, or it soon will be */
			if (handles[i] != NULL)
				TerminateBackgroundWorker(handles[i]);
			if (worker_gone(i))
			{
				free_slot(i);
				if (db != NULL && db->excluded == NULL)
					hash_search(known, &dboid, HASH_REMOVE, NULL);
			}
			continue;
		}

		if (stop == STOP_NONE && !db->wanted && pid != 0)
		{
			hl_stop_worker(dboid, STOP_NOT_WANTED);
			continue;
		}

		if (state == WORKER_SCANNING || state == WORKER_ANNOUNCING ||
			state == WORKER_SLEEPING || state == WORKER_FAILING)
			db->confirmed = true;	/* it found the extension */
		if (stop == STOP_NONE && state != WORKER_ABSENT &&
			state != WORKER_STOPPED)
			continue;			/* running, or being restarted */
		if (!worker_gone(i))
			continue;			/* it will say when it is */

		if (state == WORKER_ABSENT)
		{
			db->absent = (db->requested_at <= started_at);
			db->confirmed = !db->absent;
		}
		else if (stop == STOP_EXTENSION_DROPPED)
			db->absent = (db->requested_at <= stop_at);
		else if (stop == STOP_DATABASE_BUSY)
		{
			if (busy_pid != 0 && BackendPidGetProc(busy_pid) != NULL &&
				!requested_now(dboid, requested, nrequested))
				continue;		/* the statement that needs it is running */
			db->held_back = true;
		}
		free_slot(i);
	}
}

static bool
has_slot(Oid dboid)
{
	bool		found = false;

	LWLockAcquire(hl_shared->lock, LW_SHARED);
	for (int i = 0; i < hl_shared->nslots; i++)
	{
		if (hl_shared->slots[i].dboid == dboid)
			found = true;
	}
	LWLockRelease(hl_shared->lock);
	return found;
}

/*
 * Database db wants a worker and cannot have one now: remember why, for
 * hoplock_workers, and warn once per reason -- only for a database known to
 * have hoplock (one never looked at may well not have it).
 */
static void
cannot_serve(KnownDatabase *db, char *why, const char *hint)
{
	if (strncmp(db->why, why, sizeof(db->why) - 1) != 0)
		db->warned = false;
	strlcpy(db->why, why, sizeof(db->why));
	pfree(why);
	if (db->confirmed && !db->warned)
	{
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("hoplock could not start a worker for database \"%s\"",
						db->name),
				 errdetail("Its leases lapse without being announced until a worker starts: %s.",
						   db->why),
				 errhint("%s", hint)));
		db->warned = true;
	}
}

static void
start_worker(KnownDatabase *db)
{
	BackgroundWorker worker;
	HlWorkerArg arg;
	int			slotno = -1;

	LWLockAcquire(hl_shared->lock, LW_EXCLUSIVE);
	for (int i = 0; i < hl_shared->nslots; i++)
	{
		HlDbSlot   *slot = &hl_shared->slots[i];

		if (!OidIsValid(slot->dboid))
		{
			slotno = i;
			LWLockAcquire(slot->lock, LW_EXCLUSIVE);
			slot->dboid = db->dboid;
			slot->generation++;
			hl_slot_reset(slot);
			slot->state = WORKER_STARTING;
			arg.dboid = db->dboid;
			arg.generation = slot->generation;
			arg.incarnation = hl_shared->incarnation;
			arg.reloads = pg_atomic_read_u64(&hl_shared->reloads);
			LWLockRelease(slot->lock);
			break;
		}
	}
	LWLockRelease(hl_shared->lock);

	if (slotno < 0)
	{
		cannot_serve(db, psprintf("all %d hoplock.max_databases slots are in use",
								  hl_shared->nslots),
					 "Increase \"hoplock.max_databases\", or restrict \"hoplock.databases\".");
		return;
	}

	describe_worker(&worker, "hoplock_worker_main", "hoplock worker");
	snprintf(worker.bgw_name, BGW_MAXLEN, "hoplock worker for database %s",
			 db->name);
	worker.bgw_main_arg = Int32GetDatum(slotno);
	StaticAssertStmt(sizeof(arg) <= BGW_EXTRALEN, "HlWorkerArg does not fit bgw_extra");
	memcpy(worker.bgw_extra, &arg, sizeof(arg));
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handles[slotno]))
	{
		/* no room in max_worker_processes: try again soon */
		handles[slotno] = NULL;
		free_slot(slotno);
		cannot_serve(db, psprintf("no background worker slot free (max_worker_processes = %d)",
								  max_worker_processes),
					 "Increase \"max_worker_processes\".");
		return;
	}
	db->why[0] = '\0';
	db->started_at = GetCurrentTimestamp();
	db->held_back = false;
}

/*
 * Start a worker for every database that wants one and has none, and
 * publish those left without one (hoplock_workers).  Returns whether any
 * was; sets *next_start to when a database held back (MIN_RESTART_MS) may
 * have its worker again (DT_NOEND if none waits).
 */
static bool
reconcile(Oid *requested, int nrequested, bool rescan_all,
		  TimestampTz *next_start)
{
	HASH_SEQ_STATUS status;
	KnownDatabase *db;
	HlUnserved	unserved[HL_MAX_UNSERVED];
	int			nunserved = 0;
	TimestampTz now;

	*next_start = DT_NOEND;

	read_databases();
	for (int i = 0; i < nrequested; i++)
	{
		db = hash_search(known, &requested[i], HASH_FIND, NULL);
		if (db != NULL)
		{
			db->requested_at = GetCurrentTimestamp();
			db->absent = false;
			db->confirmed = true;
		}
	}
	harvest_slots(requested, nrequested);

	now = GetCurrentTimestamp();
	hash_seq_init(&status, known);
	while ((db = hash_seq_search(&status)) != NULL)
	{
		if (rescan_all)
			db->absent = false;
		if (db->excluded != NULL && db->confirmed && db->wanted &&
			nunserved < HL_MAX_UNSERVED)
		{
			unserved[nunserved].dboid = db->dboid;
			strlcpy(unserved[nunserved].reason, db->excluded,
					sizeof(unserved[nunserved].reason));
			nunserved++;
			continue;
		}
		if (!db->seen || !db->wanted || db->absent || has_slot(db->dboid))
		{
			db->why[0] = '\0';
			continue;
		}
		if (db->held_back &&
			now < db->started_at + MIN_RESTART_MS * 1000L)
		{
			*next_start = Min(*next_start,
							  db->started_at + MIN_RESTART_MS * 1000L);
			continue;
		}
		start_worker(db);
		if (db->why[0] != '\0' && nunserved < HL_MAX_UNSERVED)
		{
			unserved[nunserved].dboid = db->dboid;
			snprintf(unserved[nunserved].reason,
					 sizeof(unserved[nunserved].reason), "%s%s",
					 db->confirmed ? "" : "not yet known to use hoplock; ",
					 db->why);
			nunserved++;
		}
	}

	LWLockAcquire(hl_shared->lock, LW_EXCLUSIVE);
	memcpy(hl_shared->unserved, unserved, nunserved * sizeof(HlUnserved));
	hl_shared->nunserved = nunserved;
	LWLockRelease(hl_shared->lock);
	return nunserved > 0;
}

/*
 * A reload read: count it, and wake the workers, so that one that lost
 * the reload's SIGHUP as it started reads the files too (HlWorkerArg).
 */
static void
count_reload(void)
{
	pg_atomic_fetch_add_u64(&hl_shared->reloads, 1);
	for (int i = 0; i < hl_shared->nslots; i++)
	{
		HlDbSlot   *slot = &hl_shared->slots[i];

		LWLockAcquire(slot->lock, LW_SHARED);
		if (slot->latch != NULL)
			SetLatch(slot->latch);
		LWLockRelease(slot->lock);
	}
}

/* The launcher's main loop: start and stop a worker per database. */
void
hoplock_launcher_main(Datum arg)
{
	HASHCTL		ctl;

	/* SIGTERM: exit with code 1, so the postmaster restarts the launcher */
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	if (hl_shared == NULL)
		proc_exit(0);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(KnownDatabase);
	known = hash_create("hoplock databases", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	handles = MemoryContextAllocZero(TopMemoryContext,
									 hl_shared->nslots * sizeof(BackgroundWorkerHandle *));

	/*
	 * Slots left by a launcher that exited stay with their workers; a slot
	 * whose worker is gone is harvested as usual.  A worker the postmaster
	 * restarts into a slot given away meanwhile sees the generation changed
	 * and leaves.
	 */
	LWLockAcquire(hl_shared->lock, LW_EXCLUSIVE);
	hl_shared->launcher_pid = MyProcPid;
	hl_shared->launcher_latch = MyLatch;
	hl_shared->rescan_all = true;
	LWLockRelease(hl_shared->lock);
	before_shmem_exit(launcher_detach, (Datum) 0);
	ereport(LOG, (errmsg("hoplock launcher started")));

	for (;;)
	{
		Oid			requested[HL_MAX_REQUESTS];
		int			nrequested;
		bool		rescan_all;
		bool		any_unserved;
		TimestampTz next_start;
		long		timeout;

		CHECK_FOR_INTERRUPTS();

		LWLockAcquire(hl_shared->lock, LW_EXCLUSIVE);
		nrequested = hl_shared->nrequests;
		memcpy(requested, hl_shared->requests, nrequested * sizeof(Oid));
		hl_shared->nrequests = 0;
		rescan_all = hl_shared->rescan_all;
		hl_shared->rescan_all = false;
		LWLockRelease(hl_shared->lock);

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			rescan_all = true;
			count_reload();
		}

		/*
		 * On every wake-up (a request, a worker that started or stopped, a
		 * reload, the naptime): new databases get a worker, workers that
		 * went away are replaced.  Databases found without the extension
		 * are only looked at again on request.
		 */
		any_unserved = reconcile(requested, nrequested, rescan_all,
								 &next_start);

		timeout = any_unserved ? Min(RETRY_UNSERVED_MS, hl_naptime * 1000L) :
			hl_naptime * 1000L;
		if (next_start != DT_NOEND)
			timeout = Min(timeout, hl_ms_until(GetCurrentTimestamp(),
											   next_start));
		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 timeout, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
}
