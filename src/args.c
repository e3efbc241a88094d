/*-------------------------------------------------------------------------
 *
 * args.c
 *		Checks of the SQL functions' arguments.  Every check raises before
 *		anything is read or written, so a bad call changes nothing, and
 *		every message names the value given and the limit it broke.
 *
 *		The functions are not STRICT: a NULL where a value is required is an
 *		error (22004), never a silent NULL result.
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "args.h"
#include "compat.h"
#include "hoplock.h"
#include "settings.h"
#include "slotkey.h"

#include "catalog/namespace.h"
#include "common/int.h"
#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/timestamp.h"

static void
check_not_null(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				(errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				 errmsg("argument \"%s\" must not be null", argname)));
}

/* Raise if UTF-8 text "p" holds a control character: C0, DEL or C1. */
static void
check_controls_utf8(const unsigned char *p, int len, const char *argname)
{
	for (int i = 0; i < len; i++)
	{
		int			code = -1;

		if (p[i] < 0x20 || p[i] == 0x7f)
			code = p[i];
		/* U+0080..U+009F are encoded as C2 80..C2 9F */
		else if (p[i] == 0xc2 && i + 1 < len && p[i + 1] >= 0x80 &&
				 p[i + 1] <= 0x9f)
			code = p[i + 1];

		if (code >= 0)
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"%s\" must not contain control characters", argname),
					 errdetail("It contains U+%04X.", code)));
	}
}

/*
 * A lease name or owner: 1 to HL_MAX_NAME_BYTES bytes, and no control
 * characters (C0, DEL and C1), so that it can be printed in a log line or
 * a psql table without surprises.  In a SQL_ASCII database, where the
 * server checks nothing, it must also be valid UTF-8; in databases of other
 * encodings, its characters are judged by their Unicode code points.
 */
text *
hl_arg_name(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	text	   *arg;
	const unsigned char *p;
	int			len;
	int			encoding = GetDatabaseEncoding();

	check_not_null(fcinfo, argno, argname);
	arg = PG_GETARG_TEXT_PP(argno);
	p = (const unsigned char *) VARDATA_ANY(arg);
	len = VARSIZE_ANY_EXHDR(arg);

	if (len == 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" must not be empty", argname)));
	if (len > HL_MAX_NAME_BYTES)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"%s\" is too long", argname),
				 errdetail("It is %d bytes long; the limit is %d bytes.",
						   len, HL_MAX_NAME_BYTES)));

	if (encoding == PG_UTF8)
		check_controls_utf8(p, len, argname);
	else if (encoding == PG_SQL_ASCII)
	{
		if (!pg_verify_mbstr(PG_UTF8, (const char *) p, len, true))
			ereport(ERROR,
					(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
					 errmsg("argument \"%s\" must be valid UTF-8", argname),
					 errdetail("In a SQL_ASCII database, names and owners are checked as UTF-8.")));
		check_controls_utf8(p, len, argname);
	}
	else if (OidIsValid(FindDefaultConversionProc(encoding, PG_UTF8)))
	{
		const char *utf8 = pg_server_to_any((const char *) p, len, PG_UTF8);

		check_controls_utf8((const unsigned char *) utf8, strlen(utf8), argname);
	}
	else
	{
		/*
		 * No conversion to Unicode (MULE_INTERNAL): every server encoding
		 * is a superset of ASCII, so C0 and DEL at least are refused.
		 */
		for (int i = 0; i < len; i++)
		{
			if (p[i] < 0x20 || p[i] == 0x7f)
				ereport(ERROR,
						(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
						 errmsg("argument \"%s\" must not contain control characters", argname),
						 errdetail("It contains U+%04X.", p[i])));
		}
	}

	return arg;
}

static char *
interval_text(FunctionCallInfo fcinfo, int argno)
{
	return DatumGetCString(DirectFunctionCall1(interval_out,
											   PG_GETARG_DATUM(argno)));
}

/*
 * An interval argument in microseconds.  A day counts as 24 hours: a lease
 * lapses ttl after the clock reading, whatever the time zone does
 * meanwhile.  Months and years have no fixed length, so they are refused.
 * On overflow the result saturates in the direction of the day part.
 */
static int64
interval_usecs(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	Interval   *interval;
	int64		usecs;
	int64		days;

	check_not_null(fcinfo, argno, argname);
	interval = PG_GETARG_INTERVAL_P(argno);

	if (!hl_interval_is_finite(interval))
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("interval \"%s\" of argument \"%s\" is not finite",
						interval_text(fcinfo, argno), argname)));
	if (interval->month != 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("interval \"%s\" of argument \"%s\" has a month or year part",
						interval_text(fcinfo, argno), argname),
				 errhint("Express it in days, hours, minutes or seconds.")));

	if (pg_mul_s64_overflow((int64) interval->day, USECS_PER_DAY, &days) ||
		pg_add_s64_overflow(interval->time, days, &usecs))
		usecs = (interval->day < 0) ? PG_INT64_MIN : PG_INT64_MAX;
	return usecs;
}

