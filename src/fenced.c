/*-------------------------------------------------------------------------
 *
 * fenced.c
 *		hoplock_fenced(lease, generation_column): a trigger function for
 *		users' own tables that rejects, inside the writer's transaction, any
 *		row written with a generation other than the term that holds the
 *		lease now (55P03, as hoplock_fence), and takes the same lock as
 *		hoplock_fence, so a stale leader's write aborts even if it never
 *		called the fence itself:
 *
 *		CREATE TRIGGER invoices_fenced
 *		    BEFORE INSERT OR UPDATE OR DELETE ON invoices
 *		    FOR EACH ROW EXECUTE FUNCTION
 *		        hoplock.hoplock_fenced('billing-scheduler', 'generation');
 *
 *		An insert or update checks the new row's generation, a delete the
 *		old row's.  The writer stamps each row with its own generation.
 *		TRUNCATE fires no row trigger; a BEFORE TRUNCATE statement trigger
 *		calling hoplock_fenced refuses it.
 *
 *		Cheap enough for bulk writes: the fence is taken once per
 *		transaction, lease and generation (fence.c remembers it), and a
 *		statement remembers the last generation it saw fenced, so most rows
 *		cost one column fetch and a comparison.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "args.h"
#include "compat.h"
#include "fence.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_trigger.h"
#include "catalog/pg_type.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "storage/proc.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

PG_FUNCTION_INFO_V1(hoplock_fenced);

/* What a trigger call remembers for the rest of its statement (fn_extra) */
typedef struct FencedState
{
	Oid			relid;			/* the table, to notice a reuse */
	AttrNumber	attnum;			/* of the generation column */
	Oid			atttype;		/* int2, int4 or int8 */
	text	   *lease;			/* the lease name, checked */
	LocalTransactionId lxid;	/* the transaction "fenced" belongs to */
	Oid			roleid;			/* the role "fenced" was checked for */
	int16		order_checked;	/* events check_fires_last() passed */
	bool		fenced;
	int64		generation;		/* fenced in that transaction */
} FencedState;

/*
 * Refuse to check a row that another BEFORE row trigger of the same event
 * may still change: BEFORE triggers fire in name order, and one named
 * after this one could rewrite the generation once it was checked.
 * (Disabled triggers fire not at all; other hoplock_fenced triggers
 * change nothing.)  Checked once per statement and event: INSERT ... ON
 * CONFLICT DO UPDATE fires both.
 */
static void
check_fires_last(FunctionCallInfo fcinfo, TriggerData *trigdata,
				 FencedState *state)
{
	TriggerDesc *desc = trigdata->tg_relation->trigdesc;
	Trigger    *me = trigdata->tg_trigger;
	int16		event;

	if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		event = TRIGGER_TYPE_INSERT;
	else if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		event = TRIGGER_TYPE_UPDATE;
	else
		return;					/* a delete checks the row as it stands */
	if (state->order_checked & event)
		return;

	for (int i = 0; desc != NULL && i < desc->numtriggers; i++)
	{
		Trigger    *t = &desc->triggers[i];

		if (t->tgoid == me->tgoid || t->tgenabled == TRIGGER_DISABLED ||
			t->tgfoid == fcinfo->flinfo->fn_oid ||
			!TRIGGER_TYPE_MATCHES(t->tgtype, TRIGGER_TYPE_ROW,
								  TRIGGER_TYPE_BEFORE, event) ||
			strcmp(t->tgname, me->tgname) < 0)
			continue;
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("trigger \"%s\" on table \"%s\" fires after trigger \"%s\", which fences the table",
						t->tgname, RelationGetRelationName(trigdata->tg_relation),
						me->tgname),
				 errdetail("A BEFORE trigger that fires after hoplock_fenced could change the generation it checked."),
				 errhint("Rename the triggers so that the one calling hoplock_fenced sorts last: BEFORE triggers fire in name order.")));
	}
	state->order_checked |= event;
}

