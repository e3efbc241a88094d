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
 *		- CREATE DATABASE ends (ProcessUtility hook),
 *		- hoplock.databases changes (SIGHUP),
 *		- every hoplock.naptime, as a safety net.
 *
 *		DROP EXTENSION hoplock stops the database's worker when it commits
 *		(object access hook).  DROP DATABASE, CREATE DATABASE from it as a
 *		template, ALTER DATABASE RENAME and SET TABLESPACE refuse while
 *		any session is connected to the database: the ProcessUtility hook
 *		stops its worker before the statement runs, and has the launcher
 *		start it again when the statement is over, so the worker never
 *		gets in their way.
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
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "postmaster/bgworker.h"
#include "postmaster/interrupt.h"
#include "tcop/tcopprot.h"
#include "storage/ipc.h"
#include "storage/latch.h"
#include "tcop/utility.h"
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
	TimestampTz requested_at;	/* last asked to serve it (CREATE
								 * EXTENSION...): an "absent" from a worker
								 * started before that does not count */
	bool		seen;			/* in the latest list of databases */
	bool		wanted;			/* allowed by hoplock.databases */
	char		name[NAMEDATALEN];
} KnownDatabase;

/* How long a worker stopped for a statement that needs its database alone
 * stays stopped if nobody says the statement is over */
#define BUSY_GRACE_US	(60 * USECS_PER_SEC)

static HTAB *known = NULL;
static BackgroundWorkerHandle **handles = NULL;
static bool slots_full_reported = false;

static object_access_hook_type prev_object_access_hook = NULL;
static ProcessUtility_hook_type prev_utility_hook = NULL;

/* ---------------------------------------------------------------------
 * Registration and hooks (every backend)
 * ---------------------------------------------------------------------
 */
/*
 * A background worker of hoplock's: connected, started once recovery is
 * over (so none runs on a hot standby), restarted a second after an error.
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

void
hoplock_register_launcher(void)
{
	BackgroundWorker worker;

	describe_worker(&worker, "hoplock_launcher_main", "hoplock launcher");
	snprintf(worker.bgw_name, BGW_MAXLEN, "hoplock launcher");
	RegisterBackgroundWorker(&worker);
}

static void
object_access(ObjectAccessType access, Oid classId, Oid objectId,
			  int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);

	/* DROP EXTENSION hoplock, or a DROP ... CASCADE that takes it along */
	if (hoplock_shared != NULL && access == OAT_DROP &&
		classId == ExtensionRelationId && subId == 0)
	{
		char	   *name = get_extension_name(objectId);

		if (name != NULL && strcmp(name, "hoplock") == 0)
			at_commit_stop_worker(MyDatabaseId);
	}
}

static Oid
database_oid_of(const char *name)
{
	return name != NULL ? get_database_oid(name, true) : InvalidOid;
}

/*
 * The database a utility statement needs free of other sessions, if any:
 * DROP DATABASE, CREATE DATABASE's template, ALTER DATABASE ... RENAME and
 * ALTER DATABASE ... SET TABLESPACE all refuse while any session,
 * hoplock's worker included, is connected to it.
 */
static Oid
database_needed_alone(Node *stmt)
{
	ListCell   *lc;

	switch (nodeTag(stmt))
	{
		case T_DropdbStmt:
			return database_oid_of(((DropdbStmt *) stmt)->dbname);
		case T_CreatedbStmt:
			foreach(lc, ((CreatedbStmt *) stmt)->options)
			{
				DefElem    *opt = (DefElem *) lfirst(lc);

				if (strcmp(opt->defname, "template") == 0)
					return database_oid_of(defGetString(opt));
			}
			return database_oid_of("template1");
		case T_RenameStmt:
			if (((RenameStmt *) stmt)->renameType == OBJECT_DATABASE)
				return database_oid_of(((RenameStmt *) stmt)->subname);
			return InvalidOid;
		case T_AlterDatabaseStmt:
			foreach(lc, ((AlterDatabaseStmt *) stmt)->options)
			{
				DefElem    *opt = (DefElem *) lfirst(lc);

				if (strcmp(opt->defname, "tablespace") == 0)
					return database_oid_of(((AlterDatabaseStmt *) stmt)->dbname);
			}
			return InvalidOid;
		default:
			return InvalidOid;
	}
}

/*
 * Stop the worker of a database that a statement needs alone, before the
 * statement checks for other sessions; afterwards, whether it worked or
 * not, have the launcher look at that database again (and at the one
 * CREATE DATABASE made).
 */
