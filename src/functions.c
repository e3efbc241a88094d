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

#include "args.h"
#include "fence.h"
#include "hoplock.h"
#include "lease.h"
#include "session.h"
#include "slots.h"
#include "storage.h"
#include "wait.h"

#include "access/htup_details.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

PG_FUNCTION_INFO_V1(hoplock_acquire);
PG_FUNCTION_INFO_V1(hoplock_wait);
PG_FUNCTION_INFO_V1(hoplock_renew);
PG_FUNCTION_INFO_V1(hoplock_release);
PG_FUNCTION_INFO_V1(hoplock_force_release);
PG_FUNCTION_INFO_V1(hoplock_handoff);
PG_FUNCTION_INFO_V1(hoplock_proclaim);
PG_FUNCTION_INFO_V1(hoplock_request_step_down);
PG_FUNCTION_INFO_V1(hoplock_holder);
PG_FUNCTION_INFO_V1(hoplock_read);
PG_FUNCTION_INFO_V1(hoplock_write);
PG_FUNCTION_INFO_V1(hoplock_delete);
PG_FUNCTION_INFO_V1(hoplock_fence);
PG_FUNCTION_INFO_V1(hoplock_forget);

static Datum
lease_datum(FunctionCallInfo fcinfo, const Lease *lease)
{
	TupleDesc	desc = hl_lease_result_desc(fcinfo);
	Datum		values[8];
	bool		nulls[8] = {0};
	char		handle[LEASE_HANDLE_LEN];

	hl_format_handle(lease, handle);
	values[0] = PointerGetDatum(lease->name);
	values[1] = PointerGetDatum(lease->owner);
	values[2] = Int64GetDatum(lease->generation);
	values[3] = CStringGetTextDatum(handle);
	values[4] = TimestampTzGetDatum(lease->acquired_at);
	values[5] = TimestampTzGetDatum(lease->expires_at);
	/*
	 * No value is the empty string, never NULL: a caller's "lease IS NOT
	 * NULL" is true of every row (a proclaimed value is never empty).
	 */
	values[6] = lease->value ? PointerGetDatum(lease->value) :
		CStringGetTextDatum("");
	values[7] = BoolGetDatum(lease->step_down_at != 0);

	return HeapTupleGetDatum(heap_form_tuple(desc, values, nulls));
}

/* Run a writing request; return its lease, or NULL if it did not write. */
static Datum
cas_returning_lease(FunctionCallInfo fcinfo, LeaseRequest *req)
{
	Lease		result;
	bool		found;

	if (hl_slots_cas(req, &result, &found) != LEASE_DONE)
		PG_RETURN_NULL();
	PG_RETURN_DATUM(lease_datum(fcinfo, &result));
}

static Datum
cas_returning_bool(LeaseRequest *req)
{
	Lease		result;
	bool		found;

	PG_RETURN_BOOL(hl_slots_cas(req, &result, &found) == LEASE_DONE);
}

/* hoplock_acquire(name, owner, ttl, session_bound, value, min_hold, slots) */
Datum
hoplock_acquire(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_ACQUIRE;
	req.fn = "hoplock_acquire()";
	req.await_announcement = true;	/* hoplock_wait sleeps until woken */
	req.name = hl_arg_name(fcinfo, 0, "name");
	req.owner = hl_arg_name(fcinfo, 1, "owner");
	req.ttl = hl_arg_ttl(fcinfo, 2);
	req.session_bound = hl_arg_bool(fcinfo, 3, "session_bound");
	req.value = hl_arg_value(fcinfo, 4);
	req.min_hold = hl_arg_min_hold(fcinfo, 5, req.ttl);
	req.slots = hl_arg_slots(fcinfo, 6, req.name);
	if (req.session_bound)
		hl_session_prepare();
	return cas_returning_lease(fcinfo, &req);
}

/*
 * hoplock_wait(name, owner, ttl, timeout, session_bound, priority, value,
 * preempt, min_hold, slots)
 */
Datum
hoplock_wait(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};
	int64		timeout;
	Lease		result;

	req.op = LEASE_OP_ACQUIRE;
	req.fn = "hoplock_wait()";
	req.name = hl_arg_name(fcinfo, 0, "name");
	req.owner = hl_arg_name(fcinfo, 1, "owner");
	req.ttl = hl_arg_ttl(fcinfo, 2);
	timeout = hl_arg_timeout(fcinfo, 3);
	req.session_bound = hl_arg_bool(fcinfo, 4, "session_bound");
	req.priority = hl_arg_int32(fcinfo, 5, "priority");
	req.value = hl_arg_value(fcinfo, 6);
	req.preempt = hl_arg_bool(fcinfo, 7, "preempt");
	req.min_hold = hl_arg_min_hold(fcinfo, 8, req.ttl);
	req.slots = hl_arg_slots(fcinfo, 9, req.name);
	if (req.session_bound)
		hl_session_prepare();

	if (!hl_lease_wait(&req, timeout, &result))
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
	req.name = hl_arg_name(fcinfo, 0, "name");
	req.owner = hl_arg_name(fcinfo, 1, "owner");
	req.ttl = hl_arg_ttl(fcinfo, 2);
	if (PG_NARGS() > 3)
		req.generation = hl_arg_generation(fcinfo, 3);
	return cas_returning_lease(fcinfo, &req);
}

