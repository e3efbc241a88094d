/*-------------------------------------------------------------------------
 *
 * events.c
 *		Lease events: a NOTIFY on hoplock.channel with a JSON payload, and,
 *		with hoplock.log_events, a server log line.
 *
 *		Both take effect only if the transaction commits: NOTIFY is
 *		transactional by itself, and the log lines wait in a list of this
 *		file's own until the commit (as async.c keeps its notifications),
 *		dropped with a subtransaction that aborts.
 *
 *		Names and owners are written as JSON strings in both, so that no
 *		name or owner, whatever it holds, can pass for more of the payload
 *		or of the log line than itself.
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

/* A log line waiting for its transaction to commit */
typedef struct PendingLine
{
	struct PendingLine *next;
	int			nest_level;		/* subtransaction that queued it */
	char	   *line;
} PendingLine;

/* Newest first, in TopTransactionContext */
static PendingLine *pending_lines = NULL;

/* An instant as JSON writes it, always in UTC */
static void
append_timestamp(StringInfo buf, TimestampTz ts)
{
	char		text[MAXDATELEN + 1];
	const int	utc = 0;

	JsonEncodeDateTime(text, TimestampTzGetDatum(ts), TIMESTAMPTZOID, &utc);
	escape_json(buf, text);
}

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

	initStringInfo(&buf);
	appendStringInfoString(&buf, "{\"event\": ");
	escape_json(&buf, event);
	appendStringInfoString(&buf, ", \"name\": ");
	escape_json(&buf, name);
	appendStringInfoString(&buf, ", \"owner\": ");
	escape_json(&buf, owner);
	appendStringInfo(&buf, ", \"generation\": " INT64_FORMAT, lease->generation);
	appendStringInfoString(&buf, ", \"expires_at\": ");
	append_timestamp(&buf, lease->expires_at);
	appendStringInfoChar(&buf, '}');
	return buf.data;
}

/*
 * The log line: hoplock: lease "name" acquired, generation N, owner
 * "owner", expires at ...; name and owner as JSON strings.
 */
static void
queue_log_line(const char *event, const char *name, const char *owner,
			   const Lease *lease)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	StringInfoData buf;
	PendingLine *item = palloc(sizeof(PendingLine));

	initStringInfo(&buf);
	appendStringInfoString(&buf, "hoplock: lease ");
	escape_json(&buf, name);
	appendStringInfo(&buf, " %s, generation " INT64_FORMAT ", owner ",
					 event, lease->generation);
	escape_json(&buf, owner);
	appendStringInfo(&buf, ", expires at %s",
					 timestamptz_to_str(lease->expires_at));

	item->line = buf.data;
	item->nest_level = GetCurrentTransactionNestLevel();
	item->next = pending_lines;
	pending_lines = item;
	MemoryContextSwitchTo(old);
}

/* Queue one event for the lease as it stands after the change. */
void
hl_event(const char *event, const Lease *lease)
{
	char	   *name = text_to_cstring(lease->name);
	char	   *owner = text_to_cstring(lease->owner);

	Async_Notify(hl_channel, build_payload(event, name, owner, lease));
	if (hl_log_events)
		queue_log_line(event, name, owner, lease);
}

/* Write the lines, oldest first; nothing here allocates. */
static void
write_lines(PendingLine *item)
{
	if (item == NULL)
		return;
	write_lines(item->next);
	ereport(LOG, (errmsg_internal("%s", item->line)));
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
		for (PendingLine *item = pending_lines;
			 item != NULL && item->nest_level >= level; item = item->next)
			item->nest_level = level - 1;
	}
}

void
hl_events_init(void)
{
	RegisterXactCallback(xact_callback, NULL);
	RegisterSubXactCallback(subxact_callback, NULL);
}
