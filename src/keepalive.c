/*-------------------------------------------------------------------------
 *
 * keepalive.c
 *		Owner keepalives: the table hoplock_internal.keepalive, one row per
 *		(role, owner, id), read and written below SQL like the lease rows.
 *		A running term may be attached to its owner's keepalive (the lease
 *		row's "keepalive" column holds the keepalive's id): it is then held
 *		until the keepalive's expires_at, not its own, and
 *		hoplock_renew_all renews every attached term with one update of
 *		the keepalive row.
 *
 *		Every reader of a lease row applies the keepalive here
 *		(hl_keepalive_apply, called by store.c): the term's expires_at and
 *		renewed_at become the keepalive's, its handle carries the
 *		keepalive's version, and under a dirty snapshot a keepalive that
 *		another transaction is changing right now makes the term "in
 *		flight" too, so that the lease core treats it as it treats a
 *		renewal in flight (contention, never a decision on a lapse that the
 *		renewal may undo).
 *
 *		A keepalive is never renewed once it has lapsed: hoplock_renew_all
 *		begins a new one (a new id) and the terms attached to the lapsed
 *		one stay lapsed until the worker, or a takeover, announces them.
 *		The worker deletes a lapsed keepalive once none of its terms is
 *		left to announce.  Writers change a keepalive row without waiting
 *		(rowwrite.c), as lease rows are changed.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor_compat.h"
#include "hoplock.h"
#include "keepalive.h"
#include "storage.h"

#include "access/genam.h"
#include "access/heapam.h"
#include "access/htup_details.h"
#include "access/relscan.h"
#include "access/tableam.h"
#include "access/xact.h"
#include "catalog/pg_am_d.h"
#include "catalog/pg_index.h"
#include "utils/relcache.h"
#include "commands/sequence.h"
#include "executor/tuptable.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"

/* Columns of hoplock_internal.keepalive, in the install script's order */
enum
{
	Anum_keepalive_id = 1,
	Anum_keepalive_owner_roleid,
	Anum_keepalive_owner,
	Anum_keepalive_renewed_at,
	Anum_keepalive_expires_at,
	Anum_keepalive_version,
	Anum_keepalive_attach_horizon,
	Natts_keepalive = Anum_keepalive_attach_horizon
};

#define KEY_PREFIX	"\x01keepalive "

static void keepalive_from_slot(TupleTableSlot *slot, Keepalive *k);

static Datum
column(TupleTableSlot *slot, int attnum, const char *colname)
{
	if (slot->tts_isnull[attnum - 1])
		ereport(ERROR,
				(errcode(ERRCODE_DATA_CORRUPTED),
				 errmsg("a row of table \"hoplock_internal.keepalive\" has a null \"%s\"",
						colname),
				 errhint("The table was altered or damaged; restore it as the extension created it.")));
	return slot->tts_values[attnum - 1];
}

/*
 * Find keepalive "id" as "snapshot" sees it.  With a dirty snapshot that is
 * the newest committed version, or the one this transaction wrote; then
 * k->inflight names another transaction changing it right now, if any.
 */