/* A ttl, in microseconds: positive, and at most hoplock.max_ttl. */
int64
hl_arg_ttl(FunctionCallInfo fcinfo, int argno)
{
	int64		usecs = interval_usecs(fcinfo, argno, "ttl");

	if (usecs > (int64) hl_max_ttl * USECS_PER_SEC)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl \"%s\" exceeds hoplock.max_ttl (%s)",
						interval_text(fcinfo, argno),
						GetConfigOption("hoplock.max_ttl", false, false)),
				 errdetail("The ttl is %.6f seconds; the limit is %d seconds.",
						   (double) usecs / USECS_PER_SEC, hl_max_ttl),
				 errhint("A bare number is read as seconds: pass a duration as text with its unit, such as '15s' or '1500ms'.")));
	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("ttl \"%s\" is not positive",
						interval_text(fcinfo, argno))));
	return usecs;
}

/*
 * A min_hold, in microseconds (0: NULL, none): positive, and no longer than
 * the ttl "ttl" it comes with -- the term's first expiry covers its hold,
 * so an expiry never ends a term inside its hold.
 */
int64
hl_arg_min_hold(FunctionCallInfo fcinfo, int argno, int64 ttl)
{
	int64		usecs;

	/* (not given: a call through 1.1's SQL definition) */
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return 0;
	usecs = interval_usecs(fcinfo, argno, "min_hold");
	if (usecs <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("min_hold \"%s\" is not positive",
						interval_text(fcinfo, argno)),
				 errhint("Pass NULL for no hold.")));
	if (usecs > ttl)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("min_hold \"%s\" is longer than the ttl",
						interval_text(fcinfo, argno)),
				 errdetail("The min_hold is %.6f seconds; the ttl is %.6f seconds.",
						   (double) usecs / USECS_PER_SEC,
						   (double) ttl / USECS_PER_SEC),
				 errhint("A term's first ttl must cover its hold: raise the ttl, or shorten the hold.")));
	return usecs;
}

/* A timeout, in microseconds: zero or more. */
int64
hl_arg_timeout(FunctionCallInfo fcinfo, int argno)
{
	int64		usecs = interval_usecs(fcinfo, argno, "timeout");

	if (usecs < 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("timeout \"%s\" is negative",
						interval_text(fcinfo, argno))));
	return usecs;
}

/* The generation argument "argno": required, and positive. */
int64
hl_arg_generation(FunctionCallInfo fcinfo, int argno)
{
	int64		generation;

	check_not_null(fcinfo, argno, "generation");
	generation = PG_GETARG_INT64(argno);
	if (generation <= 0)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("generation " INT64_FORMAT " is not positive",
						generation)));
	return generation;
}

/* A required boolean. */
bool
hl_arg_bool(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_NARGS() <= argno)
		return false;
	check_not_null(fcinfo, argno, argname);
	return PG_GETARG_BOOL(argno);
}

/*
 * A value for the holder to proclaim (hoplock_proclaim, value => at
 * acquire and wait): NULL for none, otherwise checked like an owner.
 */
text *
hl_arg_value(FunctionCallInfo fcinfo, int argno)
{
	if (PG_NARGS() <= argno || PG_ARGISNULL(argno))
		return NULL;
	return hl_arg_name(fcinfo, argno, "value");
}

/* A required integer; 0 if the SQL declaration has no such argument. */
int32
hl_arg_int32(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	if (PG_NARGS() <= argno)
		return 0;
	check_not_null(fcinfo, argno, argname);
	return PG_GETARG_INT32(argno);
}

/*
 * slots => N: 1 to HL_SLOTS_MAX (absent: 1); a lease with more than one
 * slot has a name short enough for its slots' keys (slotkey.h).
 */
int32
hl_arg_slots(FunctionCallInfo fcinfo, int argno, text *name)
{
	int32		slots;

	if (PG_NARGS() <= argno)
		return 1;
	check_not_null(fcinfo, argno, "slots");
	slots = PG_GETARG_INT32(argno);
	if (slots < 1 || slots > HL_SLOTS_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("slots %d is out of range", slots),
				 errdetail("A lease has 1 to %d slots.", HL_SLOTS_MAX)));
	if (slots > 1 && VARSIZE_ANY_EXHDR(name) > HL_SLOT_NAME_MAX)
		ereport(ERROR,
				(errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				 errmsg("argument \"name\" is too long for a lease with slots"),
				 errdetail("The name of a lease with slots has at most %d bytes; this one has %d.",
						   HL_SLOT_NAME_MAX, (int) VARSIZE_ANY_EXHDR(name))));
	return slots;
}

/* Any other required text argument, such as a handle. */
text *
hl_arg_text(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	check_not_null(fcinfo, argno, argname);
	return PG_GETARG_TEXT_PP(argno);
}
