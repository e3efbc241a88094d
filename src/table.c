/*-------------------------------------------------------------------------
 *
 * table.c
 *		Finding hoplock's tables -- hoplock_internal.lease, floor, history
 *		and branch -- and checking that they can be trusted,
 *		before anything reads or writes them directly.
 *
 *		A table is hoplock's only if the extension hoplock owns it
 *		(pg_depend), not because of its name: a database owner can create a
 *		schema called hoplock_internal in a database without the extension.
 *		Its shape must be what the install script made, or what hoplock
 *		reads could be anything: the columns and their types, NOT NULL where
 *		hoplock never writes a null, a permanent table (an unlogged one is
 *		emptied by a crash, and generations would start again), no rules,
 *		and no triggers other than row-level AFTER triggers (which hoplock
 *		fires, as pg_repack needs).  The lease table's primary key must be
 *		a plain unique btree on name in the "C" collation: lookups use it.
 *		A table that fails raises 55000 and says what is wrong.
 *
 *		What the check finds is cached per backend and checked again after
 *		any relcache invalidation of the table or its index (ALTER TABLE,
 *		REINDEX, VACUUM FULL, CREATE TRIGGER, DROP EXTENSION...).
 *
 *		Locking: no call waits for a lock on the tables for more than
 *		HL_LOCK_WAIT_MS.  A caller that cannot have it reports the table
 *		busy (an error, 55P03, or contention for those that wait anyway).
 *		Locks are taken the way the executor takes them: the table, then
 *		its indexes, each in the mode the statement needs.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "executor_compat.h"
#include "hoplock.h"
#include "storage.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/indexing.h"
#include "catalog/namespace.h"
#include "catalog/pg_am.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_extension.h"
#include "catalog/pg_index.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/lmgr.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/syscache.h"

/* The SQL objects this library works with */
#define HL_SQL_VERSION		"1.2.0"

/* Longest wait for a lock on one of the tables */
#define HL_LOCK_WAIT_MS		10

/* A column as the install script makes it */
typedef struct ColumnSpec
{
	const char *name;
	Oid			type;
	bool		not_null;		/* must be NOT NULL: hoplock never writes a
								 * null there, and reads rely on it */
} ColumnSpec;

static const ColumnSpec lease_columns[] = {
	{"name", TEXTOID, true},
	{"state", CHAROID, true},
	{"owner", TEXTOID, true},
	{"owner_role", NAMEOID, true},
	{"generation", INT8OID, true},
	{"acquired_at", TIMESTAMPTZOID, true},
	{"renewed_at", TIMESTAMPTZOID, true},
	{"expires_at", TIMESTAMPTZOID, true},
	{"session_pid", INT4OID, false},
	{"session_start", TIMESTAMPTZOID, false},
	{"owner_roleid", OIDOID, true},
	{"version", INT8OID, false},
	{"value", TEXTOID, false},
	{"step_down_at", TIMESTAMPTZOID, false},
	{"step_down_to", TEXTOID, false},
	{"priority", INT4OID, false},
	{"handed_pid", INT4OID, false},
	{"handed_start", TIMESTAMPTZOID, false},
	{"hold_until", TIMESTAMPTZOID, false},
	{"keepalive", INT8OID, false},
};

static const ColumnSpec keepalive_columns[] = {
	{"id", INT8OID, true},
	{"owner_roleid", OIDOID, true},
	{"owner", TEXTOID, true},
	{"renewed_at", TIMESTAMPTZOID, true},
	{"expires_at", TIMESTAMPTZOID, true},
	{"version", INT8OID, true},
	{"attach_horizon", INT8OID, false},
};

static const ColumnSpec history_columns[] = {
	{"name", TEXTOID, true},
	{"generation", INT8OID, true},
	{"owner", TEXTOID, true},
	{"role", NAMEOID, true},
	{"acquired_at", TIMESTAMPTZOID, true},
	{"begin_seq", INT8OID, true},
	{"ended_at", TIMESTAMPTZOID, false},
	{"end_seq", INT8OID, false},
	{"how", TEXTOID, false},
};

static const ColumnSpec floor_columns[] = {
	{"system_identifier", INT8OID, true},
	{"database", OIDOID, true},
	{"base_era", INT8OID, true},
	{"base_timeline", INT8OID, true},
	{"last_timeline", INT8OID, true},
	{"forgotten", INT8OID, true},
};