void
hl_keepalive_fetch(HlRelation *rel, int64 id, Snapshot snapshot, Keepalive *k)
{
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;

	ScanKeyInit(&key, Anum_keepalive_id, BTEqualStrategyNumber, F_INT8EQ,
				Int64GetDatum(id));
	slot = table_slot_create(rel->heap, NULL);
	scan = hl_index_beginscan(rel->heap, rel->index, snapshot, 1);
	index_rescan(scan, &key, 1, NULL, 0);

	memset(k, 0, sizeof(Keepalive));
	k->found = index_getnext_slot(scan, ForwardScanDirection, slot);
	if (k->found)
	{
		if (snapshot->snapshot_type == SNAPSHOT_DIRTY)
			k->inflight = TransactionIdIsValid(snapshot->xmin) ?
				snapshot->xmin : snapshot->xmax;
		keepalive_from_slot(slot, k);
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
}

/* Deform a keepalive row into *k (its owner copied). */
static void
keepalive_from_slot(TupleTableSlot *slot, Keepalive *k)
{
	slot_getallattrs(slot);
	k->tid = slot->tts_tid;
	k->id = DatumGetInt64(column(slot, Anum_keepalive_id, "id"));
	k->owner_roleid = DatumGetObjectId(column(slot, Anum_keepalive_owner_roleid, "owner_roleid"));
	k->owner = (text *) PG_DETOAST_DATUM_COPY(column(slot, Anum_keepalive_owner, "owner"));
	k->renewed_at = DatumGetTimestampTz(column(slot, Anum_keepalive_renewed_at, "renewed_at"));
	k->expires_at = DatumGetTimestampTz(column(slot, Anum_keepalive_expires_at, "expires_at"));
	k->version = DatumGetInt64(column(slot, Anum_keepalive_version, "version"));
	k->attach_horizon = slot->tts_isnull[Anum_keepalive_attach_horizon - 1] ? 0 :
		DatumGetInt64(slot->tts_values[Anum_keepalive_attach_horizon - 1]);
}

/*
 * Call "callback" for every keepalive the active snapshot sees (the
 * worker's pass: a keepalive no running term names any more is still
 * its to delete once it lapses).  Raises 55P03 if the table is locked.
 */
void
hl_keepalive_scan(void (*callback) (const Keepalive *k, void *arg), void *arg)
{
	HlRelation	rel;
	TableScanDesc scan;
	TupleTableSlot *slot;

	if (!hl_open(HL_REL_KEEPALIVE, AccessShareLock, false, &rel))
		hl_table_busy_error(HL_REL_KEEPALIVE);
	slot = table_slot_create(rel.heap, NULL);
	scan = table_beginscan(rel.heap, GetActiveSnapshot(), 0, NULL);
	while (table_scan_getnextslot(scan, ForwardScanDirection, slot))
	{
		Keepalive	k = {0};

		CHECK_FOR_INTERRUPTS();
		k.found = true;
		keepalive_from_slot(slot, &k);
		callback(&k, arg);
		pfree(k.owner);
	}
	table_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	hl_close(&rel, false);
}

/*
 * Give "lease", as read through "snapshot", its keepalive's expiry, if it is
 * a running term attached to one.  Under a dirty snapshot, *inflight (if
 * not set already) names another transaction changing the keepalive.
 * "cache", if not NULL, keeps the last keepalive read, for a scan of many
 * rows through one MVCC snapshot (k->id 0: none yet).  A term whose
 * keepalive is gone keeps its own expires_at: the expiry the keepalive had
 * when the term was attached, or later written over it.
 */
void
hl_keepalive_apply(Lease *lease, Snapshot snapshot, TransactionId *inflight,
				   Keepalive *cache)
{
	HlRelation	rel;
	Keepalive	local;
	Keepalive  *k = cache != NULL ? cache : &local;

	if (lease->keepalive <= 0 || lease->state != LEASE_STATE_HELD)
		return;
	if (cache == NULL || cache->id != lease->keepalive ||
		snapshot->snapshot_type == SNAPSHOT_DIRTY)
	{
		SnapshotData dirty;

		if (!hl_open(HL_REL_KEEPALIVE, AccessShareLock, false, &rel))
			hl_table_busy_error(HL_REL_KEEPALIVE);
		if (snapshot->snapshot_type == SNAPSHOT_DIRTY)
		{
			InitDirtySnapshot(dirty);
			snapshot = &dirty;
		}
		hl_keepalive_fetch(&rel, lease->keepalive, snapshot, k);
		hl_close(&rel, false);
		k->id = lease->keepalive;
	}
	if (!k->found)
		return;
	lease->expires_at = k->expires_at;
	lease->renewed_at = Max(lease->renewed_at, k->renewed_at);
	lease->keepalive_version = k->version;
	if (inflight != NULL && !TransactionIdIsValid(*inflight))
		*inflight = k->inflight;
}

static HeapTuple
form_tuple(HlRelation *rel, const Keepalive *k)
{
	Datum		values[Natts_keepalive];
	bool		nulls[Natts_keepalive] = {0};

	values[Anum_keepalive_id - 1] = Int64GetDatum(k->id);
	values[Anum_keepalive_owner_roleid - 1] = ObjectIdGetDatum(k->owner_roleid);
	values[Anum_keepalive_owner - 1] = PointerGetDatum(k->owner);
	values[Anum_keepalive_renewed_at - 1] = TimestampTzGetDatum(k->renewed_at);
	values[Anum_keepalive_expires_at - 1] = TimestampTzGetDatum(k->expires_at);
	values[Anum_keepalive_version - 1] = Int64GetDatum(k->version);
	values[Anum_keepalive_attach_horizon - 1] = Int64GetDatum(k->attach_horizon);
	nulls[Anum_keepalive_attach_horizon - 1] = (k->attach_horizon == 0);
	return heap_form_tuple(RelationGetDescr(rel->heap), values, nulls);
}

/* Insert a new keepalive (its id from hl_keepalive_next_id). */
void
hl_keepalive_insert(HlRelation *rel, Keepalive *k)
{
	HeapTuple	tuple = form_tuple(rel, k);

	hl_row_insert(rel, tuple);
	k->found = true;
	k->tid = tuple->t_self;
	CommandCounterIncrement();
}

/*
 * Write k's values over the version at k->tid, without waiting (see
 * hl_row_update); on success k->tid is the new version.
 */
TM_Result
hl_keepalive_update(HlRelation *rel, Keepalive *k)
{
	HeapTuple	tuple = form_tuple(rel, k);
	TM_Result	result;

	result = hl_row_update(rel, &k->tid, tuple);
	if (result == TM_Ok)
	{
		k->tid = tuple->t_self;
		CommandCounterIncrement();
	}
	return result;
}

/* Delete the keepalive version at "tid", without waiting. */
TM_Result
hl_keepalive_delete(HlRelation *rel, ItemPointer tid)
{
	TM_Result	result = hl_row_delete(rel, tid);

	if (result == TM_Ok)
		CommandCounterIncrement();
	return result;
}

/* A new keepalive's id: never one any keepalive of this database had. */
int64
hl_keepalive_next_id(void)
{
	return nextval_internal(hl_sequence_oid("keepalive_id_seq"), false);
}

/*
 * The worker's schedule key of keepalive "id" in "buf" (at least
 * HL_KEEPALIVE_KEY_LEN bytes): a name no lease can have, as it begins with
 * a control character.  Returns its length.
 */
int
hl_keepalive_key(int64 id, char *buf)
{
	return snprintf(buf, HL_KEEPALIVE_KEY_LEN, KEY_PREFIX INT64_FORMAT, id);
}

/* Is "name" a keepalive's schedule key?  Its id in *id. */
bool
hl_keepalive_parse_key(const char *name, int namelen, int64 *id)
{
	int			plen = strlen(KEY_PREFIX);
	char		buf[HL_KEEPALIVE_KEY_LEN];

	if (namelen <= plen || namelen >= HL_KEEPALIVE_KEY_LEN ||
		memcmp(name, KEY_PREFIX, plen) != 0)
		return false;
	memcpy(buf, name + plen, namelen - plen);
	buf[namelen - plen] = '\0';
	/* (strtoi64 is PostgreSQL 15's; all digits here, no sign) */
	*id = (int64) strtoll(buf, NULL, 10);
	return *id > 0;
}

/* The keepalive table's btree index on (owner_roleid, owner) */
static bool
is_owner_index(Relation index)
{
	Form_pg_index form = index->rd_index;

	return index->rd_rel->relam == BTREE_AM_OID &&
		form->indnkeyatts == 2 &&
		form->indkey.values[0] == Anum_keepalive_owner_roleid &&
		form->indkey.values[1] == Anum_keepalive_owner &&
		RelationGetIndexPredicate(index) == NIL &&
		RelationGetIndexExpressions(index) == NIL;
}

/* That index, opened as hl_open_index() opens one: NULL if locked */
static Relation
open_owner_index(HlRelation *rel)
{
	return hl_open_index(rel, is_owner_index, "on (owner_roleid, owner)");
}

/*
 * Call "callback" for every keepalive of "owner" of role "roleid" that
 * "snapshot" sees (under a dirty snapshot, k->inflight names another
 * transaction inserting or changing it, if any).  Returns false, having
 * read nothing, if the index it reads is locked (maintenance).
 */
bool
hl_keepalive_scan_owner(HlRelation *rel, Oid roleid, text *owner,
						Snapshot snapshot,
						void (*callback) (const Keepalive *k, void *arg),
						void *arg)
{
	Relation	index = open_owner_index(rel);
	ScanKeyData keys[2];
	IndexScanDesc scan;
	TupleTableSlot *slot;

	if (index == NULL)
		return false;
	ScanKeyInit(&keys[0], 1, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(roleid));
	ScanKeyInit(&keys[1], 2, BTEqualStrategyNumber, F_TEXTEQ,
				PointerGetDatum(owner));
	slot = table_slot_create(rel->heap, NULL);
	scan = hl_index_beginscan(rel->heap, index, snapshot, 2);
	index_rescan(scan, keys, 2, NULL, 0);
	while (index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		Keepalive	k = {0};

		CHECK_FOR_INTERRUPTS();
		k.found = true;
		if (snapshot->snapshot_type == SNAPSHOT_DIRTY)
			k.inflight = TransactionIdIsValid(snapshot->xmin) ?
				snapshot->xmin : snapshot->xmax;
		keepalive_from_slot(slot, &k);
		callback(&k, arg);
		pfree(k.owner);
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	index_close(index, rel->lockmode);
	return true;
}

/*
 * How many keepalives of role "roleid" the newest snapshot sees (lapsed
 * ones the worker has not deleted yet too), counting no further than
 * "limit".  Only hoplock.max_names_per_role asks, when a role begins one.
 */
int64
hl_keepalive_count_role(HlRelation *rel, Oid roleid, int64 limit)
{
	Relation	index = open_owner_index(rel);
	ScanKeyData key;
	IndexScanDesc scan;
	TupleTableSlot *slot;
	Snapshot	snapshot;
	int64		n = 0;

	/* locked by maintenance: busy, as the table would be */
	if (index == NULL)
		hl_table_busy_error(rel->which);
	snapshot = RegisterSnapshot(GetLatestSnapshot());

	ScanKeyInit(&key, 1, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(roleid));
	slot = table_slot_create(rel->heap, NULL);
	scan = hl_index_beginscan(rel->heap, index, snapshot, 1);
	index_rescan(scan, &key, 1, NULL, 0);
	while (n < limit && index_getnext_slot(scan, ForwardScanDirection, slot))
	{
		CHECK_FOR_INTERRUPTS();
		n++;
	}
	index_endscan(scan);
	ExecDropSingleTupleTableSlot(slot);
	UnregisterSnapshot(snapshot);
	index_close(index, rel->lockmode);
	return n;
}