static FencedState *
fenced_state(FunctionCallInfo fcinfo, TriggerData *trigdata)
{
	FencedState *state = (FencedState *) fcinfo->flinfo->fn_extra;
	Relation	rel = trigdata->tg_relation;
	Trigger    *trigger = trigdata->tg_trigger;
	const char *colname;
	AttrNumber	attnum;
	Oid			atttype;
	MemoryContext old;
	LOCAL_FCINFO(namecall, 2);

	if (state != NULL && state->relid == RelationGetRelid(rel))
		return state;

	if (trigger->tgnargs != 2)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("trigger \"%s\" on table \"%s\" must give hoplock_fenced two arguments",
						trigger->tgname, RelationGetRelationName(rel)),
				 errhint("Use hoplock_fenced('lease name', 'generation column').")));
	colname = trigger->tgargs[1];
	attnum = SPI_fnumber(RelationGetDescr(rel), colname);
	if (attnum <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_UNDEFINED_COLUMN),
				 errmsg("column \"%s\" of table \"%s\" does not exist",
						colname, RelationGetRelationName(rel)),
				 errhint("The second argument of hoplock_fenced names the column that holds each row's generation.")));
	atttype = TupleDescAttr(RelationGetDescr(rel), attnum - 1)->atttypid;
	if (atttype != INT8OID && atttype != INT4OID && atttype != INT2OID)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("column \"%s\" of table \"%s\" is of type %s, not an integer type",
						colname, RelationGetRelationName(rel),
						format_type_be(atttype))));

	/* computed after the BEFORE triggers: the check would see the old value */
	if (TupleDescAttr(RelationGetDescr(rel), attnum - 1)->attgenerated != '\0')
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("column \"%s\" of table \"%s\" is a generated column",
						colname, RelationGetRelationName(rel)),
				 errdetail("A generated column is computed after BEFORE triggers, so hoplock_fenced would check a value other than the one written."),
				 errhint("Stamp the generation into a plain column.")));

	old = MemoryContextSwitchTo(fcinfo->flinfo->fn_mcxt);
	state = palloc0(sizeof(FencedState));
	state->relid = RelationGetRelid(rel);
	state->attnum = attnum;
	state->atttype = atttype;
	/* the lease name, checked as every function checks one */
	InitFunctionCallInfoData(*namecall, NULL, 1, InvalidOid, NULL, NULL);
	namecall->args[0].value = CStringGetTextDatum(trigger->tgargs[0]);
	namecall->args[0].isnull = false;
	state->lease = hl_arg_name(namecall, 0, "name");
	MemoryContextSwitchTo(old);
	fcinfo->flinfo->fn_extra = state;
	return state;
}

/*
 * The trigger hoplock_fenced(name, column): refuse a row change (or a
 * TRUNCATE) unless the row's generation is the current term's and the
 * caller may write under it.
 */
Datum
hoplock_fenced(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;
	FencedState *state;
	HeapTuple	checked;
	HeapTuple	result;
	Datum		d;
	bool		isnull;
	int64		generation;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("hoplock_fenced: must be called as a trigger")));
	/*
	 * TRUNCATE fires no row triggers: a BEFORE TRUNCATE trigger refuses it,
	 * as no row of it can be checked.
	 */
	if (TRIGGER_FIRED_BY_TRUNCATE(trigdata->tg_event) &&
		TRIGGER_FIRED_BEFORE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				 errmsg("cannot truncate table \"%s\" fenced by hoplock_fenced",
						RelationGetRelationName(trigdata->tg_relation)),
				 errdetail("TRUNCATE writes no rows whose generation could be checked."),
				 errhint("Delete the rows in a transaction that called hoplock_fence.")));
	if (!TRIGGER_FIRED_FOR_ROW(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("hoplock_fenced: must be fired for each row")));
	/* an AFTER trigger would check a row already written */
	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event))
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("hoplock_fenced: must be fired before the row is written"),
				 errhint("Create the trigger as BEFORE INSERT OR UPDATE OR DELETE ... FOR EACH ROW.")));

	if (TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		checked = result = trigdata->tg_newtuple;
	else if (TRIGGER_FIRED_BY_DELETE(trigdata->tg_event))
		checked = result = trigdata->tg_trigtuple;
	else if (TRIGGER_FIRED_BY_INSERT(trigdata->tg_event))
		checked = result = trigdata->tg_trigtuple;
	else
		ereport(ERROR,
				(errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				 errmsg("hoplock_fenced: must be fired by INSERT, UPDATE or DELETE")));

	state = fenced_state(fcinfo, trigdata);
	check_fires_last(fcinfo, trigdata, state);
	d = heap_getattr(checked, state->attnum,
					 RelationGetDescr(trigdata->tg_relation), &isnull);
	if (isnull)
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("a row of table \"%s\" written under lease \"%s\" has a null generation",
						RelationGetRelationName(trigdata->tg_relation),
						text_to_cstring(state->lease))));
	generation = state->atttype == INT8OID ? DatumGetInt64(d) :
		state->atttype == INT4OID ? (int64) DatumGetInt32(d) :
		(int64) DatumGetInt16(d);

	/* the common case: the generation this statement already saw fenced */
	if (state->fenced && state->generation == generation &&
		state->lxid == hl_my_lxid() && state->roleid == GetUserId())
		return PointerGetDatum(result);

	if (generation <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_LOCK_NOT_AVAILABLE),
				 errmsg("lease \"%s\" is not held by generation " INT64_FORMAT,
						text_to_cstring(state->lease), generation)));
	hl_fence_once(state->lease, generation);
	state->fenced = true;
	state->generation = generation;
	state->lxid = hl_my_lxid();
	state->roleid = GetUserId();
	return PointerGetDatum(result);
}
