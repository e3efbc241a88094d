/*-------------------------------------------------------------------------
 *
 * guc.c
 *		hoplock's settings, all under the reserved "hoplock." prefix.
 *
 *		hoplock.channel is the same for every session of a server (set in
 *		the configuration file): one lease's events, whoever sends them --
 *		the calls or the expiry worker --, must reach one channel.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "compat.h"
#include "settings.h"

#include <limits.h>


#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "utils/guc.h"
#include "utils/varlena.h"

int			hl_max_ttl = 86400;	/* seconds */
char	   *hl_channel = NULL;
bool		hl_notify_renewals = false;
bool		hl_log_events = false;
char	   *hl_databases = NULL;
int			hl_naptime = 60;	/* seconds */
int			hl_max_tracked = 100000;
int			hl_max_databases = 8;
int			hl_queue_size = 1024;
int			hl_hung_holder_timeout = 5000;	/* milliseconds */
int			hl_max_names_per_role = 0;
int			hl_history_size = 10000;
int			hl_released_retention = 86400;	/* seconds */
int			hl_event_retention = 3600;	/* seconds */

/*
 * A NOTIFY channel is an identifier: not empty, shorter than NAMEDATALEN.
 * Checking here keeps a bad value from surfacing later as an error inside
 * some unrelated lease call.
 */
static bool
check_channel(char **newval, void **extra, GucSource source)
{
	size_t		len = strlen(*newval);

	if (len == 0)
	{
		GUC_check_errdetail("The channel name must not be empty.");
		return false;
	}
	if (len >= NAMEDATALEN)
	{
		GUC_check_errdetail("The channel name must be shorter than %d bytes.",
							NAMEDATALEN);
		return false;
	}
	return true;
}

/*
 * hoplock.databases: a comma-separated list of database names, each taken
 * as written (no case folding: "MyDB" is the database MyDB), double quotes
 * allowed around a name that holds a comma.
 */
static bool
check_databases(char **newval, void **extra, GucSource source)
{
	char	   *copy = pstrdup(*newval);
	List	   *names;
	bool		ok = SplitGUCList(copy, ',', &names);

	list_free(names);
	pfree(copy);
	if (!ok)
		GUC_check_errdetail("List syntax is invalid.");
	return ok;
}

/* Is "dbname" one of hoplock.databases (or is that setting empty)? */
bool
hl_database_listed(const char *dbname)
{
	char	   *list;
	List	   *names;
	ListCell   *lc;
	bool		listed = false;

	if (hl_databases == NULL || hl_databases[0] == '\0')
		return true;
	list = pstrdup(hl_databases);
	if (!SplitGUCList(list, ',', &names))
		return false;			/* the check hook keeps this from happening */
	foreach(lc, names)
	{
		if (strcmp((char *) lfirst(lc), dbname) == 0)
			listed = true;
	}
	list_free(names);
	pfree(list);
	return listed;
}

/* Define hoplock's settings, from _PG_init. */
void
hl_define_gucs(void)
{
	DefineCustomIntVariable("hoplock.max_ttl",
							"Largest ttl a lease may be acquired or renewed with.",
							NULL,
							&hl_max_ttl,
							86400,
							1,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomStringVariable("hoplock.channel",
							   "NOTIFY channel on which lease events are sent.",
							   "The same for every session, so that each lease has one stream of events.",
							   &hl_channel,
							   "hoplock",
							   PGC_SIGHUP,
							   0,
							   check_channel, NULL, NULL);

	DefineCustomBoolVariable("hoplock.notify_renewals",
							 "Also send a \"renewed\" event for every renewal.",
							 NULL,
							 &hl_notify_renewals,
							 false,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("hoplock.log_events",
							 "Also write every lease event to the server log.",
							 NULL,
							 &hl_log_events,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("hoplock.max_names_per_role",
							"Most lease names one role may have (0: no limit).",
							"Counts the names whose last term the role began; superusers are not limited.",
							&hl_max_names_per_role,
							0,
							0,
							INT_MAX,
							PGC_SUSET,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("hoplock.history_size",
							"Terms of each database kept in the history (0: no history).",
							"The expiry worker drops the oldest ended terms beyond it.",
							&hl_history_size,
							10000,
							0,
							INT_MAX,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("hoplock.released_retention",
							"How long the row of a released or lapsed lease is kept (0: forever).",
							"After it, the expiry worker forgets the name; a later term of it still gets a greater generation.",
							&hl_released_retention,
							86400,
							0,
							INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("hoplock.event_retention",
							"How long an event is kept in the event log after it was sent (0: until it is sent).",
							"hoplock_events and hoplock_watch can resume from an event number only while the events after it are kept.",
							&hl_event_retention,
							3600,
							0,
							INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomStringVariable("hoplock.databases",
							   "Databases the expiry worker serves (empty: every database with hoplock).",
							   "A comma-separated list of names, taken as written.",
							   &hl_databases,
							   "",
							   PGC_SIGHUP,
							   GUC_LIST_INPUT,
							   check_databases, NULL, NULL);

	DefineCustomIntVariable("hoplock.naptime",
							"Longest sleep of the expiry worker and the launcher.",
							"They wake earlier when a lease is due or a database needs them.",
							&hl_naptime,
							60,
							1,
							INT_MAX / 1000,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("hoplock.max_tracked_leases",
							"Running terms each expiry worker keeps in its schedule.",
							"Beyond it, the worker keeps the earliest and reads the lease table again when it reaches them.",
							&hl_max_tracked,
							100000,
							100,
							INT_MAX / 2,
							PGC_SIGHUP,
							0,
							NULL, NULL, NULL);

	DefineCustomIntVariable("hoplock.hung_holder_timeout",
							"How long after a term lapses a session may keep holding it up before the expiry worker ends it (0: never).",
							"Holding up means an open fence of the term, or an uncommitted renewal of it, in a transaction that does not end.",
							&hl_hung_holder_timeout,
							5000,
							0,
							INT_MAX,
							PGC_SIGHUP,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/*
	 * Shared memory is sized at server start: these exist only when hoplock
	 * is preloaded (PostgreSQL refuses to define them later).
	 */
	if (process_shared_preload_libraries_in_progress)
	{
		DefineCustomIntVariable("hoplock.max_databases",
								"Databases the expiry workers can serve at once.",
								NULL,
								&hl_max_databases,
								8,
								1,
								1024,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

		DefineCustomIntVariable("hoplock.queue_size",
								"Deadlines each database's worker can be sent before it reads them.",
								"Beyond it, the worker reads the lease table again instead.",
								&hl_queue_size,
								1024,
								16,
								1024 * 1024,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);
	}

	MarkGUCPrefixReserved("hoplock");
}
