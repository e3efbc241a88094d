/*-------------------------------------------------------------------------
 *
 * keepalive.h
 *		Owner keepalives (keepalive.c): one row per (role, owner) that the
 *		terms attached to it take their expiry from, so that
 *		hoplock_renew_all renews them all with one write.  Storage layer:
 *		it reads and writes the keepalive table and nothing above it.
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_KEEPALIVE_H
#define HOPLOCK_KEEPALIVE_H

#include "hoplock.h"
#include "storage.h"

typedef struct Keepalive
{
	bool		found;
	ItemPointerData tid;
	TransactionId inflight;		/* dirty snapshot: another transaction is
								 * changing this version right now */
	int64		id;
	Oid			owner_roleid;
	text	   *owner;
	TimestampTz renewed_at;
	TimestampTz expires_at;
	int64		version;		/* minted at every write, part of the
								 * handles of its terms */
	int64		attach_horizon; /* full transaction id before which a term
								 * may have begun unattached; 0: NULL */
} Keepalive;

/* Longest schedule key of a keepalive (hl_keepalive_key), with its NUL */
#define HL_KEEPALIVE_KEY_LEN	32

extern void hl_keepalive_fetch(HlRelation *rel, int64 id, Snapshot snapshot,
							   Keepalive *k);
extern void hl_keepalive_apply(Lease *lease, Snapshot snapshot,
							   TransactionId *inflight, Keepalive *cache);
extern void hl_keepalive_scan(void (*callback) (const Keepalive *k,
												void *arg),
							  void *arg);
extern void hl_keepalive_insert(HlRelation *rel, Keepalive *k);
extern TM_Result hl_keepalive_update(HlRelation *rel, Keepalive *k);
extern TM_Result hl_keepalive_delete(HlRelation *rel, ItemPointer tid);
extern int64 hl_keepalive_next_id(void);
extern int	hl_keepalive_key(int64 id, char *buf);
extern bool hl_keepalive_parse_key(const char *name, int namelen, int64 *id);

extern bool hl_keepalive_scan_owner(HlRelation *rel, Oid roleid, text *owner,
									Snapshot snapshot,
									void (*callback) (const Keepalive *k,
													  void *arg),
									void *arg);
extern int64 hl_keepalive_count_role(HlRelation *rel, Oid roleid,
									 int64 limit);
extern int	hl_keepalive_live(Oid roleid, text *owner, Keepalive *k);
extern void hl_keepalives_check_role(HlRelation *rel, Oid roleid);
extern bool hl_keepalives_maybe(void);
extern void hl_keepalives_begun(void);
extern void hl_keepalives_written(void);
extern void hl_keepalives_try_clear(void);


#endif							/* HOPLOCK_KEEPALIVE_H */
