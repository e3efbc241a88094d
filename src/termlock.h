/*-------------------------------------------------------------------------
 *
 * termlock.h
 *		The per-name term lock (termlock.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_TERMLOCK_H
#define HOPLOCK_TERMLOCK_H

#include "hoplock.h"
#include "storage/lockdefs.h"

extern bool hl_term_trylock(text *name, LOCKMODE mode);
extern void hl_term_unlock(text *name, LOCKMODE mode);
extern void hl_term_lock_holders(text *name, int *fence_pid,
								 int *change_pid);
extern bool hl_term_lock_xids(TransactionId **xids, int *n);

#endif							/* HOPLOCK_TERMLOCK_H */
