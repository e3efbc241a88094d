/*-------------------------------------------------------------------------
 *
 * dbhooks.c
 *		What backends tell the launcher about databases and the extension:
 *
 *		- CREATE EXTENSION hoplock: the install script asks for this
 *		  database to be served, once it commits;
 *		- DROP EXTENSION hoplock (or a DROP ... CASCADE that takes it
 *		  along): the database's worker stops once it commits (object
 *		  access hook);
 *		- DROP DATABASE, CREATE DATABASE ... TEMPLATE, ALTER DATABASE ...
 *		  RENAME and ... SET TABLESPACE refuse while any session, hoplock's
 *		  worker included, is connected to the database.  The
 *		  ProcessUtility hook stops its worker just before such a statement
 *		  runs -- only if the caller has the rights the statement checks
 *		  (owner, CREATEDB, template), so that nobody else can keep a
 *		  database's worker down -- and has the launcher start it again as
 *		  soon as the statement is over (the launcher waits for the worker
 *		  to be gone and the statement to be over, in whichever order, and
 *		  starts a database's worker so at most once a second);
 *		- CREATE DATABASE: the new database may have the extension (from
 *		  its template);
 *		- DISCARD ALL: the terms bound to the session end (session.c),
 *		  hoplock preloaded or not;
 *		- an SQL statement that wrote one of hoplock's tables (ExecutorEnd
 *		  hook; COPY and TRUNCATE through the ProcessUtility hook): the
 *		  next value minted begins a branch above the data (branch.c), and
 *		  rows removed from the event log are recorded as dropped
 *		  (delivery.c).
 *
 *		The first two are this file's own end-of-transaction work, decided
 *		by whether the extension is there when the transaction commits
 *		(whatever subtransactions created and dropped on the way); a
 *		transaction that has any cannot be prepared, since a prepared
 *		transaction would lose it.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "branch.h"
#include "compat.h"
#include "delivery.h"
#include "expiries.h"
#include "hoplock.h"
#include "keepalive.h"
#include "session.h"
#include "shmem.h"
#include "workers.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/namespace.h"
#include "catalog/objectaccess.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "catalog/pg_extension.h"
#include "commands/dbcommands.h"
#include "commands/defrem.h"
#include "commands/extension.h"
#include "datatype/timestamp.h"
#include "executor/executor.h"
#include "miscadmin.h"
#include "nodes/parsenodes.h"
#include "parser/parsetree.h"
#include "tcop/utility.h"
#include "utils/acl.h"
#include "utils/syscache.h"

static object_access_hook_type prev_object_access_hook = NULL;
static ProcessUtility_hook_type prev_utility_hook = NULL;
static ExecutorEnd_hook_type prev_executor_end = NULL;

/* End-of-transaction work */
static bool wake_at_commit = false; /* CREATE EXTENSION */
static bool read_again_at_commit = false;	/* ALTER EXTENSION, COPY into
											 * hoplock's tables */
static bool stop_at_commit = false; /* DROP EXTENSION */
static bool untrust_at_commit = false;	/* SQL wrote hoplock's tables: the
										 * expiry set (expiries.c) may not
										 * say all that is announced */
static Oid	created_database = InvalidOid;	/* CREATE DATABASE */
static bool database_altered = false;	/* ALTER DATABASE ... IS_TEMPLATE,
										 * ALLOW_CONNECTIONS */
static bool installed_at_commit = false;	/* the extension is there when
											 * the transaction commits */

void
hl_wake_launcher_at_commit(void)
{
	wake_at_commit = true;
}

static void
object_access(ObjectAccessType access, Oid classId, Oid objectId,
			  int subId, void *arg)
{
	if (prev_object_access_hook)
		prev_object_access_hook(access, classId, objectId, subId, arg);

	if (access == OAT_DROP && classId == ExtensionRelationId && subId == 0)
	{
		char	   *name = get_extension_name(objectId);

		if (name == NULL || strcmp(name, "hoplock") != 0)
			return;

		/*
		 * Only a superuser may create hoplock, so only a superuser may drop
		 * it -- also through DROP SCHEMA ... CASCADE or DROP OWNED by the
		 * owner of the schema it was installed in: dropping it forgets every
		 * lease, and the generations start again at 1.
		 */
		if (!superuser())
			ereport(ERROR,
					(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
					 errmsg("permission denied to drop extension \"hoplock\""),
					 errdetail("Dropping it forgets every lease and the generations they reached."),
					 errhint("Only a superuser may drop it.")));
		if (hl_shared != NULL)
			stop_at_commit = true;
	}
}

