/*-------------------------------------------------------------------------
 *
 * guc.c
 *		hoplock's settings, all under the reserved "hoplock." prefix.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include <limits.h>

#include "hoplock.h"
#include "compat.h"

#include "miscadmin.h"
#include "nodes/pg_list.h"
#include "utils/guc.h"
#include "utils/varlena.h"

int			hoplock_max_ttl = 86400;	/* seconds */
char	   *hoplock_channel = NULL;
bool		hoplock_notify_renewals = false;
bool		hoplock_log_events = false;
char	   *hoplock_databases = NULL;
int			hoplock_naptime = 60;	/* seconds */
int			hoplock_max_tracked = 100000;
int			hoplock_max_databases = 8;
int			hoplock_queue_size = 1024;

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

/* hoplock.databases: a comma-separated list of database names */
static bool
check_databases(char **newval, void **extra, GucSource source)
{
	char	   *copy = pstrdup(*newval);
	List	   *names;
	bool		ok = SplitIdentifierString(copy, ',', &names);

	list_free(names);
	pfree(copy);
	if (!ok)
		GUC_check_errdetail("List syntax is invalid.");
	return ok;
}

void
hoplock_define_gucs(void)
{
	DefineCustomIntVariable("hoplock.max_ttl",
							"Largest ttl a lease may be acquired or renewed with.",
							NULL,
							&hoplock_max_ttl,
							86400,
							1,
							INT_MAX,
							PGC_SUSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomStringVariable("hoplock.channel",
							   "NOTIFY channel on which lease events are sent.",
							   NULL,
							   &hoplock_channel,
							   "hoplock",
							   PGC_SUSET,
							   0,
							   check_channel, NULL, NULL);

	DefineCustomBoolVariable("hoplock.notify_renewals",
							 "Also send a \"renewed\" event for every renewal.",
							 NULL,
							 &hoplock_notify_renewals,
							 false,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomBoolVariable("hoplock.log_events",
							 "Also write every lease event to the server log.",
							 NULL,
							 &hoplock_log_events,
							 false,
							 PGC_SUSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomStringVariable("hoplock.databases",
							   "Databases the expiry worker serves (empty: every database with hoplock).",
							   NULL,
							   &hoplock_databases,
							   "",
							   PGC_SIGHUP,
							   GUC_LIST_INPUT,
							   check_databases, NULL, NULL);

	DefineCustomIntVariable("hoplock.naptime",
							"Longest sleep of the expiry worker and the launcher.",
							"They wake earlier when a lease is due or a database needs them.",
							&hoplock_naptime,
							60,
							1,
							INT_MAX / 1000,
							PGC_SIGHUP,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("hoplock.max_tracked_leases",
							"Running terms each expiry worker keeps in its schedule.",
							"Beyond it, the worker keeps the earliest and reads the lease table again when it reaches them.",
							&hoplock_max_tracked,
							100000,
							100,
							INT_MAX / 2,
							PGC_SIGHUP,
							0,
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
								&hoplock_max_databases,
								8,
								1,
								1024,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

		DefineCustomIntVariable("hoplock.queue_size",
								"Deadlines each database's worker can be sent before it reads them.",
								"Beyond it, the worker reads the whole lease table instead.",
								&hoplock_queue_size,
								1024,
								16,
								1024 * 1024,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);
	}

	MarkGUCPrefixReserved("hoplock");
}