static const ColumnSpec branch_columns[] = {
	{"tag", INT4OID, true},
	{"started_at", TIMESTAMPTZOID, true},
	{"floor", INT8OID, true},
	{"parent_tag", INT4OID, false},
	{"parent_started_at", TIMESTAMPTZOID, false},
	{"fork_point", INT8OID, false},
	{"reason", TEXTOID, true},
	{"incarnation", INT8OID, true},
	{"timeline", INT8OID, true},
	{"system_identifier", INT8OID, true},
	{"database", OIDOID, true},
};

static const ColumnSpec event_columns[] = {
	{"seq", INT8OID, true},
	{"event", TEXTOID, true},
	{"name", TEXTOID, true},
	{"owner", TEXTOID, true},
	{"generation", INT8OID, true},
	{"expires_at", TIMESTAMPTZOID, true},
	{"at", TIMESTAMPTZOID, true},
	{"value", TEXTOID, false},
	{"free_at", TIMESTAMPTZOID, false},
	{"earlier_names", TEXTARRAYOID, false},
	{"earlier_owners", TEXTARRAYOID, false},
	{"earlier_generations", INT8ARRAYOID, false},
	{"earlier_expires_at", TIMESTAMPTZARRAYOID, false},
	{"earlier_values", TEXTARRAYOID, false},
};

static const ColumnSpec delivery_columns[] = {
	{"delivered", INT8OID, true},
	{"delivered_at", TIMESTAMPTZOID, true},
	{"pruned_through", INT8OID, true},
	{"expiries_after", INT8OID, false},
};

/* A primary key hoplock looks rows up with: key columns and opfamilies */
typedef struct KeySpec
{
	int			nkeys;			/* 0: the table has none hoplock uses */
	AttrNumber	attnums[2];
	Oid			opfamilies[2];
	const char *columns;		/* for messages */
} KeySpec;

typedef struct TableSpec
{
	const char *name;
	const ColumnSpec *columns;
	int			ncolumns;
	const char *const *own_checks;	/* CHECK constraints the install script
									 * made, which hoplock's rows satisfy by
									 * construction */
	KeySpec		key;
} TableSpec;

static const char *const lease_checks[] = {
	"lease_state_check", "lease_generation_check", NULL
};
static const char *const floor_checks[] = {"floor_check", NULL};
static const char *const branch_checks[] = {"branch_check", NULL};
static const char *const delivery_checks[] = {"delivery_check", NULL};
static const char *const no_checks[] = {NULL};

static const TableSpec specs[HL_NRELS] = {
	{"lease", lease_columns, lengthof(lease_columns), lease_checks,
	{1, {1}, {TEXT_BTREE_FAM_OID}, "\"name\""}},
	{"floor", floor_columns, lengthof(floor_columns), floor_checks,
	{0}},
	{"history", history_columns, lengthof(history_columns), no_checks,
	{2, {1, 2}, {TEXT_BTREE_FAM_OID, INTEGER_BTREE_FAM_OID},
	"\"name\", \"generation\""}},
	{"branch", branch_columns, lengthof(branch_columns), branch_checks,
	{0}},
	{"event", event_columns, lengthof(event_columns), no_checks,
	{1, {1}, {INTEGER_BTREE_FAM_OID}, "\"seq\""}},
	{"delivery", delivery_columns, lengthof(delivery_columns), delivery_checks,
	{0}},
	{"keepalive", keepalive_columns, lengthof(keepalive_columns), no_checks,
	{1, {1}, {INTEGER_BTREE_FAM_OID}, "\"id\""}},
};

/* What the shape check found out about a table (a backend-local cache) */
struct HlTableInfo
{
	bool		valid;			/* relid names the table */
	bool		checked;		/* the shape check passed since the last
								 * invalidation */
	Oid			relid;
	Oid			indexid;		/* lease: the primary key it was checked
								 * with */
	bool		foreign_constraints;	/* CHECK or NOT NULL constraints that
										 * hoplock's rows may not satisfy */
	bool		after_triggers; /* enabled row-level AFTER triggers */
};

static HlTableInfo tables[HL_NRELS];
static bool callback_registered = false;

/* The row type hoplock_lease, for results */
static struct
{
	Oid			typrelid;
	TupleDesc	desc;			/* in CacheMemoryContext */
	TupleDesc	stale;			/* invalidated, freed at the next lookup */
}			result_type;

/* Bumped by every relcache invalidation this backend processes */
static uint64 invalidations = 0;

