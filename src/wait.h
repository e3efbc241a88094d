/*-------------------------------------------------------------------------
 *
 * wait.h
 *		hoplock_wait: acquire, or sleep until the lease can be had
 *		(wait.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_WAIT_H
#define HOPLOCK_WAIT_H

#include "lease.h"

extern bool hl_lease_wait(LeaseRequest *req, int64 timeout, Lease *result);

#endif							/* HOPLOCK_WAIT_H */
