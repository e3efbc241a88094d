/*-------------------------------------------------------------------------
 *
 * functions.c
 *		The SQL-callable functions.  Each checks its arguments, hands the
 *		work to lease.c, and turns the outcome into a hoplock_lease row, a
 *		boolean, or NULL.  Contention is a result (NULL or false), never an
 *		error.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "access/htup_details.h"
#include "commands/dbcommands.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"
#include "utils/tuplestore.h"

PG_FUNCTION_INFO_V1(hoplock_acquire);
PG_FUNCTION_INFO_V1(hoplock_wait);
PG_FUNCTION_INFO_V1(hoplock_renew);
PG_FUNCTION_INFO_V1(hoplock_release);
PG_FUNCTION_INFO_V1(hoplock_force_release);
PG_FUNCTION_INFO_V1(hoplock_holder);
PG_FUNCTION_INFO_V1(hoplock_read);
PG_FUNCTION_INFO_V1(hoplock_write);
PG_FUNCTION_INFO_V1(hoplock_delete);
PG_FUNCTION_INFO_V1(hoplock_fence);
PG_FUNCTION_INFO_V1(hoplock_serve_this_database);
PG_FUNCTION_INFO_V1(hoplock_worker_status);

static Interval *
usecs_to_interval(int64 usecs)
{
	Interval   *interval = palloc0(sizeof(Interval));

	interval->time = usecs;
	return interval;
}

static Datum
lease_datum(FunctionCallInfo fcinfo, const Lease *lease)
{
	TupleDesc	desc = lease_result_desc(fcinfo);
	Datum		values[6];
	bool		nulls[6] = {false, false, false, false, false, false};
	char		handle[LEASE_HANDLE_LEN];

	lease_format_handle(lease, handle);
	values[0] = PointerGetDatum(lease->name);
	values[1] = PointerGetDatum(lease->owner);
	values[2] = Int64GetDatum(lease->generation);
	values[3] = CStringGetTextDatum(handle);
	values[4] = TimestampTzGetDatum(lease->acquired_at);
	values[5] = TimestampTzGetDatum(lease->expires_at);

	return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}

/* Run a writing request; return its lease, or NULL if it did not write. */
static Datum
cas_returning_lease(FunctionCallInfo fcinfo, LeaseRequest *req)
{
	Lease		result;
	bool		found;

	if (lease_cas(req, &result, &found) != LEASE_DONE)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(lease_datum(fcinfo, &result));
}

static Datum
cas_returning_bool(LeaseRequest *req)
{
	Lease		result;
	bool		found;

	PG_RETURN_BOOL(lease_cas(req, &result, &found) == LEASE_DONE);
}

/* hoplock_acquire(name, owner, ttl, session_bound) */
Datum
hoplock_acquire(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_ACQUIRE;
	req.fn = "hoplock_acquire()";
	req.name = hoplock_arg_name(fcinfo, 0, "lease name");
	req.owner = hoplock_arg_name(fcinfo, 1, "owner");
	req.ttl = hoplock_arg_ttl(fcinfo, 2);
	req.session_bound = hoplock_arg_bool(fcinfo, 3, "session_bound");
	return cas_returning_lease(fcinfo, &req);
}

/* hoplock_wait(name, owner, ttl, timeout, session_bound) */
Datum
hoplock_wait(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};
	int64		timeout;
	Lease		result;

	req.op = LEASE_OP_ACQUIRE;
	req.fn = "hoplock_wait()";
	req.name = hoplock_arg_name(fcinfo, 0, "lease name");
	req.owner = hoplock_arg_name(fcinfo, 1, "owner");
	req.ttl = hoplock_arg_ttl(fcinfo, 2);
	timeout = hoplock_arg_timeout(fcinfo, 3);
	req.session_bound = hoplock_arg_bool(fcinfo, 4, "session_bound");

	if (!lease_wait(&req, timeout, &result))
		PG_RETURN_NULL();
	PG_RETURN_DATUM(lease_datum(fcinfo, &result));
}

/* hoplock_renew(name, owner, ttl [, generation]) */
Datum
hoplock_renew(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_RENEW;
	req.fn = "hoplock_renew()";
	req.name = hoplock_arg_name(fcinfo, 0, "lease name");
	req.owner = hoplock_arg_name(fcinfo, 1, "owner");
	req.ttl = hoplock_arg_ttl(fcinfo, 2);
	if (PG_NARGS() > 3)
		req.generation = hoplock_arg_generation(fcinfo, 3);
	return cas_returning_lease(fcinfo, &req);
}

/* hoplock_release(name, owner [, generation]) */
Datum
hoplock_release(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_RELEASE;
	req.fn = "hoplock_release()";
	req.name = hoplock_arg_name(fcinfo, 0, "lease name");
	req.owner = hoplock_arg_name(fcinfo, 1, "owner");
	if (PG_NARGS() > 2)
		req.generation = hoplock_arg_generation(fcinfo, 2);
	return cas_returning_bool(&req);
}

/* hoplock_force_release(name) */
Datum
hoplock_force_release(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_FORCE_RELEASE;
	req.fn = "hoplock_force_release()";
	req.name = hoplock_arg_name(fcinfo, 0, "lease name");
	return cas_returning_bool(&req);
}