/* The OID of database "name" and whether it is a template; false if none */
static bool
lookup_database(const char *name, Oid *dboid, bool *istemplate)
{
	HeapTuple	tuple;

	*dboid = name != NULL ? get_database_oid(name, true) : InvalidOid;
	if (!OidIsValid(*dboid))
		return false;
	tuple = SearchSysCache1(DATABASEOID, ObjectIdGetDatum(*dboid));
	if (!HeapTupleIsValid(tuple))
		return false;
	*istemplate = ((Form_pg_database) GETSTRUCT(tuple))->datistemplate;
	ReleaseSysCache(tuple);
	return true;
}

static bool
has_createdb(void)
{
	HeapTuple	tuple;
	bool		result = false;

	if (superuser())
		return true;
	tuple = SearchSysCache1(AUTHOID, ObjectIdGetDatum(GetUserId()));
	if (HeapTupleIsValid(tuple))
	{
		result = ((Form_pg_authid) GETSTRUCT(tuple))->rolcreatedb;
		ReleaseSysCache(tuple);
	}
	return result;
}

static bool
owns_database(Oid dboid)
{
	return superuser() || hl_database_owner(dboid);
}

static const char *
option_string(DefElem *opt)
{
	return opt->arg != NULL ? defGetString(opt) : NULL;
}

/*
 * The database a utility statement needs free of other sessions, if the
 * caller may run that statement on it: the rights the statement itself
 * checks (dbcommands.c) come first.
 */
static Oid
database_needed_alone(Node *stmt)
{
	ListCell   *lc;
	Oid			dboid = InvalidOid;
	bool		istemplate = false;

	switch (nodeTag(stmt))
	{
		case T_DropdbStmt:
			if (lookup_database(((DropdbStmt *) stmt)->dbname, &dboid,
								&istemplate) &&
				dboid != MyDatabaseId && owns_database(dboid))
				return dboid;
			return InvalidOid;

		case T_CreatedbStmt:
			{
				const char *template = "template1";

				foreach(lc, ((CreatedbStmt *) stmt)->options)
				{
					DefElem    *opt = (DefElem *) lfirst(lc);

					/* TEMPLATE DEFAULT has no argument: template1 */
					if (strcmp(opt->defname, "template") == 0 &&
						option_string(opt) != NULL)
						template = option_string(opt);
				}
				if (has_createdb() &&
					lookup_database(template, &dboid, &istemplate) &&
					(istemplate || owns_database(dboid)))
					return dboid;
				return InvalidOid;
			}

		case T_RenameStmt:
			if (((RenameStmt *) stmt)->renameType == OBJECT_DATABASE &&
				lookup_database(((RenameStmt *) stmt)->subname, &dboid,
								&istemplate) &&
				dboid != MyDatabaseId && owns_database(dboid) &&
				has_createdb())
				return dboid;
			return InvalidOid;

		case T_AlterDatabaseStmt:
			foreach(lc, ((AlterDatabaseStmt *) stmt)->options)
			{
				DefElem    *opt = (DefElem *) lfirst(lc);

				if (strcmp(opt->defname, "tablespace") == 0 &&
					lookup_database(((AlterDatabaseStmt *) stmt)->dbname,
									&dboid, &istemplate) &&
					dboid != MyDatabaseId && owns_database(dboid))
					return dboid;
			}
			return InvalidOid;

		default:
			return InvalidOid;
	}
}

/* The statement that needed "dboid" alone is over. */
static void
statement_over(Oid dboid)
{
	HlDbSlot   *slot = hl_slot_for(dboid);

	/* only a database whose worker was stopped needs one started again */
	if (slot != NULL)
	{
		LWLockAcquire(slot->lock, LW_EXCLUSIVE);
		if (slot->dboid == dboid && slot->busy_pid == MyProcPid)
			slot->busy_pid = 0;
		LWLockRelease(slot->lock);
		hl_wake_launcher(dboid);
	}
}

