/*-------------------------------------------------------------------------
 *
 * refusals.h
 *		Zombie writes, counted: the fences and fenced writes refused for a
 *		term that no longer holds its lease, per term in shared memory,
 *		with one log line per term (refusals.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_REFUSALS_H
#define HOPLOCK_REFUSALS_H

#include "hoplock.h"

/* What was refused */
typedef enum HlRefusalKind
{
	HL_REFUSED_FENCE,			/* hoplock_fence */
	HL_REFUSED_WRITE			/* a row hoplock_fenced rejected */
} HlRefusalKind;

/* One term's refusals, as hoplock_internal.refusals() shows them */
typedef struct HlRefusalRow
{
	text	   *name;
	int64		generation;
	int64		fences;
	int64		writes;
	TimestampTz first_at;
	TimestampTz last_at;
} HlRefusalRow;

extern void hl_refusal_note(text *name, int64 generation, Oid term_roleid,
							int64 current, HlRefusalKind kind);
extern int	hl_refusals_list(HlRefusalRow **rows);
extern void hl_refusals_reset(void);
extern void hl_refusals_init(void);

#endif							/* HOPLOCK_REFUSALS_H */