/* hoplock_write(name, prev_handle, owner, ttl) */
Datum
hoplock_write(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_WRITE;
	req.fn = "hoplock_write()";
	req.name = hoplock_arg_name(fcinfo, 0, "lease name");
	req.handle = PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1);
	req.owner = hoplock_arg_name(fcinfo, 2, "owner");
	req.ttl = hoplock_arg_ttl(fcinfo, 3);
	return cas_returning_lease(fcinfo, &req);
}

/* hoplock_delete(name, handle) */
Datum
hoplock_delete(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_DELETE;
	req.fn = "hoplock_delete()";
	req.name = hoplock_arg_name(fcinfo, 0, "lease name");
	req.handle = hoplock_arg_text(fcinfo, 1, "handle");
	return cas_returning_bool(&req);
}

/* hoplock_holder(name): the running term, or NULL */
Datum
hoplock_holder(PG_FUNCTION_ARGS)
{
	text	   *name = hoplock_arg_name(fcinfo, 0, "lease name");
	Lease		lease;

	if (!lease_lookup(name, &lease) ||
		!lease_is_held(&lease, GetCurrentTimestamp()))
		PG_RETURN_NULL();
	PG_RETURN_DATUM(lease_datum(fcinfo, &lease));
}

/* hoplock_read(name): the stored state, expired or not, or NULL */
Datum
hoplock_read(PG_FUNCTION_ARGS)
{
	text	   *name = hoplock_arg_name(fcinfo, 0, "lease name");
	Lease		lease;

	if (!lease_lookup(name, &lease) || !lease_has_state(&lease))
		PG_RETURN_NULL();
	PG_RETURN_DATUM(lease_datum(fcinfo, &lease));
}

/* hoplock_fence(name, generation) */
Datum
hoplock_fence(PG_FUNCTION_ARGS)
{
	text	   *name = hoplock_arg_name(fcinfo, 0, "lease name");
	int64		generation = hoplock_arg_generation(fcinfo, 1);

	lease_fence(name, generation);
	PG_RETURN_VOID();
}

/*
 * hoplock_internal.serve_this_database(): called by the install script, so
 * that the launcher starts this database's worker once CREATE EXTENSION
 * commits.
 */
Datum
hoplock_serve_this_database(PG_FUNCTION_ARGS)
{
	at_commit_wake_launcher(MyDatabaseId);
	PG_RETURN_VOID();
}

static const char *
worker_state_name(HoplockWorkerState state)
{
	switch (state)
	{
		case WORKER_FREE:
			return "free";
		case WORKER_STARTING:
			return "starting";
		case WORKER_SCANNING:
			return "scanning";
		case WORKER_ANNOUNCING:
			return "announcing";
		case WORKER_SLEEPING:
			return "sleeping";
		case WORKER_ABSENT:
			return "absent";
		case WORKER_STOPPED:
			return "stopped";
	}
	return "unknown";
}

/*
 * hoplock_internal.worker_status(): one row per database a worker serves,
 * for the view hoplock_workers.
 */
Datum
hoplock_worker_status(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	InitMaterializedSRF(fcinfo, 0);
	if (hoplock_shared == NULL)
		PG_RETURN_VOID();

	for (int i = 0; i < hoplock_shared->nslots; i++)
	{
		HoplockDbSlot *slot = &hoplock_shared->slots[i];
		HoplockDbSlot copy;
		Oid			dboid;
		Datum		values[10];
		bool		nulls[10];
		char	   *dbname;

		SpinLockAcquire(&hoplock_shared->mutex);
		dboid = slot->dboid;
		SpinLockRelease(&hoplock_shared->mutex);
		if (!OidIsValid(dboid))
			continue;
		SpinLockAcquire(&slot->mutex);
		memcpy(&copy, slot, sizeof(HoplockDbSlot));
		SpinLockRelease(&slot->mutex);
		if (copy.state == WORKER_ABSENT)
			continue;

		memset(nulls, false, sizeof(nulls));
		dbname = get_database_name(dboid);
		values[0] = ObjectIdGetDatum(dboid);
		if (dbname != NULL)
			values[1] = CStringGetTextDatum(dbname);
		else
			nulls[1] = true;
		values[2] = Int32GetDatum(copy.pid);
		nulls[2] = (copy.pid == 0);
		values[3] = CStringGetTextDatum(worker_state_name(copy.state));
		values[4] = Int64GetDatum(copy.tracked);
		values[5] = TimestampTzGetDatum(copy.next_expiry);
		nulls[5] = (copy.next_expiry == 0);
		values[6] = TimestampTzGetDatum(copy.last_wakeup);
		nulls[6] = (copy.last_wakeup == 0);
		values[7] = Int64GetDatum(copy.announced);
		values[8] = IntervalPGetDatum(usecs_to_interval(copy.last_lag));
		nulls[8] = (copy.announced == 0);
		values[9] = TimestampTzGetDatum(copy.started_at);
		nulls[9] = (copy.started_at == 0);
		tuplestore_putvalues(rsinfo->setResult, rsinfo->setDesc, values, nulls);
	}
	PG_RETURN_VOID();
}