static void
table_invalidate(Datum arg, Oid relid)
{
	invalidations++;
	for (int i = 0; i < HL_NRELS; i++)
	{
		if (relid == InvalidOid || relid == tables[i].relid ||
			(OidIsValid(tables[i].indexid) && relid == tables[i].indexid))
			tables[i].checked = false;
	}
	if (relid == InvalidOid || relid == result_type.typrelid)
	{
		/*
		 * The call that is running may still be using the descriptor: keep
		 * it until the next lookup.  An older stale copy predates it and is
		 * no longer in use.
		 */
		if (result_type.desc != NULL)
		{
			if (result_type.stale != NULL)
				FreeTupleDesc(result_type.stale);
			result_type.stale = result_type.desc;
			result_type.desc = NULL;
		}
		result_type.typrelid = InvalidOid;
	}
}

static void
register_callback(void)
{
	if (!callback_registered)
	{
		CacheRegisterRelcacheCallback(table_invalidate, (Datum) 0);
		callback_registered = true;
	}
}

static void
not_installed(void)
{
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("extension \"hoplock\" is not installed in this database"),
			 errhint("Run CREATE EXTENSION hoplock.")));
}

/* The installed version of extension "extoid", palloc'd. */
static char *
extension_version(Oid extoid)
{
	Relation	rel;
	SysScanDesc scan;
	ScanKeyData key;
	HeapTuple	tuple;
	char	   *version = NULL;

	rel = table_open(ExtensionRelationId, AccessShareLock);
	ScanKeyInit(&key, Anum_pg_extension_oid, BTEqualStrategyNumber,
				F_OIDEQ, ObjectIdGetDatum(extoid));
	scan = systable_beginscan(rel, ExtensionOidIndexId, true, NULL, 1, &key);
	tuple = systable_getnext(scan);
	if (HeapTupleIsValid(tuple))
	{
		bool		isnull;
		Datum		d = heap_getattr(tuple, Anum_pg_extension_extversion,
									 RelationGetDescr(rel), &isnull);

		if (!isnull)
			version = TextDatumGetCString(d);
	}
	systable_endscan(scan);
	table_close(rel, AccessShareLock);
	return version;
}

/* Is extension "extoid"'s SQL of the version this library needs? */
static bool
version_current(Oid extoid)
{
	char	   *version = extension_version(extoid);

	return version != NULL && strcmp(version, HL_SQL_VERSION) == 0;
}

/* Are the extension's SQL objects there, of the version this library needs? */
bool
hl_extension_current(void)
{
	Oid			extoid = get_extension_oid("hoplock", true);

	return OidIsValid(extoid) && version_current(extoid);
}

/*
 * The OID of hoplock's table "which", or InvalidOid if this database has
 * no hoplock.  Raises if the extension is there but its table is not its
 * own, or its SQL objects are of another version.
 */
static Oid
find_table(HlRel which, bool missing_ok)
{
	Oid			extoid = get_extension_oid("hoplock", true);
	Oid			nsp;
	Oid			relid = InvalidOid;
	char	   *version;

	if (!OidIsValid(extoid))
	{
		if (missing_ok)
			return InvalidOid;
		not_installed();
	}

	if (!version_current(extoid))
	{
		version = extension_version(extoid);
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("extension \"hoplock\" must be updated"),
				 errdetail("Its SQL objects are version %s; the hoplock library loaded needs version %s.",
						   version ? version : "(unknown)", HL_SQL_VERSION),
				 errhint("Run ALTER EXTENSION hoplock UPDATE.")));
	}

	nsp = get_namespace_oid(HL_SCHEMA, true);
	if (OidIsValid(nsp))
		relid = get_relname_relid(specs[which].name, nsp);
	if (!OidIsValid(relid) ||
		getExtensionOfObject(RelationRelationId, relid) != extoid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("table \"%s.%s\" is not part of extension \"hoplock\"",
						HL_SCHEMA, specs[which].name),
				 errhint("Reinstall the extension with DROP EXTENSION and CREATE EXTENSION.")));
	return relid;
}

/*
 * The OID of hoplock's sequence "name" in hoplock_internal, checked like
 * its tables (the extension's own); cached until an invalidation (two
 * sequences: event_seq and keepalive_id_seq).
 */
