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
 *		- CREATE EXTENSION hoplock commits (the install script asks it to),
 *		- CREATE DATABASE commits (object access hook),
 *		- hoplock.databases changes (SIGHUP),
 *		- every hoplock.naptime, as a safety net.
 *
 *		DROP EXTENSION hoplock stops the database's worker when it
 *		commits.  DROP DATABASE stops it at once, from the dropping
 *		backend's object access hook, before the drop checks for other
 *		sessions in the database, so the worker never blocks the drop.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "access/htup_details.h"
#include "access/table.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "utils/builtins.h"
#include "utils/hsearch.h"
#include "utils/memutils.h"
#include "utils/snapmgr.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

/* A database the launcher knows of */
typedef struct KnownDatabase
{
	Oid			dboid;			/* hash key */
	bool		absent;			/* its worker found no extension */
	bool		seen;			/* in the latest list of databases */
	bool		wanted;			/* allowed by hoplock.databases */
	char		name[NAMEDATALEN];
} KnownDatabase;

/* How long a worker stopped for DROP DATABASE waits to be restarted, in
 * case the drop failed */
#define DROP_GRACE_US	(10 * USECS_PER_SEC)

static HTAB *known = NULL;
static BackgroundWorkerHandle **handles = NULL;
static bool slots_full_reported = false;

static object_access_hook_type prev_object_access_hook = NULL;

/* ---------------------------------------------------------------------
 * Registration and hooks (every backend)
 * ---------------------------------------------------------------------
 */
void
hoplock_register_launcher(void)
{
	BackgroundWorker worker;

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "hoplock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "hoplock_launcher_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "hoplock launcher");
	snprintf(worker.bgw_type, BGW_MAXLEN, "hoplock launcher");
	RegisterBackgroundWorker(&worker);
}

static void
object_access(ObjectAccessType access, Oid classId, Oid objectId,
			  int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);

	if (hoplock_shared == NULL || subId != 0)
		return;

	if (access == OAT_DROP && classId == DatabaseRelationId)
		hoplock_stop_worker(objectId, STOP_DATABASE_DROPPED);
	else if (access == OAT_DROP && classId == ExtensionRelationId)
	{
		char	   *name = get_extension_name(objectId);

		if (name != NULL && strcmp(name, "hoplock") == 0)
			at_commit_stop_worker(MyDatabaseId);
	}
	else if (access == OAT_POST_CREATE && classId == DatabaseRelationId)
		at_commit_wake_launcher(objectId);
}

void
hoplock_install_hooks(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = object_access;
}

/* ---------------------------------------------------------------------
 * The launcher
 * ---------------------------------------------------------------------
 */
static void
launcher_detach(int code, Datum arg)
{
	SpinLockAcquire(&hoplock_shared->mutex);
	hoplock_shared->launcher_pid = 0;
	hoplock_shared->launcher_latch = NULL;
	SpinLockRelease(&hoplock_shared->mutex);
	ereport(LOG, (errmsg("hoplock launcher stopped")));
}

/* Is "name" one of hoplock.databases (or is that setting empty)? */
static bool
database_wanted(const char *name)
{
	char	   *list;
	List	   *names;
	ListCell   *lc;
	bool		wanted = false;

	if (hoplock_databases == NULL || hoplock_databases[0] == '\0')
		return true;
	list = pstrdup(hoplock_databases);
	if (!SplitIdentifierString(list, ',', &names))
		return false;			/* the check hook keeps this from happening */
	foreach(lc, names)
	{
		if (strcmp((char *) lfirst(lc), name) == 0)
			wanted = true;
	}
	return wanted;
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
		db->seen = false;

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
			continue;
		db = hash_search(known, &form->oid, HASH_ENTER, &found);
		if (!found)
			db->absent = false;
		db->seen = true;
		strlcpy(db->name, NameStr(form->datname), NAMEDATALEN);
		db->wanted = database_wanted(db->name);
	}
	table_endscan(scan);
	table_close(rel, AccessShareLock);
	PopActiveSnapshot();
	CommitTransactionCommand();
	pgstat_report_activity(STATE_IDLE, NULL);
}