/* hoplock_release(name, owner [, generation]) */
Datum
hoplock_release(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_RELEASE;
	req.fn = "hoplock_release()";
	req.name = hl_arg_name(fcinfo, 0, "name");
	req.owner = hl_arg_name(fcinfo, 1, "owner");
	if (PG_NARGS() > 2)
		req.generation = hl_arg_generation(fcinfo, 2);
	return cas_returning_bool(&req);
}

/*
 * hoplock_handoff(name, owner, generation, to_owner): end the running term
 * and begin the next for a waiting candidate (to_owner's, or the first),
 * in this transaction; NULL if there is no such candidate, and the term
 * goes on.
 */
Datum
hoplock_handoff(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_HANDOFF;
	req.fn = "hoplock_handoff()";
	req.name = hl_arg_name(fcinfo, 0, "name");
	req.owner = hl_arg_name(fcinfo, 1, "owner");
	req.generation = hl_arg_generation(fcinfo, 2);
	if (!PG_ARGISNULL(3))
		req.to_owner = hl_arg_name(fcinfo, 3, "to_owner");
	return cas_returning_lease(fcinfo, &req);
}

/*
 * hoplock_proclaim(name, owner, generation, value): publish "value" for
 * the owner's running term of that generation (NULL clears it), without a
 * new term; false if the term is not the owner's.
 */
Datum
hoplock_proclaim(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_PROCLAIM;
	req.fn = "hoplock_proclaim()";
	req.name = hl_arg_name(fcinfo, 0, "name");
	req.owner = hl_arg_name(fcinfo, 1, "owner");
	req.generation = hl_arg_generation(fcinfo, 2);
	req.value = hl_arg_value(fcinfo, 3);
	return cas_returning_bool(&req);
}

/*
 * hoplock_request_step_down(name, to_owner): ask the holder of the running
 * term to hand it over (to to_owner's candidate, if given); false if the
 * lease is not held.  The holder learns it from a step_down event and from
 * step_down in the lease its next renewal returns; it keeps the lease until
 * it acts.  Not executable by PUBLIC.
 */
Datum
hoplock_request_step_down(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_STEP_DOWN;
	req.fn = "hoplock_request_step_down()";
	req.name = hl_arg_name(fcinfo, 0, "name");
	if (!PG_ARGISNULL(1))
		req.to_owner = hl_arg_name(fcinfo, 1, "to_owner");
	return cas_returning_bool(&req);
}

/* hoplock_force_release(name) */
Datum
hoplock_force_release(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_FORCE_RELEASE;
	req.fn = "hoplock_force_release()";
	req.name = hl_arg_name(fcinfo, 0, "name");
	return cas_returning_bool(&req);
}

/* hoplock_write(name, prev_handle, owner, ttl) */
Datum
hoplock_write(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_WRITE;
	req.fn = "hoplock_write()";
	req.name = hl_arg_name(fcinfo, 0, "name");
	req.handle = PG_ARGISNULL(1) ? NULL : PG_GETARG_TEXT_PP(1);
	req.owner = hl_arg_name(fcinfo, 2, "owner");
	req.ttl = hl_arg_ttl(fcinfo, 3);
	return cas_returning_lease(fcinfo, &req);
}

/* hoplock_delete(name, handle) */
Datum
hoplock_delete(PG_FUNCTION_ARGS)
{
	LeaseRequest req = {0};

	req.op = LEASE_OP_DELETE;
	req.fn = "hoplock_delete()";
	req.name = hl_arg_name(fcinfo, 0, "name");
	req.handle = hl_arg_text(fcinfo, 1, "handle");
	return cas_returning_bool(&req);
}

/* hoplock_holder(name): the running term, or NULL */
Datum
hoplock_holder(PG_FUNCTION_ARGS)
{
	text	   *name = hl_arg_name(fcinfo, 0, "name");
	Lease		lease;

	if (!hl_lease_lookup(name, &lease))
		PG_RETURN_NULL();
	/* of a lease with slots, its running term in the lowest slot */
	if (!hl_lease_is_held(&lease, GetCurrentTimestamp()) &&
		!hl_slots_holder(name, &lease, &lease))
		PG_RETURN_NULL();
	PG_RETURN_DATUM(lease_datum(fcinfo, &lease));
}

/* hoplock_read(name): the stored state, expired or not, or NULL */
Datum
hoplock_read(PG_FUNCTION_ARGS)
{
	text	   *name = hl_arg_name(fcinfo, 0, "name");
	Lease		lease;

	if (!hl_lease_lookup(name, &lease) || !hl_lease_has_state(&lease))
		PG_RETURN_NULL();
	PG_RETURN_DATUM(lease_datum(fcinfo, &lease));
}

/* hoplock_fence(name, generation) */
Datum
hoplock_fence(PG_FUNCTION_ARGS)
{
	text	   *name = hl_arg_name(fcinfo, 0, "name");
	int64		generation = hl_arg_generation(fcinfo, 1);

	hl_fence(name, generation);
	PG_RETURN_VOID();
}


/* hoplock_forget(name): remove a released or lapsed lease's row at once */
Datum
hoplock_forget(PG_FUNCTION_ARGS)
{
	text	   *name = hl_arg_name(fcinfo, 0, "name");

	PG_RETURN_BOOL(hl_forget(name, 0, 0));
}
