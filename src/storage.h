/*-------------------------------------------------------------------------
 *
 * storage.h
 *		The storage layer: hoplock's tables, read and written below SQL as
 *		the executor would (table.c, rowwrite.c, store.c; their version
 *		shims are in executor_compat.h).  Everything that touches a heap
 *		or an index of hoplock's goes through it.

 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_STORAGE_H
#define HOPLOCK_STORAGE_H

#include "hoplock.h"
#include "compat.h"				/* pg_attribute_noreturn() on 18 */
#include "access/tableam.h"
#include "access/transam.h"
#include "fmgr.h"
#include "storage/buf.h"
#include "storage/itemptr.h"
#include "storage/lockdefs.h"
#include "utils/relcache.h"
#include "utils/snapshot.h"

/* table.c: finding hoplock's tables and checking that they can be trusted */
typedef enum HlRel
{
	HL_REL_LEASE,
	HL_REL_FLOOR,
	HL_REL_HISTORY,
	HL_REL_BRANCH,
	HL_REL_EVENT,
	HL_REL_DELIVERY,
	HL_REL_KEEPALIVE,
	HL_NRELS
} HlRel;

typedef struct HlTableInfo HlTableInfo;

typedef struct HlRelation
{
	HlRel		which;
	Relation	heap;
	Relation	index;			/* its primary key; floor: NULL */
	LOCKMODE	lockmode;
	HlTableInfo *info;			/* what the shape check found out */
} HlRelation;

extern bool hl_open(HlRel which, LOCKMODE lockmode, bool wait,
					HlRelation *rel);
extern void hl_close(HlRelation *rel, bool keep_locks);
extern bool hl_lock_table(HlRel which, LOCKMODE lockmode, Oid *locked_relid,
						  Oid *locked_indexid);
extern void hl_table_busy_error(HlRel which) pg_attribute_noreturn();
extern bool hl_table_exists(HlRel which);
extern bool hl_extension_installed(void);
extern bool hl_extension_current(void);
extern Oid	hl_sequence_oid(const char *name);
extern TupleDesc hl_lease_result_desc(FunctionCallInfo fcinfo);
extern bool hl_lock_relation_briefly(Oid relid, LOCKMODE lockmode);
extern Relation hl_open_index(HlRelation *rel, bool (*matches) (Relation index),
							  const char *what);
extern bool hl_table_has_foreign_constraints(HlRelation *rel);
extern bool hl_table_has_after_triggers(HlRelation *rel);

/* rowwrite.c: writing a row as the executor would */
extern void hl_row_insert(HlRelation *rel, HeapTuple tuple);
extern bool hl_row_insert_new(HlRelation *rel, HeapTuple tuple);
extern void hl_row_insert_many(HlRelation *rel, HeapTuple *tuples,
							   int ntuples);
extern TM_Result hl_row_update(HlRelation *rel, ItemPointer otid,
							   HeapTuple tuple);
typedef TM_Result (*HlRowLockedCheck) (void *arg);
extern TM_Result hl_row_update_checked(HlRelation *rel, ItemPointer otid,
									   HeapTuple tuple, HlRowLockedCheck check,
									   void *arg);
extern TM_Result hl_row_delete(HlRelation *rel, ItemPointer otid);
extern void hl_rowwrite_init(void);

/* store.c: lease rows */
typedef struct LeaseVersion
{
	bool		found;
	ItemPointerData tid;
	Buffer		buffer;			/* pinned until hl_version_release() */
	TransactionId inflight;		/* another transaction is inserting or
								 * updating this version right now */
	Lease		lease;
} LeaseVersion;

extern void hl_store_fetch(HlRelation *rel, text *name, Snapshot snapshot,
						   LeaseVersion *version);
extern void hl_store_fetch_range(HlRelation *rel, text *lo, text *hi,
								 Snapshot snapshot,
								 void (*callback) (Lease *lease, void *arg),
								 void *arg);
extern bool hl_store_refetch(HlRelation *rel, text *name, ItemPointer tid,
							 LeaseVersion *version);
extern void hl_version_release(LeaseVersion *version);
extern TransactionId hl_store_locker(const LeaseVersion *version);
extern void hl_store_insert(HlRelation *rel, Lease *lease);
extern TM_Result hl_store_update(HlRelation *rel, ItemPointer otid,
								 Lease *lease);
extern TM_Result hl_store_update_checked(HlRelation *rel, ItemPointer otid,
										 Lease *lease, HlRowLockedCheck check,
										 void *arg);
extern int	hl_store_scan(text *after, int limit,
						  bool (*callback) (const Lease *lease, void *arg),
						  void *arg, text **last);
extern bool hl_store_keepalive_joining(HlRelation *rel, int64 id);
extern int	hl_store_scan_keepalive(HlRelation *rel, int64 id, bool left,
									Snapshot snapshot,
									bool (*callback) (const Lease *lease,
													  void *arg),
									void *arg);
extern int	hl_store_scan_owner(HlRelation *rel, Oid roleid, text *owner,
								Snapshot snapshot,
								bool (*callback) (const Lease *lease,
												  void *arg),
								void *arg);
extern int64 hl_store_count_role(HlRelation *rel, Oid roleid, int64 limit);
extern void hl_format_handle(const Lease *lease, char *buf);
extern bool hl_lease_lookup(text *name, Lease *lease);

#endif							/* HOPLOCK_STORAGE_H */
