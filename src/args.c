/*-------------------------------------------------------------------------
 *
 * args.c
 *		Checks of the SQL functions' arguments.  Every check raises before
 *		anything is read or written, so a bad call changes nothing.
 *
 *		The functions are not STRICT: a NULL where a value is required is an
 *		error (22004), never a silent NULL result.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"
#include "compat.h"

#include "common/int.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

static void
check_not_null(FunctionCallInfo fcinfo, int argno, const char *what)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("%s must not be null", what)));
}

/*
 * A lease name or owner: 1 to HOPLOCK_MAX_NAME_BYTES bytes, no control
 * characters (C0, DEL, and in UTF-8 also C1), so that it can be printed in a
 * log line or a psql table without surprises.
 */
text *
hoplock_arg_name(FunctionCallInfo fcinfo, int argno, const char *what)
{
	text	   *arg;
	const unsigned char *p;
	int			len;
	bool		utf8 = (GetDatabaseEncoding() == PG_UTF8);

	check_not_null(fcinfo, argno, what);
	arg = PG_GETARG_TEXT_PP(argno);
	p = (const unsigned char *) VARDATA_ANY(arg);
	len = VARSIZE_ANY_EXHDR(arg);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not be empty", what)));
	if (len > HOPLOCK_MAX_NAME_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s is too long", what),
				 errdetail("It is %d bytes long; the limit is %d bytes.",
						   len, HOPLOCK_MAX_NAME_BYTES)));

	for (int i = 0; i < len; i++)
	{
		bool		control = (p[i] < 0x20 || p[i] == 0x7f);

		/* U+0080..U+009F are encoded as C2 80..C2 9F */
		if (utf8 && p[i] == 0xc2 && i + 1 < len &&
			p[i + 1] >= 0x80 && p[i + 1] <= 0x9f)
			control = true;

		if (control)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("%s must not contain control characters", what)));
	}

	return arg;
}

/*
 * An interval argument in microseconds.  A day counts as 24 hours: a lease
 * lapses ttl after the clock reading, whatever the time zone does
 * meanwhile.  Months and years have no fixed length, so they are refused.
 * On overflow the result saturates in the direction of the day part.
 */
static int64
interval_usecs(FunctionCallInfo fcinfo, int argno, const char *what)
{
	Interval   *interval;
	int64		usecs;
	int64		days;

	check_not_null(fcinfo, argno, what);
	interval = PG_GETARG_INTERVAL_P(argno);

	if (!hoplock_interval_is_finite(interval))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must be finite", what)));
	if (interval->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("%s must not have a month or year part", what),
				 errhint("Express the %s in days, hours, minutes or seconds.", what)));

	if (pg_mul_s64_overflow((int64) interval->day, USECS_PER_DAY, &days) ||
		pg_add_s64_overflow(interval->time, days, &usecs))
		usecs = (interval->day < 0) ? PG_INT64_MIN : PG_INT64_MAX;
	return usecs;
}

static char *
interval_text(FunctionCallInfo fcinfo, int argno)
{
	return DatumGetCString(DirectFunctionCall1(interval_out,
											   PG_GETARG_DATUM(argno)));
}

/* A ttl, in microseconds: positive, and at most hoplock.max_ttl. */
int64
hoplock_arg_ttl(FunctionCallInfo fcinfo, int argno)
{
	int64		usecs = interval_usecs(fcinfo, argno, "ttl");

	if (usecs > (int64) hoplock_max_ttl * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must not exceed \"hoplock.max_ttl\""),
				 errdetail("The ttl is %s; \"hoplock.max_ttl\" is %d seconds.",
						   interval_text(fcinfo, argno), hoplock_max_ttl)));
	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl must be positive"),
				 errdetail("The ttl is %s.", interval_text(fcinfo, argno))));
	return usecs;
}

/* A timeout, in microseconds: zero or more. */
int64
hoplock_arg_timeout(FunctionCallInfo fcinfo, int argno)
{
	int64		usecs = interval_usecs(fcinfo, argno, "timeout");

	if (usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout must not be negative"),
				 errdetail("The timeout is %s.", interval_text(fcinfo, argno))));
	return usecs;
}

int64
hoplock_arg_generation(FunctionCallInfo fcinfo, int argno)
{
	int64		generation;

	check_not_null(fcinfo, argno, "generation");
	generation = PG_GETARG_INT64(argno);
	if (generation <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("generation must be positive"),
				 errdetail("The generation given is " INT64_FORMAT ".",
						   generation)));
	return generation;
}

/* A required boolean. */
bool
hoplock_arg_bool(FunctionCallInfo fcinfo, int argno, const char *what)
{
	if (PG_NARGS() <= argno)
		return false;
	check_not_null(fcinfo, argno, what);
	return PG_GETARG_BOOL(argno);
}

/* Any other required text argument, such as a handle. */
text *
hoplock_arg_text(FunctionCallInfo fcinfo, int argno, const char *what)
{
	check_not_null(fcinfo, argno, what);
	return PG_GETARG_TEXT_PP(argno);
}
