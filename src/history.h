/*-------------------------------------------------------------------------
 *
 * history.h
 *		The history of terms (history.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_HISTORY_H
#define HOPLOCK_HISTORY_H

#include "hoplock.h"

extern bool hl_history_lock(void);
extern void hl_history_unlock(bool changed);
extern void hl_history_end(const Lease *term, TimestampTz ended_at,
						   const char *how);
extern int	hl_history_prune(int batch, bool *left);
extern bool hl_history_term_role(text *name, int64 generation, Oid *roleid);

#endif							/* HOPLOCK_HISTORY_H */