static void
free_slot(int i)
{
	HoplockDbSlot *slot = &hoplock_shared->slots[i];

	if (handles[i] != NULL)
	{
		TerminateBackgroundWorker(handles[i]);
		pfree(handles[i]);
		handles[i] = NULL;
	}
	SpinLockAcquire(&hoplock_shared->mutex);
	slot->dboid = InvalidOid;
	SpinLockRelease(&hoplock_shared->mutex);
	SpinLockAcquire(&slot->mutex);
	slot->state = WORKER_FREE;
	slot->stop = STOP_NONE;
	slot->pid = 0;
	slot->latch = NULL;
	slot->head = slot->tail = 0;
	slot->overflowed = false;
	slot->announced = 0;
	slot->tracked = 0;
	slot->last_lag = 0;
	slot->next_expiry = 0;
	slot->last_wakeup = 0;
	SpinLockRelease(&slot->mutex);
}

/*
 * Collect slots whose worker is done, and stop those that are no longer
 * wanted.
 */
static void
harvest_slots(void)
{
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < hoplock_shared->nslots; i++)
	{
		HoplockDbSlot *slot = &hoplock_shared->slots[i];
		Oid			dboid = slot->dboid;
		KnownDatabase *db;
		HoplockWorkerState state;
		HoplockStopReason stop;
		TimestampTz stop_at;
		pid_t		pid;

		if (!OidIsValid(dboid))
			continue;
		SpinLockAcquire(&slot->mutex);
		state = slot->state;
		stop = slot->stop;
		stop_at = slot->stop_requested_at;
		pid = slot->pid;
		SpinLockRelease(&slot->mutex);
		db = hash_search(known, &dboid, HASH_FIND, NULL);

		if (db == NULL || !db->seen)
		{
			/* the database is gone */
			free_slot(i);
			if (db != NULL)
				hash_search(known, &dboid, HASH_REMOVE, NULL);
		}
		else if (state == WORKER_ABSENT)
		{
			db->absent = true;
			free_slot(i);
		}
		else if (state == WORKER_STOPPED)
		{
			/* after a failed DROP DATABASE, wait a little first */
			if (stop != STOP_DATABASE_DROPPED || now - stop_at > DROP_GRACE_US)
				free_slot(i);
		}
		else if (!db->wanted && stop == STOP_NONE && pid != 0)
			hoplock_stop_worker(dboid, STOP_NOT_WANTED);
	}
}

static bool
has_slot(Oid dboid)
{
	for (int i = 0; i < hoplock_shared->nslots; i++)
	{
		if (hoplock_shared->slots[i].dboid == dboid)
			return true;
	}
	return false;
}

static void
start_worker(KnownDatabase *db)
{
	BackgroundWorker worker;
	int			slotno = -1;

	SpinLockAcquire(&hoplock_shared->mutex);
	for (int i = 0; i < hoplock_shared->nslots; i++)
	{
		if (!OidIsValid(hoplock_shared->slots[i].dboid))
		{
			slotno = i;
			hoplock_shared->slots[i].dboid = db->dboid;
			break;
		}
	}
	SpinLockRelease(&hoplock_shared->mutex);

	if (slotno < 0)
	{
		if (!slots_full_reported)
			ereport(WARNING,
					(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
					 errmsg("hoplock cannot serve database \"%s\"", db->name),
					 errdetail("All %d worker slots are in use.",
							   hoplock_shared->nslots),
					 errhint("Increase \"hoplock.max_databases\", or restrict \"hoplock.databases\".")));
		slots_full_reported = true;
		return;
	}

	SpinLockAcquire(&hoplock_shared->slots[slotno].mutex);
	hoplock_shared->slots[slotno].state = WORKER_STARTING;
	hoplock_shared->slots[slotno].stop = STOP_NONE;
	SpinLockRelease(&hoplock_shared->slots[slotno].mutex);

	memset(&worker, 0, sizeof(worker));
	worker.bgw_flags = BGWORKER_SHMEM_ACCESS |
		BGWORKER_BACKEND_DATABASE_CONNECTION;
	worker.bgw_start_time = BgWorkerStart_RecoveryFinished;
	worker.bgw_restart_time = 1;
	snprintf(worker.bgw_library_name, BGW_MAXLEN, "hoplock");
	snprintf(worker.bgw_function_name, BGW_MAXLEN, "hoplock_worker_main");
	snprintf(worker.bgw_name, BGW_MAXLEN, "hoplock worker for database %s",
			 db->name);
	snprintf(worker.bgw_type, BGW_MAXLEN, "hoplock worker");
	worker.bgw_main_arg = Int32GetDatum(slotno);
	memcpy(worker.bgw_extra, &db->dboid, sizeof(Oid));
	worker.bgw_notify_pid = MyProcPid;

	if (!RegisterDynamicBackgroundWorker(&worker, &handles[slotno]))
	{
		/* no room in max_worker_processes: try again later */
		handles[slotno] = NULL;
		SpinLockAcquire(&hoplock_shared->mutex);
		hoplock_shared->slots[slotno].dboid = InvalidOid;
		SpinLockRelease(&hoplock_shared->mutex);
		SpinLockAcquire(&hoplock_shared->slots[slotno].mutex);
		hoplock_shared->slots[slotno].state = WORKER_FREE;
		SpinLockRelease(&hoplock_shared->slots[slotno].mutex);
		ereport(WARNING,
				(errcode(ERRCODE_CONFIGURATION_LIMIT_EXCEEDED),
				 errmsg("hoplock could not start a worker for database \"%s\"",
						db->name),
				 errhint("Increase \"max_worker_processes\".")));
	}
}

