/*-------------------------------------------------------------------------
 *
 * eventlog.h
 *		The event log and the delivery row, read and written below SQL
 *		(eventlog.c), for their readers (stream.c) and the worker's
 *		delivery of events as NOTIFY (delivery.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_EVENTLOG_H
#define HOPLOCK_EVENTLOG_H

#include "hoplock.h"

#include "storage/itemptr.h"
#include "utils/snapshot.h"

/* One event of the log */
typedef struct HlLoggedEvent
{
	int64		seq;
	text	   *event;
	text	   *name;
	text	   *owner;
	int64		generation;
	TimestampTz expires_at;
	TimestampTz at;
	text	   *value;			/* NULL: none */
	TimestampTz free_at;		/* released in its hold: when the name
								 * frees; 0: none */
	int			row_left;		/* events of its row still to come */
} HlLoggedEvent;

/* What one read of the log returns, in number order */
typedef bool (*HlEventVisitor) (const HlLoggedEvent *e, void *arg);

/* The row of hoplock_internal.delivery */
typedef struct HlDelivery
{
	bool		found;
	ItemPointerData tid;
	int64		delivered;
	TimestampTz delivered_at;
	int64		pruned_through;
	bool		has_expiries_after; /* a mass expiry's rows may be unwritten */
	int64		expiries_after; /* (its events are numbered above this) */
	bool		read_expiries_after;	/* as read (hl_delivery_read) */
	int64		read_expiries_after_value;
} HlDelivery;

/*
 * The events of the same kind a row of the log carries besides its own,
 * numbered consecutively below it (a mass expiry's "expired" events,
 * events.c): its columns earlier_*, arrays of n elements, oldest first.
 * Their "at" is their expires_at; they have no free_at.
 */
typedef struct HlEarlierEvents
{
	int			n;
	Datum		names;			/* text[] */
	Datum		owners;			/* text[] */
	Datum		generations;	/* bigint[] */
	Datum		expires_at;		/* timestamptz[] */
	Datum		values;			/* text[], with nulls */
} HlEarlierEvents;

/*
 * The most events a row carries, its own included: as many as the
 * delivery sends in one transaction (HL_DELIVERY_BATCH), which sends a
 * row whole, so that a transaction reads one such row, or two at most.
 */
#define HL_EVENTS_PER_ROW	1000

/* An event to record */
typedef struct HlNewEvent
{
	int64		seq;
	const char *event;
	const Lease *lease;
	TimestampTz at;
	TimestampTz free_at;		/* 0: none */
	const HlEarlierEvents *earlier; /* NULL: none */
} HlNewEvent;

/* eventlog.c */
extern void hl_eventlog_earlier(const Lease *terms, int n,
								HlEarlierEvents *earlier);
extern void hl_eventlog_record(const HlNewEvent *events, int nevents);
extern int64 hl_eventlog_scan(int64 after, int64 through, Snapshot snapshot,
							  HlEventVisitor visit, void *arg);
extern bool hl_eventlog_newest(int64 through, Snapshot snapshot, bool wait,
							   int64 *newest);
extern void hl_delivery_read(Snapshot snapshot, HlDelivery *d);
extern void hl_delivery_write(HlDelivery *d);
extern bool hl_eventlog_expiry_pending(text *name, int64 generation);
extern int64 hl_eventlog_prune(int64 through, TimestampTz older_than,
							   int limit, int64 *pruned_through);

#endif							/* HOPLOCK_EVENTLOG_H */
