/*-------------------------------------------------------------------------
 *
 * schedule.h
 *		The expiry worker's schedule of deadlines (schedule.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_SCHEDULE_H
#define HOPLOCK_SCHEDULE_H

#include "datatype/timestamp.h"
#include "utils/palloc.h"

typedef struct Schedule Schedule;

extern Schedule *schedule_create(MemoryContext parent, int capacity);
extern void schedule_reset(Schedule *s, int capacity);
extern void schedule_add(Schedule *s, const char *name, int namelen,
						 TimestampTz when);
extern bool schedule_next(Schedule *s, TimestampTz *when);
extern bool schedule_take_due(Schedule *s, TimestampTz now, char *name,
							  int *namelen, TimestampTz *when);
extern int	schedule_count(Schedule *s);
extern TimestampTz schedule_horizon(Schedule *s);

#endif							/* HOPLOCK_SCHEDULE_H */
