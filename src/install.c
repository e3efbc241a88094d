/*-------------------------------------------------------------------------
 *
 * install.c
 *		The schema hoplock is installed into must be one that only
 *		superusers may create objects in or rename.  A role that may plant
 *		functions, operators or types beside hoplock's captures the calls
 *		clients make by qualified name (hoplock.hoplock_fence('x', 2) would
 *		run a planted hoplock_fence(text, integer), a better match for the
 *		integer literal), and one that owns the schema could rename it and
 *		put another in its place.  The install script calls
 *		hoplock_check_schema() before it creates anything; the update
 *		script too, where it only warns, as refusing would leave an
 *		installation on 1.1.
 *
 *		A schema is safe if its owner is a superuser (pg_database_owner
 *		stands for the database's owner) and every role granted CREATE on
 *		it is one.  PostgreSQL 13 and 14 let every role create in schema
 *		"public" by default: hoplock warns there rather than refuse, as
 *		every extension installed there shares that risk (the README says
 *		to install into a schema of its own).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "hoplock.h"

#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "catalog/pg_namespace.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(hoplock_check_schema);

/* The role a schema's owner or grantee stands for (pg_database_owner) */
static Oid
effective_role(Oid roleid)
{
#ifdef ROLE_PG_DATABASE_OWNER
	if (roleid == ROLE_PG_DATABASE_OWNER)
	{
		HeapTuple	tuple = SearchSysCache1(DATABASEOID,
											ObjectIdGetDatum(MyDatabaseId));
		Oid			owner = InvalidOid;

		if (HeapTupleIsValid(tuple))
		{
			owner = ((Form_pg_database) GETSTRUCT(tuple))->datdba;
			ReleaseSysCache(tuple);
		}
		return owner;
	}
#endif
	return roleid;
}

/*
 * The entries of an ACL.  (ACL_DAT compares signed with unsigned, which
 * the -Wextra build this project uses would refuse in PostgreSQL's own
 * header.)
 */
#if defined(__GNUC__)
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wsign-compare"
#endif
static AclItem *
acl_items(Acl *acl)
{
	return ACL_DAT(acl);
}
#if defined(__GNUC__)
#pragma GCC diagnostic pop
#endif

/*
 * Does a role other than a superuser own schema "nsp" (*owns) or may it
 * create in it?  Sets *role to the first such role (ACL_ID_PUBLIC: every
 * role).
 */
static bool
unsafe_role(Oid nsp, Oid *role, bool *owns)
{
	HeapTuple	tuple;
	Form_pg_namespace form;
	Datum		acldatum;
	bool		isnull;
	bool		unsafe = false;

	tuple = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(nsp));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for schema %u", nsp);
	form = (Form_pg_namespace) GETSTRUCT(tuple);

	*owns = true;
	*role = effective_role(form->nspowner);
	unsafe = !superuser_arg(*role);

	acldatum = SysCacheGetAttr(NAMESPACEOID, tuple, Anum_pg_namespace_nspacl,
							   &isnull);
	if (!unsafe && !isnull)
	{
		Acl		   *acl = DatumGetAclP(acldatum);
		AclItem    *items = acl_items(acl);

		for (int i = 0; i < ACL_NUM(acl) && !unsafe; i++)
		{
			Oid			grantee = items[i].ai_grantee;

			if ((ACLITEM_GET_PRIVS(items[i]) & ACL_CREATE) == 0)
				continue;
			if (grantee == ACL_ID_PUBLIC)
				unsafe = true;
			else
			{
				grantee = effective_role(grantee);
				unsafe = !superuser_arg(grantee);
			}
			if (unsafe)
			{
				*owns = false;
				*role = grantee;
			}
		}
	}
	ReleaseSysCache(tuple);
	return unsafe;
}

/*
 * hoplock_check_schema(): refuse (or, during an update, warn about) the
 * schema of the extension being created if a role other than a superuser
 * owns it or may create in it.
 */
Datum
hoplock_check_schema(PG_FUNCTION_ARGS)
{
	bool		updating = PG_GETARG_BOOL(0);
	Oid			nsp;
	Oid			role;
	bool		owns;
	char	   *nspname;
	char	   *rolename;
	int			level;

	if (!creating_extension)
		ereport(ERROR,
				(errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				 errmsg("hoplock_check_schema() may only be called by hoplock's install and update scripts")));
	/* the script creates this function in the extension's schema */
	nsp = get_func_namespace(fcinfo->flinfo->fn_oid);
	if (!unsafe_role(nsp, &role, &owns))
		PG_RETURN_VOID();

	nspname = get_namespace_name(nsp);
	rolename = role == ACL_ID_PUBLIC ? "PUBLIC" :
		GetUserNameFromId(role, true);
	level = updating ? WARNING : ERROR;
#if PG_VERSION_NUM < 150000
	/* 13 and 14 let every role create in "public" by default */
	if (role == ACL_ID_PUBLIC && strcmp(nspname, "public") == 0)
		level = WARNING;
#endif
	ereport(level,
			(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			 updating ?
			 errmsg("hoplock is installed in schema \"%s\", which is not safe", nspname) :
			 errmsg("hoplock cannot be installed in schema \"%s\"", nspname),
			 owns ?
			 errdetail("Role \"%s\", which is not a superuser, owns the schema: it could put objects there that capture calls to hoplock's functions (it may have already), or rename the schema.",
					   rolename ? rolename : "?") :
			 errdetail("Role \"%s\", which is not a superuser, may create objects in the schema that capture calls to hoplock's functions.",
					   rolename ? rolename : "?"),
			 updating ?
			 (owns ?
			  errhint("Give the schema to a superuser (ALTER SCHEMA ... OWNER TO), look for objects planted in it, or reinstall hoplock into a schema of its own.") :
			  errhint("Revoke CREATE on the schema from roles that are not superusers, or reinstall hoplock into a schema of its own.")) :
			 errhint("Install it into a schema a superuser creates for it now, under a name no other role has used: CREATE SCHEMA hoplock; CREATE EXTENSION hoplock SCHEMA hoplock;")));
	PG_RETURN_VOID();
}