Oid
hl_sequence_oid(const char *name)
{
	static struct
	{
		const char *name;
		Oid			relid;
		uint64		at;
	}			cache[2];
	Oid			extoid;
	Oid			nsp;
	Oid			relid = InvalidOid;
	int			slot;

	register_callback();
	for (slot = 0; slot < (int) lengthof(cache) - 1; slot++)
		if (cache[slot].name == NULL || strcmp(cache[slot].name, name) == 0)
			break;
	if (cache[slot].name != NULL && strcmp(cache[slot].name, name) == 0 &&
		OidIsValid(cache[slot].relid) && cache[slot].at == invalidations)
		return cache[slot].relid;
	extoid = get_extension_oid("hoplock", true);
	if (!OidIsValid(extoid))
		not_installed();
	nsp = get_namespace_oid(HL_SCHEMA, true);
	if (OidIsValid(nsp))
		relid = get_relname_relid(name, nsp);
	if (!OidIsValid(relid) || get_rel_relkind(relid) != RELKIND_SEQUENCE ||
		getExtensionOfObject(RelationRelationId, relid) != extoid)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("sequence \"%s.%s\" is not part of extension \"hoplock\"",
						HL_SCHEMA, name),
				 errhint("Reinstall the extension with DROP EXTENSION and CREATE EXTENSION.")));
	/* (names are the callers' string constants) */
	cache[slot].name = name;
	cache[slot].relid = relid;
	cache[slot].at = invalidations;
	return relid;
}

/* Does this database have hoplock (the worker asks)?  Needs a transaction. */
bool
hl_extension_installed(void)
{
	return OidIsValid(find_table(HL_REL_LEASE, true));
}

/* Every "cannot be trusted" error: 55000, with the same hint */
#define untrusted(...) \
	ereport(ERROR, \
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE), \
			 __VA_ARGS__, \
			 errhint("Restore the table as the extension created it, or reinstall the extension.")))

static char *
qualified_name(Relation heap)
{
	return psprintf("%s.%s", HL_SCHEMA, RelationGetRelationName(heap));
}

static void
check_columns(Relation heap, const TableSpec *spec, HlTableInfo *info)
{
	TupleDesc	desc = RelationGetDescr(heap);

	if (desc->natts != spec->ncolumns)
		untrusted(errmsg("table \"%s\" does not have the columns hoplock created",
						 qualified_name(heap)),
				  errdetail("It has %d columns; hoplock expects %d.",
							desc->natts, spec->ncolumns));
	for (int i = 0; i < spec->ncolumns; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		const ColumnSpec *col = &spec->columns[i];

		if (att->attisdropped || att->atttypid != col->type ||
			strcmp(NameStr(att->attname), col->name) != 0 ||
			att->attgenerated != '\0')
			untrusted(errmsg("table \"%s\" does not have the columns hoplock created",
							 qualified_name(heap)),
					  errdetail("Column %d should be \"%s\" of type %s.",
								i + 1, col->name, format_type_be(col->type)));
		if (col->not_null && !att->attnotnull)
			untrusted(errmsg("column \"%s\" of table \"%s\" must be NOT NULL",
							 col->name, qualified_name(heap)));
		if (!col->not_null && att->attnotnull)
			info->foreign_constraints = true;
	}
}

static void
check_triggers(Relation heap, HlTableInfo *info)
{
	TriggerDesc *trigdesc = heap->trigdesc;

	if (trigdesc == NULL)
		return;
	for (int i = 0; i < trigdesc->numtriggers; i++)
	{
		Trigger    *trig = &trigdesc->triggers[i];

		if (trig->tgenabled == TRIGGER_DISABLED)
			continue;
		if (!TRIGGER_FOR_ROW(trig->tgtype) || !TRIGGER_FOR_AFTER(trig->tgtype))
			untrusted(errmsg("table \"%s\" has trigger \"%s\", which hoplock cannot fire",
							 qualified_name(heap), trig->tgname),
					  errdetail("Only row-level AFTER triggers can be used on hoplock's tables."));
		if (trig->tgdeferrable)
			untrusted(errmsg("table \"%s\" has trigger \"%s\", which hoplock cannot fire",
							 qualified_name(heap), trig->tgname),
					  errdetail("The trigger is deferrable; hoplock fires triggers at once, as their table's owner (a foreign key that references the table must not be DEFERRABLE)."));
		info->after_triggers = true;
	}
}

