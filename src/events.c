/*-------------------------------------------------------------------------
 *
 * events.c
 *		Lease events: a NOTIFY on hoplock.channel with a JSON payload, and,
 *		with hoplock.log_events, a server log line.
 *
 *		Both take effect only if the transaction commits: NOTIFY is
 *		transactional by itself, and the log lines wait for the commit in
 *		commit.c.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "catalog/pg_type.h"
#include "commands/async.h"
#include "lib/stringinfo.h"
#include "utils/builtins.h"
#include "utils/datetime.h"
#include "utils/json.h"

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
		at_commit_log(psprintf("hoplock: lease \"%s\" %s, generation " INT64_FORMAT ", owner \"%s\", expires at %s",
							   name, event, lease->generation, owner,
							   timestamptz_to_str(lease->expires_at)));
}
