/*-------------------------------------------------------------------------
 *
 * expiries.h
 *		The terms a worker is announcing in bulk, in shared memory
 *		(expiries.c): the interlock between a mass expiry, whose events
 *		commit before its lease rows are written, and every other writer
 *		of those rows.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_EXPIRIES_H
#define HOPLOCK_EXPIRIES_H

#include "postgres.h"

#include "storage/lwlock.h"

/* Where a name stands in the set, for a writer of its lease row */
typedef enum HlExpiryState
{
	HL_EXPIRY_NONE = 0,			/* not in it (or another term of the name) */
	HL_EXPIRY_WATCHED,			/* the worker is reading the row */
	HL_EXPIRY_ANNOUNCING,		/* its "expired" event is being committed */
	HL_EXPIRY_ANNOUNCED			/* committed; the lease row not written yet */
} HlExpiryState;

/* Room in the set, for all databases together */
#define HL_EXPIRIES_MAX		16384

extern void hl_expiries_shmem_init(void);

/* every writer of a lease row, holding the row's lock */
extern HlExpiryState hl_expiries_check(text *name, int64 generation,
										bool touch);

/* the worker of this database */
extern int	hl_expiries_watch(char **names, const int *lens, int n,
							  bool *watched);
extern void hl_expiries_flip(char **names, const int *lens,
							 const int64 *generations, int n, bool *kept);
extern void hl_expiries_announced(char **names, const int *lens, int n);
extern void hl_expiries_forget(char **names, const int *lens, int n);
extern void hl_expiries_forget_all(void);
extern bool hl_expiries_trusted(void);
extern void hl_expiries_untrust(void);
extern bool hl_expiries_trust(uint64 seen);
extern uint64 hl_expiries_untrusted_count(void);
extern void hl_expiries_note_sql_write(void);
extern uint64 hl_expiries_sql_writes(void);

#endif							/* HOPLOCK_EXPIRIES_H */