static void
check_constraints(Relation heap, const TableSpec *spec, HlTableInfo *info)
{
	TupleConstr *constr = RelationGetDescr(heap)->constr;

	if (constr == NULL)
		return;
	for (int i = 0; i < constr->num_check; i++)
	{
		bool		own = false;

		for (const char *const *c = spec->own_checks; *c != NULL; c++)
		{
			if (strcmp(constr->check[i].ccname, *c) == 0)
				own = true;
		}
		if (!own)
			info->foreign_constraints = true;
	}
}

/* The primary key: what lookups rely on (names compare in "C"). */
static void
check_primary_key(Relation heap, Relation index, const KeySpec *key)
{
	Form_pg_index form = index->rd_index;
	bool		ok;

	ok = index->rd_rel->relam == BTREE_AM_OID &&
		form->indrelid == RelationGetRelid(heap) &&
		form->indisunique && form->indisvalid && form->indimmediate &&
		form->indnatts == key->nkeys &&
		index->rd_indexprs == NIL && index->rd_indpred == NIL;
	for (int i = 0; ok && i < key->nkeys; i++)
	{
		ok = form->indkey.values[i] == key->attnums[i] &&
			index->rd_opfamily[i] == key->opfamilies[i] &&
			(key->opfamilies[i] != TEXT_BTREE_FAM_OID ||
			 index->rd_indcollation[i] == C_COLLATION_OID);
	}
	if (!ok)
		untrusted(errmsg("the primary key of table \"%s\" is not the one hoplock created",
						 qualified_name(heap)),
				  errdetail("hoplock looks rows up through a unique btree index on %s in collation \"C\".",
							key->columns));
}

static void
check_shape(HlRelation *rel)
{
	Relation	heap = rel->heap;
	const TableSpec *spec = &specs[rel->which];
	HlTableInfo *info = rel->info;

	info->foreign_constraints = false;
	info->after_triggers = false;

	if (heap->rd_rel->relkind != RELKIND_RELATION ||
		heap->rd_rel->relam != HEAP_TABLE_AM_OID)
		untrusted(errmsg("table \"%s\" is not a heap table",
						 qualified_name(heap)));
	if (heap->rd_rel->relpersistence != RELPERSISTENCE_PERMANENT)
		untrusted(errmsg("table \"%s\" is not a permanent table",
						 qualified_name(heap)),
				  errdetail("An unlogged table is emptied by a crash, and generations would start again from 1."));
	if (heap->rd_rules != NULL && heap->rd_rules->numLocks > 0)
		untrusted(errmsg("table \"%s\" has rules", qualified_name(heap)));
	check_columns(heap, spec, info);
	check_triggers(heap, info);
	check_constraints(heap, spec, info);
	if (rel->index != NULL)
		check_primary_key(heap, rel->index, &spec->key);
}

/*
 * Lock relation "relid" without waiting more than HL_LOCK_WAIT_MS for
 * transactions holding or queued for a conflicting lock.  Locking also
 * processes pending invalidations.
 */
bool
hl_lock_relation_briefly(Oid relid, LOCKMODE lockmode)
{
	for (int waited = 0;; waited++)
	{
		if (ConditionalLockRelationOid(relid, lockmode))
			return true;
		if (waited >= HL_LOCK_WAIT_MS)
			return false;
		/* not the latch: see wait_for_announcement() in lease.c */
		pgstat_report_wait_start(PG_WAIT_LOCK | LOCKTAG_RELATION);
		pg_usleep(1000L);
		pgstat_report_wait_end();
		CHECK_FOR_INTERRUPTS();
	}
}

/*
 * The first index of rel's table, besides its primary key (open already),
 * that "matches" accepts -- valid and ready, the caller checks the rest --
 * opened in the table's lock mode without waiting more than the table's
 * opening would (hl_lock_relation_briefly): NULL if an index is locked
 * (REINDEX), as a locked table is busy.  Raises if the table has none;
 * "what" names the index in the message ("on keepalive").
 */
Relation
hl_open_index(HlRelation *rel, bool (*matches) (Relation index),
			  const char *what)
{
	List	   *indexes = RelationGetIndexList(rel->heap);
	ListCell   *lc;

	foreach(lc, indexes)
	{
		Oid			indexid = lfirst_oid(lc);
		Relation	index;

		if (rel->index != NULL && indexid == RelationGetRelid(rel->index))
			continue;
		if (!hl_lock_relation_briefly(indexid, rel->lockmode))
		{
			list_free(indexes);
			return NULL;
		}
		index = index_open(indexid, NoLock);
		if (index->rd_index->indisvalid && index->rd_index->indisready &&
			matches(index))
		{
			list_free(indexes);
			return index;
		}
		index_close(index, rel->lockmode);
	}
	ereport(ERROR,
			(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
			 errmsg("table \"%s\" has no valid index %s",
					qualified_name(rel->heap), what),
			 errhint("Reinstall the extension with DROP EXTENSION and CREATE EXTENSION, or REINDEX the table.")));
	return NULL;				/* keep the compiler quiet */
}