static void
utility(HOPLOCK_UTILITY_ARGS)
{
	Node	   *stmt = pstmt->utilityStmt;
	Oid			alone = InvalidOid;

	if (hoplock_shared != NULL)
	{
		alone = database_needed_alone(stmt);
		if (OidIsValid(alone))
			hoplock_stop_worker(alone, STOP_DATABASE_BUSY);
	}

	PG_TRY();
	{
		if (prev_utility_hook)
			HOPLOCK_UTILITY_CALL(prev_utility_hook);
		else
			HOPLOCK_UTILITY_CALL(standard_ProcessUtility);
	}
	PG_FINALLY();
	{
		if (OidIsValid(alone))
			hoplock_wake_launcher(alone);
	}
	PG_END_TRY();

	if (hoplock_shared != NULL && IsA(stmt, CreatedbStmt))
		hoplock_wake_launcher(database_oid_of(((CreatedbStmt *) stmt)->dbname));
}

void
hoplock_install_hooks(void)
{
	prev_object_access_hook = object_access_hook;
	object_access_hook = object_access;
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = utility;
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

/* Has the worker of slot i exited? */
static bool
worker_gone(int i)
{
	pid_t		pid;

	if (handles[i] != NULL)
		return GetBackgroundWorkerPid(handles[i], &pid) == BGWH_STOPPED;
	/* started by an earlier launcher: trust the slot */
	return hoplock_shared->slots[i].pid == 0;
}

/* Free slot i; its worker must have exited. */
static void
free_slot(int i)
{
	HoplockDbSlot *slot = &hoplock_shared->slots[i];

	if (handles[i] != NULL)
	{
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
	slot->started_at = 0;
	SpinLockRelease(&slot->mutex);
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
	TimestampTz now = GetCurrentTimestamp();

	for (int i = 0; i < hoplock_shared->nslots; i++)
	{
		HoplockDbSlot *slot = &hoplock_shared->slots[i];
		Oid			dboid = slot->dboid;
		KnownDatabase *db;
		HoplockWorkerState state;
		HoplockStopReason stop;
		TimestampTz stop_at;
		TimestampTz started_at;
		pid_t		pid;

		if (!OidIsValid(dboid))
			continue;
		SpinLockAcquire(&slot->mutex);
		state = slot->state;
		stop = slot->stop;
		stop_at = slot->stop_requested_at;
		started_at = slot->started_at;
		pid = slot->pid;
		SpinLockRelease(&slot->mutex);
		db = hash_search(known, &dboid, HASH_FIND, NULL);

		if (db == NULL || !db->seen)
		{
			/* the database is gone; so is its worker, or it soon will be */
			if (handles[i] != NULL)
				TerminateBackgroundWorker(handles[i]);
			if (worker_gone(i))
			{
				free_slot(i);
				if (db != NULL)
					hash_search(known, &dboid, HASH_REMOVE, NULL);
			}
			continue;
		}

		if (state == WORKER_ABSENT || state == WORKER_STOPPED)
		{
			if (!worker_gone(i))
				continue;
			if (state == WORKER_ABSENT)
				db->absent = (db->requested_at <= started_at);
			else if (stop == STOP_EXTENSION_DROPPED)
				db->absent = (db->requested_at <= stop_at);
			else if (stop == STOP_DATABASE_BUSY &&
					 !requested_now(dboid, requested, nrequested) &&
					 now - stop_at < BUSY_GRACE_US)
				continue;		/* the statement that wanted it is running */
			free_slot(i);
		}
		else if (!db->wanted && stop == STOP_NONE && pid != 0)
			hoplock_stop_worker(dboid, STOP_NOT_WANTED);

		/*
		 * Any other state with no process: the worker failed, and the
		 * postmaster restarts it after bgw_restart_time.
		 */
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
	HoplockWorkerArg arg;
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
	arg.dboid = db->dboid;
	arg.generation = ++hoplock_shared->slots[slotno].generation;
	SpinLockRelease(&hoplock_shared->slots[slotno].mutex);

	describe_worker(&worker, "hoplock_worker_main", "hoplock worker");
	snprintf(worker.bgw_name, BGW_MAXLEN, "hoplock worker for database %s",
			 db->name);
	worker.bgw_main_arg = Int32GetDatum(slotno);
	memcpy(worker.bgw_extra, &arg, sizeof(arg));
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
		{
			db->requested_at = GetCurrentTimestamp();
			db->absent = false;
		}
	}
	harvest_slots(requested, nrequested);

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

	/* SIGTERM: exit with code 1, so the postmaster restarts the launcher */
	pqsignal(SIGHUP, SignalHandlerForConfigReload);
	pqsignal(SIGTERM, die);
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

	/*
	 * Slots left by a launcher that exited stay with their workers; a slot
	 * whose worker is gone is harvested as usual.  A worker the postmaster
	 * restarts into a slot given away meanwhile sees the generation changed
	 * and leaves.
	 */

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
}
