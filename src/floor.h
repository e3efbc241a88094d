/*-------------------------------------------------------------------------
 *
 * floor.h
 *		The generation floor (floor.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_FLOOR_H
#define HOPLOCK_FLOOR_H

#include "hoplock.h"

extern bool hl_next_generation(const Lease *cur, TimestampTz now,
							   int64 *generation, bool *busy);
extern bool hl_floor_refresh(void);
extern bool hl_floor_raise_forgotten(int64 generation);

#endif							/* HOPLOCK_FLOOR_H */