/* Raise 55P03: one of hoplock's tables is locked (maintenance). */
void
hl_table_busy_error(HlRel which)
{
	ereport(ERROR,
			(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
			 errmsg("could not lock table \"%s.%s\"", HL_SCHEMA,
					specs[which].name),
			 errdetail("Another transaction holds or waits for a lock that conflicts with it, such as VACUUM FULL, CLUSTER, REINDEX or LOCK TABLE."),
			 errhint("The call changed nothing; try it again.")));
}

/*
 * Whether hoplock's table "which" exists now, cheaply: false once the
 * extension was dropped, in this very transaction too (the drop's
 * invalidation forgets the cached OID).
 */
bool
hl_table_exists(HlRel which)
{
	HlTableInfo *info = &tables[which];

	register_callback();
	if (info->valid)
		return SearchSysCacheExists1(RELOID, ObjectIdGetDatum(info->relid));
	return OidIsValid(get_extension_oid("hoplock", true));
}

/*
 * Lock and open hoplock's table "which" in "lockmode" (and the lease table's
 * primary key with it).  Returns false, holding nothing, if a lock could
 * not be had within HL_LOCK_WAIT_MS; with "wait", waits like a query.
 *
 * Locking processes invalidations: after each lock, check that the OIDs
 * still name hoplock's relations, and start over if not (DROP and CREATE
 * EXTENSION in between, or REINDEX CONCURRENTLY swapping the primary key).
 */
bool
hl_open(HlRel which, LOCKMODE lockmode, bool wait, HlRelation *rel)
{
	HlTableInfo *info = &tables[which];
	Oid			relid;
	Oid			indexid = InvalidOid;

	register_callback();
	rel->which = which;
	rel->info = info;
	rel->lockmode = lockmode;
	rel->index = NULL;

	for (;;)
	{
		bool		found_now = false;

		if (!info->valid)
		{
			info->relid = find_table(which, false);
			info->indexid = InvalidOid;
			info->checked = false;
			info->valid = true;
			found_now = true;
		}
		relid = info->relid;
		if (wait)
			LockRelationOid(relid, lockmode);
		else if (!hl_lock_relation_briefly(relid, lockmode))
			return false;

		/* dropped meanwhile: look it up again */
		rel->heap = try_relation_open(relid, NoLock);
		if (rel->heap == NULL)
		{
			info->valid = false;
			UnlockRelationOid(relid, lockmode);
			continue;
		}
		/* not checked since an invalidation: is it still hoplock's? */
		if (!info->checked && !found_now && find_table(which, false) != relid)
		{
			relation_close(rel->heap, lockmode);
			info->valid = false;
			continue;
		}
		if (specs[which].key.nkeys == 0)
			break;

		indexid = hl_primary_key_index(rel->heap);
		if (!OidIsValid(indexid))
			untrusted(errmsg("table \"%s\" has no valid primary key",
							 qualified_name(rel->heap)));
		if (wait)
			LockRelationOid(indexid, lockmode);
		else if (!hl_lock_relation_briefly(indexid, lockmode))
		{
			relation_close(rel->heap, lockmode);
			return false;
		}
		/* the primary key may have moved to another index meanwhile */
		if (hl_primary_key_index(rel->heap) == indexid)
			break;
		UnlockRelationOid(indexid, lockmode);
		relation_close(rel->heap, lockmode);
	}

	if (OidIsValid(indexid))
	{
		rel->index = index_open(indexid, NoLock);
		if (info->indexid != indexid)
		{
			info->indexid = indexid;
			info->checked = false;
		}
	}
	if (!info->checked)
	{
		check_shape(rel);
		info->checked = true;
	}
	return true;
}

/*
 * Lock hoplock's table "which" and its primary key in "lockmode" until the
 * transaction ends, as hl_open() followed by hl_close(rel, true) would:
 * without opening them, when the table was found and checked since the
 * last invalidation and still is once locked (locking processes
 * invalidations).  Returns false, holding nothing more, if a lock could
 * not be had within HL_LOCK_WAIT_MS.  The OIDs locked are returned in
 * *locked_relid and *locked_indexid (InvalidOid: none), if not NULL, for
 * a caller that gives the locks back early.
 */