/*
 * Does the statement change what the expiry worker must know, behind the
 * calls that tell it: an update of the extension (a worker waiting for it
 * can start again), or a COPY into one of its tables (pg_restore's, which
 * brings running terms in after CREATE EXTENSION started the worker)?
 */
static bool
changes_state_behind_hoplock(Node *stmt)
{
	if (IsA(stmt, AlterExtensionStmt))
		return strcmp(((AlterExtensionStmt *) stmt)->extname, "hoplock") == 0;
	if (IsA(stmt, CopyStmt))
	{
		CopyStmt   *copy = (CopyStmt *) stmt;

		return copy->is_from && copy->relation != NULL &&
			copy->relation->schemaname != NULL &&
			strcmp(copy->relation->schemaname, HL_SCHEMA) == 0;
	}
	return false;
}

/*
 * Does the statement write rows of one of hoplock's tables (a restore's
 * COPY, a TRUNCATE)?  Then the data may be a copy of the past (branch.c).
 */
static bool
writes_hoplock_table(Node *stmt)
{
	if (IsA(stmt, CopyStmt))
	{
		CopyStmt   *copy = (CopyStmt *) stmt;

		return copy->is_from && copy->relation != NULL &&
			hl_branch_is_hoplock_table(RangeVarGetRelid(copy->relation,
														NoLock, true));
	}
	if (IsA(stmt, TruncateStmt))
	{
		ListCell   *lc;

		foreach(lc, ((TruncateStmt *) stmt)->relations)
		{
			if (hl_branch_is_hoplock_table(RangeVarGetRelid(lfirst_node(RangeVar, lc),
															NoLock, true)))
				return true;
		}
	}
	return false;
}

/* Does the statement truncate the event log? */
static bool
truncates_event_log(Node *stmt)
{
	ListCell   *lc;

	if (!IsA(stmt, TruncateStmt))
		return false;
	foreach(lc, ((TruncateStmt *) stmt)->relations)
	{
		if (hl_branch_is_event_log(RangeVarGetRelid(lfirst_node(RangeVar, lc),
													NoLock, true)))
			return true;
	}
	return false;
}

/*
 * Stop the worker of a database that a statement needs alone, before the
 * statement checks for other sessions; afterwards, whether it worked or
 * not, have the launcher look at that database again (and at the one
 * CREATE DATABASE made).
 */
static void
utility(HL_UTILITY_ARGS)
{
	Node	   *stmt = pstmt->utilityStmt;
	volatile Oid alone = InvalidOid;

	if (hl_shared != NULL)
	{
		alone = database_needed_alone(stmt);
		if (OidIsValid(alone))
			hl_stop_worker(alone, STOP_DATABASE_BUSY);
	}

	PG_TRY();
	{
		if (prev_utility_hook)
			HL_UTILITY_CALL(prev_utility_hook);
		else
			HL_UTILITY_CALL(standard_ProcessUtility);
	}
	PG_FINALLY();
	{
		if (OidIsValid(alone))
			statement_over(alone);
	}
	PG_END_TRY();

	/* the launcher sees the new database once this commits */
	if (hl_shared != NULL && IsA(stmt, CreatedbStmt))
		created_database = get_database_oid(((CreatedbStmt *) stmt)->dbname,
											true);
	if (hl_shared != NULL && changes_state_behind_hoplock(stmt))
		read_again_at_commit = true;
	/*
	 * The session was reset: so are the terms bound to it (hoplock
	 * preloaded or not: a session that bound terms loaded it).
	 */
	if (IsA(stmt, DiscardStmt) &&
		((DiscardStmt *) stmt)->target == DISCARD_ALL)
		hl_session_discard();
	if (writes_hoplock_table(stmt))
	{
		hl_branch_note_sql_write();
		hl_keepalives_written();
		hl_expiries_note_sql_write();
		untrust_at_commit = true;
		if (truncates_event_log(stmt))
			hl_delivery_note_removal();
	}
	/*
	 * IS_TEMPLATE, ALLOW_CONNECTIONS: the launcher reads pg_database again
	 * once this commits.  Only that: a wake-up that asked it to look into
	 * every database would let any database owner start a stream of
	 * background workers with a stream of ALTER DATABASE.
	 */
	if (hl_shared != NULL && IsA(stmt, AlterDatabaseStmt))
	{
		ListCell   *lc;

		foreach(lc, ((AlterDatabaseStmt *) stmt)->options)
		{
			DefElem    *opt = (DefElem *) lfirst(lc);

			if (strcmp(opt->defname, "is_template") == 0 ||
				strcmp(opt->defname, "allow_connections") == 0)
				database_altered = true;
		}
	}
}

