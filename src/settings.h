/*-------------------------------------------------------------------------
 *
 * settings.h
 *		hoplock's settings (guc.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SETTINGS_H
#define HOPLOCK_SETTINGS_H

#include "hoplock.h"

extern int	hl_max_ttl;
extern char *hl_channel;
extern bool hl_notify_renewals;
extern bool hl_log_events;
extern char *hl_databases;
extern int	hl_naptime;			/* seconds */
extern int	hl_max_tracked;
extern int	hl_max_databases;
extern int	hl_queue_size;
extern int	hl_hung_holder_timeout;	/* milliseconds; 0: never */
extern int	hl_max_names_per_role;	/* 0: unlimited */
extern int	hl_history_size;	/* terms kept per database; 0: none */
extern int	hl_released_retention;	/* seconds; 0: kept forever */
extern int	hl_event_retention; /* seconds after delivery */

extern void hl_define_gucs(void);
extern bool hl_database_listed(const char *dbname);

#endif							/* HOPLOCK_SETTINGS_H */