bool
hl_lock_table(HlRel which, LOCKMODE lockmode, Oid *locked_relid,
			  Oid *locked_indexid)
{
	HlTableInfo *info = &tables[which];
	HlRelation	rel;

	register_callback();
	if (info->valid && info->checked &&
		(specs[which].key.nkeys == 0 || OidIsValid(info->indexid)))
	{
		Oid			relid = info->relid;
		Oid			indexid = specs[which].key.nkeys == 0 ?
			InvalidOid : info->indexid;

		if (!hl_lock_relation_briefly(relid, lockmode))
			return false;
		if (OidIsValid(indexid) && !hl_lock_relation_briefly(indexid, lockmode))
		{
			UnlockRelationOid(relid, lockmode);
			return false;
		}
		/* still the table checked, once the locks processed invalidations */
		if (info->valid && info->checked && info->relid == relid &&
			(!OidIsValid(indexid) || info->indexid == indexid))
		{
			if (locked_relid != NULL)
				*locked_relid = relid;
			if (locked_indexid != NULL)
				*locked_indexid = indexid;
			return true;
		}
		/* changed meanwhile: give both back, and find it again */
		if (OidIsValid(indexid))
			UnlockRelationOid(indexid, lockmode);
		UnlockRelationOid(relid, lockmode);
	}
	if (!hl_open(which, lockmode, false, &rel))
		return false;
	if (locked_relid != NULL)
		*locked_relid = RelationGetRelid(rel.heap);
	if (locked_indexid != NULL)
		*locked_indexid = rel.index != NULL ? RelationGetRelid(rel.index) :
			InvalidOid;
	hl_close(&rel, true);
	return true;
}

/*
 * Close the relations.  A caller that wrote keeps its locks until the
 * transaction ends; a reader gives them back at once, so that a fenced
 * transaction, or a sleeping hoplock_wait, does not hold up DDL on the
 * table (and every call queued behind that DDL).
 */
void
hl_close(HlRelation *rel, bool keep_locks)
{
	LOCKMODE	release = keep_locks ? NoLock : rel->lockmode;

	if (rel->index != NULL)
		index_close(rel->index, release);
	table_close(rel->heap, release);
	rel->index = NULL;
	rel->heap = NULL;
}

/*
 * The row type hoplock_lease, looked up from the calling function's result
 * type on first use.  If an invalidation arrives while it is being looked
 * up, it is used for this call only and looked up again next time.
 */
TupleDesc
hl_lease_result_desc(FunctionCallInfo fcinfo)
{
	static const Oid types[] = {
		TEXTOID, TEXTOID, INT8OID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID,
		TEXTOID, BOOLOID
	};
	Oid			typid;
	TupleDesc	desc;
	uint64		before = invalidations;
	MemoryContext old;
	bool		ok;

	register_callback();
	if (result_type.desc != NULL)
		return result_type.desc;

	if (get_call_result_type(fcinfo, &typid, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "return type must be a row type");

	ok = (desc->natts == (int) lengthof(types));
	for (int i = 0; ok && i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		ok = !att->attisdropped && att->atttypid == types[i];
	}
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("type \"%s\" does not have the layout hoplock expects",
						format_type_be(typid)),
				 errhint("Reinstall the extension with DROP EXTENSION and CREATE EXTENSION.")));

	if (result_type.stale != NULL)
	{
		FreeTupleDesc(result_type.stale);
		result_type.stale = NULL;
	}

	old = MemoryContextSwitchTo(CacheMemoryContext);
	desc = CreateTupleDescCopy(desc);
	MemoryContextSwitchTo(old);

	if (invalidations != before)
	{
		result_type.stale = desc;	/* freed at the next lookup */
		return desc;
	}
	result_type.typrelid = get_typ_typrelid(typid);
	result_type.desc = desc;
	return desc;
}

/* Accessors for rowwrite.c */
bool
hl_table_has_foreign_constraints(HlRelation *rel)
{
	return rel->info->foreign_constraints;
}

/* Does the table have AFTER row triggers (rowwrite.c fires them)? */
bool
hl_table_has_after_triggers(HlRelation *rel)
{
	return rel->info->after_triggers;
}
