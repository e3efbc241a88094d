/*-------------------------------------------------------------------------
 *
 * events.h
 *		Lease events: queued by a change, numbered and logged at its
 *		commit (events.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_EVENTS_H
#define HOPLOCK_EVENTS_H

#include "hoplock.h"

extern void hl_event(const char *event, const Lease *lease);
extern void hl_event_expired_many(const Lease *terms, int n);
extern int64 hl_event_horizon(void);
extern int64 hl_event_newest(void);
extern void hl_events_init(void);

/* The payload of an event's NOTIFY */
extern char *hl_event_payload(const char *event, const char *name,
							  const char *owner, int64 generation,
							  TimestampTz expires_at, int64 seq,
							  const char *value, TimestampTz free_at);

#endif							/* HOPLOCK_EVENTS_H */