/* Start a worker for every database that wants one and has none. */
static void
reconcile(Oid *requested, int nrequested, bool rescan_all)
{
	HASH_SEQ_STATUS status;
	KnownDatabase *db;

	read_databases();
	for (int i = 0; i < nrequested; i++)
	{
		db = hash_search(known, &requested[i], HASH_FIND, NULL);
		if (db != NULL)
			db->absent = false;
	}
	harvest_slots();

	hash_seq_init(&status, known);
	while ((db = hash_seq_search(&status)) != NULL)
	{
		if (rescan_all)
			db->absent = false;
		if (db->seen && db->wanted && !db->absent && !has_slot(db->dboid))
			start_worker(db);
	}
}

void
hoplock_launcher_main(Datum arg)
{
	HASHCTL		ctl;

	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, SignalHandlerForShutdownRequest);
	BackgroundWorkerUnblockSignals();
	BackgroundWorkerInitializeConnection(NULL, NULL, 0);

	if (hoplock_shared == NULL)
		proc_exit(0);

	memset(&ctl, 0, sizeof(ctl));
	ctl.keysize = sizeof(Oid);
	ctl.entrysize = sizeof(KnownDatabase);
	known = hash_create("hoplock databases", 64, &ctl, HASH_ELEM | HASH_BLOBS);
	handles = MemoryContextAllocZero(TopMemoryContext,
									 hoplock_shared->nslots * sizeof(BackgroundWorkerHandle *));

	/* slots left by a launcher that exited are ours now */
	for (int i = 0; i < hoplock_shared->nslots; i++)
	{
		if (OidIsValid(hoplock_shared->slots[i].dboid) &&
			hoplock_shared->slots[i].pid == 0)
			free_slot(i);
	}

	SpinLockAcquire(&hoplock_shared->mutex);
	hoplock_shared->launcher_pid = MyProcPid;
	hoplock_shared->launcher_latch = MyLatch;
	hoplock_shared->rescan_all = true;
	SpinLockRelease(&hoplock_shared->mutex);
	before_shmem_exit(launcher_detach, (Datum) 0);
	ereport(LOG, (errmsg("hoplock launcher started")));

	for (;;)
	{
		Oid			requested[lengthof(hoplock_shared->requests)];
		int			nrequested;
		bool		rescan_all;

		CHECK_FOR_INTERRUPTS();
		if (ShutdownRequestPending)
			break;

		SpinLockAcquire(&hoplock_shared->mutex);
		nrequested = hoplock_shared->nrequests;
		memcpy(requested, hoplock_shared->requests, nrequested * sizeof(Oid));
		hoplock_shared->nrequests = 0;
		rescan_all = hoplock_shared->rescan_all;
		hoplock_shared->rescan_all = false;
		SpinLockRelease(&hoplock_shared->mutex);

		if (ConfigReloadPending)
		{
			ConfigReloadPending = false;
			ProcessConfigFile(PGC_SIGHUP);
			slots_full_reported = false;
			rescan_all = true;
		}

		/*
		 * On every wake-up (a request, a worker that started or stopped,
		 * a reload, the naptime): new databases get a worker, workers that
		 * went away are replaced.  Databases found without the extension
		 * are only looked at again on request.
		 */
		reconcile(requested, nrequested, rescan_all);

		(void) WaitLatch(MyLatch, WL_LATCH_SET | WL_TIMEOUT | WL_EXIT_ON_PM_DEATH,
						 hoplock_naptime * 1000L, PG_WAIT_EXTENSION);
		ResetLatch(MyLatch);
	}
	proc_exit(0);
}
