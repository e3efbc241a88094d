/*-------------------------------------------------------------------------
 *
 * args.h
 *		Argument checks shared by the SQL entry points (args.c).
 *
 *-------------------------------------------------------------------------
 */
#ifndef HOPLOCK_ARGS_H
#define HOPLOCK_ARGS_H

#include "hoplock.h"
#include "fmgr.h"

extern text *hl_arg_name(FunctionCallInfo fcinfo, int argno,
						 const char *what);
extern int64 hl_arg_ttl(FunctionCallInfo fcinfo, int argno);
extern int64 hl_arg_min_hold(FunctionCallInfo fcinfo, int argno, int64 ttl);
extern int32 hl_arg_slots(FunctionCallInfo fcinfo, int argno, text *name);
extern int64 hl_arg_generation(FunctionCallInfo fcinfo, int argno);
extern int64 hl_arg_timeout(FunctionCallInfo fcinfo, int argno);
extern bool hl_arg_bool(FunctionCallInfo fcinfo, int argno,
						const char *what);
extern text *hl_arg_value(FunctionCallInfo fcinfo, int argno);
extern int32 hl_arg_int32(FunctionCallInfo fcinfo, int argno,
						  const char *argname);
extern text *hl_arg_text(FunctionCallInfo fcinfo, int argno,
						 const char *what);

#endif							/* HOPLOCK_ARGS_H */
