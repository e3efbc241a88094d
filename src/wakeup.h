/*-------------------------------------------------------------------------
 *
 * wakeup.h
 *		The wake-ups a transaction owes the waiters of the leases it
 *		changed, broadcast at its end (wakeup.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_WAKEUP_H
#define HOPLOCK_WAKEUP_H

#include "datatype/timestamp.h"

extern void hl_wake_waiters_at_end(text *name);
extern void hl_wake_waiters_if_lapsed_at_end(text *name,
											 TimestampTz expires_at);
extern void hl_wakeup_init(void);

#endif							/* HOPLOCK_WAKEUP_H */
