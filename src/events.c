/*-------------------------------------------------------------------------
 *
 * events.c
 *		Lease events: a NOTIFY on hoplock.channel with a JSON payload, and,
 *		with hoplock.log_events, a server log line.
 *
 *		Both take effect only if the transaction commits.  NOTIFY is
 *		transactional by itself; the log lines wait in a list in
 *		TopTransactionContext and are written by the commit callback, after
 *		the commit record is flushed.  A subtransaction that aborts drops
 *		the lines it queued, as async.c drops its notifications.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "access/xact.h"
#include "catalog/pg_type.h"
#include "commands/async.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"
#include "utils/memutils.h"

typedef struct PendingLine
{
	struct PendingLine *next;
	int			nest_level;		/* subtransaction that queued it */
	char	   *message;
} PendingLine;

/* Newest first; reset at the end of every transaction */
static PendingLine *pending_lines = NULL;

/*
 * The payload:
 * {"event": "...", "name": "...", "owner": "...", "generation": N,
 *  "expires_at": "2026-01-01T00:00:00.000000+00:00"}
 *
 * expires_at is always in UTC, whatever the session's TimeZone, so that
 * every listener gets the same text for the same event.
 */
static char *
build_payload(const char *event, const char *name, const char *owner,
			  const Lease *lease)
{
	StringInfoData buf;
	char		ts[MAXDATELEN + 1];
	const int	utc = 0;

	JsonEncodeDateTime(ts, TimestampTzGetDatum(lease->expires_at),
					   TIMESTAMPTZOID, &utc);

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"event\": ");
	escape_json(&buf, event);
	appendStringInfoString(&buf, ", \"name\": ");
	escape_json(&buf, name);
	appendStringInfoString(&buf, ", \"owner\": ");
	escape_json(&buf, owner);
	appendStringInfo(&buf, ", \"generation\": " INT64_FORMAT, lease->generation);
	appendStringInfoString(&buf, ", \"expires_at\": ");
	escape_json(&buf, ts);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * Queue one event for the lease as it stands after the change.
 */
void
hoplock_event(const char *event, const Lease *lease)
{
	char	   *name = text_to_cstring(lease->name);
	char	   *owner = text_to_cstring(lease->owner);

	Async_Notify(hoplock_channel, build_payload(event, name, owner, lease));

	if (hoplock_log_events)
	{
		MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
		PendingLine *line = palloc(sizeof(PendingLine));

		line->nest_level = GetCurrentTransactionNestLevel();
		line->message = psprintf("hoplock: lease \"%s\" %s, generation " INT64_FORMAT ", owner \"%s\", expires at %s",
								 name, event, lease->generation, owner,
								 timestamptz_to_str(lease->expires_at));
		line->next = pending_lines;
		pending_lines = line;
		MemoryContextSwitchTo(old);
	}
}

static void
write_lines(PendingLine *lines)
{
	PendingLine *oldest_first = NULL;

	while (lines != NULL)
	{
		PendingLine *next = lines->next;

		lines->next = oldest_first;
		oldest_first = lines;
		lines = next;
	}
	for (PendingLine *line = oldest_first; line != NULL; line = line->next)
		ereport(LOG, (errmsg_internal("%s", line->message)));
}

static void
xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_PARALLEL_COMMIT:
			write_lines(pending_lines);
			pending_lines = NULL;
			break;
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PARALLEL_ABORT:
		case XACT_EVENT_PREPARE:
			pending_lines = NULL;
			break;
		default:
			break;
	}
}

static void
subxact_callback(SubXactEvent event, SubTransactionId mySubid,
				 SubTransactionId parentSubid, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (event == SUBXACT_EVENT_ABORT_SUB)
	{
		while (pending_lines != NULL && pending_lines->nest_level >= level)
			pending_lines = pending_lines->next;
	}
	else if (event == SUBXACT_EVENT_COMMIT_SUB)
	{
		for (PendingLine *line = pending_lines; line != NULL; line = line->next)
		{
			if (line->nest_level >= level)
				line->nest_level = level - 1;
		}
	}
}

void
hoplock_events_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
}
