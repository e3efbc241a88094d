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
#include "nodes/pg_list.h"

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

/* The candidate a term is handed to (hoplock_handoff) */
typedef struct HlCandidatePick
{
	text	   *owner;
	Oid			roleid;
	int64		ttl;
	int64		min_hold;		/* 0: none */
	bool		session_bound;
	int32		priority;
	int32		pid;
	TimestampTz session_start;
	text	   *value;			/* NULL: none */
	int			index;			/* its entry, */
	uint64		seq;			/* ... for this wait */
} HlCandidatePick;

extern void hl_candidate_enter(text *name, text *owner, int32 priority,
							   int64 ttl, int64 min_hold, bool session_bound,
							   text *value, bool preempt, int32 slots);
extern bool hl_candidate_pick(text *name, text *to_owner, Oid term_roleid,
							  HlCandidatePick *pick);
extern bool hl_candidate_pick_except(text *name, text *to_owner,
									 List *except, Oid term_roleid,
									 HlCandidatePick *pick);
extern text *hl_candidate_preemptor(text *name, int32 term_priority,
									Oid term_roleid);
extern void hl_candidate_handed(text *name, const HlCandidatePick *pick,
								int64 generation);
extern void hl_candidate_leave(bool acquired);
extern bool hl_candidate_waits(text *name, int32 pid, TimestampTz start);
extern bool hl_candidate_may_take(text *name);
extern bool hl_candidate_others(text *name, int32 other_than);
extern int	hl_candidates_list(HlCandidateRow **rows);

#endif							/* HOPLOCK_CANDIDATES_H */
