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

/* The worker's look at one name (worker.c's look_at): false to look again */
typedef bool (*HlMassLook) (const char *name, int namelen, void *arg);

extern bool hl_mass_busy(void);
extern int	hl_mass_room(void);
extern int	hl_mass_announce(char **names, const int *lens, int n,
							 bool *left_out, int64 *lag);
extern int	hl_mass_committed(void);
extern void hl_mass_aborted(void);
extern bool hl_mass_catch_up(int limit, HlMassLook look, void *arg);
extern void hl_mass_caught_up(void);
extern void hl_mass_start(void);
extern void hl_mass_recover(void);
extern void hl_mass_exit(void);

#endif							/* HOPLOCK_MASSEXPIRY_H */
