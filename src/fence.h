/*-------------------------------------------------------------------------
 *
 * fence.h
 *		hoplock_fence: holding a term's lock until the transaction ends
 *		(fence.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_FENCE_H
#define HOPLOCK_FENCE_H

#include "hoplock.h"

extern void hl_fence(text *name, int64 generation);
extern void hl_fence_once(text *name, int64 generation);
extern void hl_fence_init(void);

#endif							/* HOPLOCK_FENCE_H */
