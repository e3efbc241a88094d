/*-------------------------------------------------------------------------
 *
 * candidates.h
 *		The candidates of a lease: the sessions waiting for it in
 *		hoplock_wait, and the order a freed lease goes to them in
 *		(candidates.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_CANDIDATES_H
#define HOPLOCK_CANDIDATES_H

#include "hoplock.h"

/* One candidate, as hoplock_candidates shows it */
typedef struct HlCandidateRow
{
	text	   *name;
	text	   *owner;
	int32		priority;
	TimestampTz since;
	int32		pid;
	Oid			roleid;
} HlCandidateRow;

extern void hl_candidate_enter(text *name, text *owner, int32 priority);
extern void hl_candidate_leave(bool acquired);
extern bool hl_candidate_may_take(text *name);
extern int	hl_candidates_list(HlCandidateRow **rows);

#endif							/* HOPLOCK_CANDIDATES_H */
