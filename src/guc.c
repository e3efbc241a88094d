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

#include "utils/guc.h"

int			hoplock_max_ttl = 86400;	/* seconds */
char	   *hoplock_channel = NULL;
bool		hoplock_notify_renewals = false;
bool		hoplock_log_events = false;

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

	MarkGUCPrefixReserved("hoplock");
}
