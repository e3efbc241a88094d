/*-------------------------------------------------------------------------
 *
 * branch.h
 *		The values hoplock mints -- generations and row versions -- and
 *		the branches of the lease state they are minted on (branch.c).
 *
 *		A value is c << HL_TAG_BITS | tag: c a hybrid clock in microseconds
 *		since 2000-01-01, tag the random tag of the branch that minted it.
 *		Values below HL_LEGACY_LIMIT were minted by 1.1 (generations
 *		era * 2^40 + n): their c is the value itself.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_BRANCH_H
#define HOPLOCK_BRANCH_H

#include "datatype/timestamp.h"

#define HL_TAG_BITS			11
#define HL_TAG_MASK			((INT64CONST(1) << HL_TAG_BITS) - 1)
#define HL_MAX_TAG			((int) HL_TAG_MASK)
#define HL_MAX_C			((INT64CONST(1) << (63 - HL_TAG_BITS)) - 1)
#define HL_LEGACY_LIMIT		(INT64CONST(1) << 58)

/*
 * hoplock_events(n) with an n not of this history (another copy of the
 * data, or a part of its history a fork left behind): SQLSTATE HL001, a
 * class of hoplock's own, so that a client can tell it from bad input
 */
#define ERRCODE_HL_NOT_IN_HISTORY	MAKE_SQLSTATE('H','L','0','0','1')

/* A new branch begins this far above the clock, in microseconds */
#define HL_BRANCH_MARGIN	INT64CONST(1000000)

/* The clock part of a value */
static inline int64
hl_value_c(int64 value)
{
	return value < HL_LEGACY_LIMIT ? value : value >> HL_TAG_BITS;
}

extern bool hl_mint(int64 after, TimestampTz now, int64 *value, bool *busy);
extern bool hl_branch_tag(TimestampTz now, int32 *tag, int64 *floor,
						  bool *busy);
extern bool hl_branch_refresh(void);
extern bool hl_branch_value_in_history(int64 value);
extern void hl_branch_note_sql_write(void);
extern bool hl_branch_is_hoplock_table(Oid relid);
extern bool hl_branch_is_event_log(Oid relid);

#endif							/* HOPLOCK_BRANCH_H */
