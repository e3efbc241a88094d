/*-------------------------------------------------------------------------
 *
 * massexpiry.h
 *		Many terms lapsing at once, announced by the worker in one
 *		transaction of events, their lease rows written after
 *		(massexpiry.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_MASSEXPIRY_H
#define HOPLOCK_MASSEXPIRY_H

#include "postgres.h"

#include "utils/timestamp.h"

/* Fewer terms due at once than this are announced one by one */
#define HL_MASS_EXPIRY_MIN	64
/* Terms due within this of the first make one batch (microseconds) */
#define HL_MASS_EXPIRY_SPREAD	5000
/* A batch's rows are read this long before its first expiry */
#define HL_MASS_EXPIRY_AHEAD	100000

/*
 * The worker's look at one name (worker.c's look_at): 1 done, 0 being
 * changed (look again later), -1 the name has no row.  "recorded": the
 * generation whose "expired" the event log holds, or 0.
 */
typedef int (*HlMassLook) (const char *name, int namelen, int64 recorded,
						   void *arg);

extern bool hl_mass_busy(void);
extern int	hl_mass_room(void);
/* A name a batch leaves to the usual way, after all */
typedef void (*HlMassLeftOut) (const char *name, int namelen, void *arg);

extern int	hl_mass_watch(char **names, const int *lens, int n,
						  TimestampTz until, bool *left_out);
extern bool hl_mass_watching(TimestampTz *due);
extern int	hl_mass_record(HlMassLeftOut left_out, void *arg, int64 *lag);
extern int	hl_mass_committed(void);
extern void hl_mass_aborted(void);
extern bool hl_mass_catch_up(int limit, HlMassLook look, void *arg);
extern void hl_mass_caught_up(void);
extern void hl_mass_start(void);
extern bool hl_mass_recover(HlMassLook look, void *arg);
extern bool hl_mass_next_try(TimestampTz *when);
extern void hl_mass_exit(void);

#endif							/* HOPLOCK_MASSEXPIRY_H */