static void
dbhooks_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_PREPARE:
			if (wake_at_commit || stop_at_commit)
				ereport(ERROR,
						(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
						 errmsg("cannot PREPARE a transaction that has created or dropped extension \"hoplock\"")));
			break;
		case XACT_EVENT_PRE_COMMIT:
			/* whatever was created and dropped, what is there in the end */
			if (wake_at_commit || stop_at_commit)
				installed_at_commit =
					OidIsValid(get_extension_oid("hoplock", true));

			/*
			 * Rows written by SQL (a restore's COPY of a mass expiry's mark
			 * and of its lease rows, say) may hold announced terms the set
			 * knows nothing of: from before they can be seen until the
			 * worker has looked at the mark again, writers ask the event
			 * log.  (Again at the commit: the worker may have looked in
			 * between, before the rows could be seen.)
			 */
			if (untrust_at_commit)
				hl_expiries_untrust();
			break;
		case XACT_EVENT_COMMIT:
			/* a worker of the dropped extension must go, even if it is back */
			if (stop_at_commit)
				hl_stop_worker(MyDatabaseId, STOP_EXTENSION_DROPPED);
			if ((wake_at_commit || stop_at_commit) && installed_at_commit)
				hl_wake_launcher(MyDatabaseId);
			if (OidIsValid(created_database))
				hl_wake_launcher(created_database);
			if (database_altered)
				hl_nudge_launcher();
			/* (the worker sees it at its next round) */
			if (untrust_at_commit)
				hl_expiries_untrust();
			if (read_again_at_commit)
			{
				HlMessage	again;

				memset(&again, 0, sizeof(again));
				again.kind = HL_MSG_READ_AGAIN;
				again.expires_at = DT_NOBEGIN;
				hl_post(MyDatabaseId, &again);
			}
			wake_at_commit = stop_at_commit = read_again_at_commit = false;
			untrust_at_commit = false;
			database_altered = false;
			created_database = InvalidOid;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			wake_at_commit = stop_at_commit = read_again_at_commit = false;
			untrust_at_commit = false;
			database_altered = false;
			created_database = InvalidOid;
			break;
		default:
			break;
	}
}

/*
 * ExecutorEnd: a statement that wrote one of hoplock's tables (an EXPLAIN
 * without ANALYZE ran nothing)
 */
static void
executor_end(QueryDesc *queryDesc)
{
	bool		wrote = false;
	bool		removed_events = false;
	ListCell   *lc;

	if (queryDesc->plannedstmt != NULL && IsTransactionState() &&
		queryDesc->estate != NULL &&
		(queryDesc->estate->es_top_eflags & EXEC_FLAG_EXPLAIN_ONLY) == 0)
	{
		foreach(lc, queryDesc->plannedstmt->resultRelations)
		{
			RangeTblEntry *rte = rt_fetch(lfirst_int(lc),
										  queryDesc->plannedstmt->rtable);

			if (hl_branch_is_hoplock_table(rte->relid))
			{
				wrote = true;
				if (queryDesc->operation != CMD_INSERT &&
					hl_branch_is_event_log(rte->relid))
					removed_events = true;
			}
		}
	}
	if (prev_executor_end)
		prev_executor_end(queryDesc);
	else
		standard_ExecutorEnd(queryDesc);
	if (wrote)
	{
		hl_branch_note_sql_write();
		hl_keepalives_written();
		hl_expiries_note_sql_write();
		untrust_at_commit = true;
	}
	if (removed_events)
		hl_delivery_note_removal();
}

/* Install the hooks and callbacks of this file. */
void
hl_install_hooks(void)
{
	prev_executor_end = ExecutorEnd_hook;
	ExecutorEnd_hook = executor_end;
	prev_object_access_hook = object_access_hook;
	object_access_hook = object_access;
	prev_utility_hook = ProcessUtility_hook;
	ProcessUtility_hook = utility;
	RegisterXactCallback(dbhooks_xact_callback, NULL);
}
