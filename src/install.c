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
 *		A schema is safe if its owner is a superuser, every role granted
 *		CREATE on it is one, and every function, operator and type in it
 *		belongs to one: a superuser who takes over a schema another role
 *		made (ALTER SCHEMA ... OWNER TO) takes over what was planted in it
 *		too, unless it is dropped.  pg_database_owner stands for the
 *		database's owner only as owner of, or grantee on, schema "public"
 *		(the contract's CREATE EXTENSION hoplock installs there); anywhere
 *		else it counts as a role that is not a superuser.
 *
 *		PostgreSQL 13 and 14 let every role create in schema "public" by
 *		default: hoplock warns there rather than refuse, as every extension
 *		installed there shares that risk (the README says to install into
 *		a schema of its own).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"



#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/namespace.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_database.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

PG_FUNCTION_INFO_V1(hoplock_check_schema);

/*
 * The role an owner or grantee of schema "public" stands for:
 * pg_database_owner is the database's owner.  Anywhere else --
 * another schema, an object -- pg_database_owner is taken for a role that
 * is not a superuser: it stands for whoever owns the database later, or
 * owned it before a superuser took it over.
 */
static Oid
effective_role(Oid roleid, bool is_public)
{
#ifdef ROLE_PG_DATABASE_OWNER
	if (roleid == ROLE_PG_DATABASE_OWNER && is_public)
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

/* Is "roleid" a superuser (pg_database_owner never is; see above)? */
static bool
is_superuser_role(Oid roleid)
{
#ifdef ROLE_PG_DATABASE_OWNER
	if (roleid == ROLE_PG_DATABASE_OWNER)
		return false;
#endif
	return OidIsValid(roleid) && superuser_arg(roleid);
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
	bool		is_public;
	bool		unsafe = false;

	tuple = SearchSysCache1(NAMESPACEOID, ObjectIdGetDatum(nsp));
	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for schema %u", nsp);
	form = (Form_pg_namespace) GETSTRUCT(tuple);

	is_public = strcmp(NameStr(form->nspname), "public") == 0;
	*owns = true;
	*role = effective_role(form->nspowner, is_public);
	unsafe = !is_superuser_role(*role);

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
				grantee = effective_role(grantee, is_public);
				unsafe = !is_superuser_role(grantee);
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
 * The objects that can capture a call of hoplock's: a function (an
 * overload that matches a qualified call better, such as
 * hoplock_fence(text, integer) for hoplock.hoplock_fence('x', 2)), an
 * operator, and a type (a domain named like one of pg_catalog's, for a
 * search_path that lists the schema first).  Tables, sequences, indexes
 * and the like are only reached by a name no call of hoplock's uses.
 */
typedef struct OwnedCatalog
{
	Oid			catalog;
	const char *kind;			/* for the message */
	AttrNumber	name;
	AttrNumber	namespace;
	AttrNumber	owner;
} OwnedCatalog;

static const OwnedCatalog owned_catalogs[] = {
	{ProcedureRelationId, "function", Anum_pg_proc_proname,
	Anum_pg_proc_pronamespace, Anum_pg_proc_proowner},
	{OperatorRelationId, "operator", Anum_pg_operator_oprname,
	Anum_pg_operator_oprnamespace, Anum_pg_operator_oprowner},
	{TypeRelationId, "type", Anum_pg_type_typname,
	Anum_pg_type_typnamespace, Anum_pg_type_typowner},
};

/*
 * Does schema "nsp" hold a function, operator or type that a role other
 * than a superuser owns?  Sets *role, *kind and *name to the first found.
 *
 * The catalogs are read whole (there is no index on the schema alone;
 * this runs once per CREATE or ALTER EXTENSION) with a dirty snapshot: an
 * object being created by a transaction still in progress counts too.
 * That transaction had the right to create in the schema when it did, and
 * would commit its object beside hoplock's after the check.  The row type
 * of a table and the array type of a type are the table's and the type's.
 */
static bool
foreign_object(Oid nsp, Oid *role, const char **kind, char **name)
{
	bool		found = false;

	for (size_t i = 0; i < lengthof(owned_catalogs) && !found; i++)
	{
		const OwnedCatalog *cat = &owned_catalogs[i];
		Relation	rel = table_open(cat->catalog, AccessShareLock);
		TupleDesc	desc = RelationGetDescr(rel);
		SnapshotData dirty;
		SysScanDesc scan;
		HeapTuple	tuple;

		InitDirtySnapshot(dirty);
		scan = systable_beginscan(rel, InvalidOid, false, &dirty, 0, NULL);
		while (!found && HeapTupleIsValid(tuple = systable_getnext(scan)))
		{
			bool		isnull;
			Oid			owner;

			if (DatumGetObjectId(heap_getattr(tuple, cat->namespace, desc,
											  &isnull)) != nsp || isnull)
				continue;
			if (cat->catalog == TypeRelationId)
			{
				Form_pg_type typ = (Form_pg_type) GETSTRUCT(tuple);

				if (OidIsValid(typ->typrelid) ||
					(OidIsValid(typ->typelem) && typ->typcategory == TYPCATEGORY_ARRAY))
					continue;
			}
			owner = DatumGetObjectId(heap_getattr(tuple, cat->owner, desc,
												  &isnull));
			if (is_superuser_role(owner))
				continue;
			found = true;
			*role = owner;
			*kind = cat->kind;
			*name = pstrdup(NameStr(*DatumGetName(heap_getattr(tuple, cat->name,
															   desc,
															   &isnull))));
		}
		systable_endscan(scan);
		table_close(rel, AccessShareLock);
	}
	return found;
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
	nspname = get_namespace_name(nsp);
	level = updating ? WARNING : ERROR;
	if (!unsafe_role(nsp, &role, &owns))
	{
		const char *kind;
		char	   *name;

		if (!foreign_object(nsp, &role, &kind, &name))
			PG_RETURN_VOID();
		rolename = GetUserNameFromId(role, true);
		ereport(level,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 updating ?
				 errmsg("hoplock is installed in schema \"%s\", which is not safe", nspname) :
				 errmsg("hoplock cannot be installed in schema \"%s\"", nspname),
				 errdetail("Role \"%s\", which is not a superuser, owns %s \"%s\" in the schema: it could capture calls to hoplock's functions.",
						   rolename ? rolename : "?", kind, name),
				 updating ?
				 errhint("Look at the objects, then drop them or give them to a superuser, or reinstall hoplock into a schema of its own.") :
				 errhint("Install it into a schema a superuser creates for it now, under a name no other role has used: CREATE SCHEMA hoplock; CREATE EXTENSION hoplock SCHEMA hoplock;")));
		PG_RETURN_VOID();
	}

	rolename = role == ACL_ID_PUBLIC ? "PUBLIC" :
		GetUserNameFromId(role, true);
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
