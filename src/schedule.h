/*-------------------------------------------------------------------------
 *
 * schedule.h
 *		The expiry worker's schedule of deadlines (schedule.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HL_SCHEDULE_H
#define HL_SCHEDULE_H

#include "datatype/timestamp.h"
#include "utils/palloc.h"

typedef struct Schedule Schedule;

extern Schedule *hl_schedule_create(MemoryContext parent, int capacity);
extern void hl_schedule_reset(Schedule *s, int capacity);
extern void hl_schedule_add(Schedule *s, const char *name, int namelen,
						 TimestampTz when);
extern bool hl_schedule_next(Schedule *s, TimestampTz *when);
extern bool hl_schedule_take_due(Schedule *s, TimestampTz now, char *name,
							  int *namelen, TimestampTz *when);
extern int	hl_schedule_count(Schedule *s);
extern int	hl_schedule_count_due(Schedule *s, TimestampTz until, int max);
extern TimestampTz hl_schedule_horizon(Schedule *s);
extern void hl_schedule_reopen(Schedule *s);

#endif							/* HL_SCHEDULE_H */
