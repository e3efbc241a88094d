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
 *		stands for the database's owner), every role granted CREATE on it
 *		is one, and every object in it belongs to one: a superuser who
 *		takes over a schema another role made (ALTER SCHEMA ... OWNER TO)
 *		takes over what was planted in it too, unless it is dropped.  PostgreSQL 13 and 14 let every role create in schema
 *		"public" by default: hoplock warns there rather than refuse, as
 *		every extension installed there shares that risk (the README says
 *		to install into a schema of its own).
 *
 *-------------------------------------------------------------------------
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/table.h"
#include "catalog/dependency.h"
#include "catalog/namespace.h"
#include "catalog/objectaddress.h"
#include "catalog/pg_authid.h"
#include "catalog/pg_class.h"
#include "catalog/pg_collation.h"
#include "catalog/pg_conversion.h"
#include "catalog/pg_database.h"
#include "catalog/pg_namespace.h"
#include "catalog/pg_opclass.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_opfamily.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_statistic_ext.h"
#include "catalog/pg_ts_config.h"
#include "catalog/pg_ts_dict.h"
#include "catalog/pg_type.h"
#include "commands/dbcommands.h"
#include "commands/extension.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
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
 * The catalogs whose objects live in a schema and have an owner, with the
 * columns that say which.
 */
typedef struct OwnedCatalog
{
	Oid			catalog;
	AttrNumber	oid;
	AttrNumber	namespace;
	AttrNumber	owner;
} OwnedCatalog;

static const OwnedCatalog owned_catalogs[] = {
	{RelationRelationId, Anum_pg_class_oid,
	Anum_pg_class_relnamespace, Anum_pg_class_relowner},
	{ProcedureRelationId, Anum_pg_proc_oid,
	Anum_pg_proc_pronamespace, Anum_pg_proc_proowner},
	{TypeRelationId, Anum_pg_type_oid,
	Anum_pg_type_typnamespace, Anum_pg_type_typowner},
	{OperatorRelationId, Anum_pg_operator_oid,
	Anum_pg_operator_oprnamespace, Anum_pg_operator_oprowner},
	{CollationRelationId, Anum_pg_collation_oid,
	Anum_pg_collation_collnamespace, Anum_pg_collation_collowner},
	{ConversionRelationId, Anum_pg_conversion_oid,
	Anum_pg_conversion_connamespace, Anum_pg_conversion_conowner},
	{OperatorClassRelationId, Anum_pg_opclass_oid,
	Anum_pg_opclass_opcnamespace, Anum_pg_opclass_opcowner},
	{OperatorFamilyRelationId, Anum_pg_opfamily_oid,
	Anum_pg_opfamily_opfnamespace, Anum_pg_opfamily_opfowner},
	{TSConfigRelationId, Anum_pg_ts_config_oid,
	Anum_pg_ts_config_cfgnamespace, Anum_pg_ts_config_cfgowner},
	{TSDictionaryRelationId, Anum_pg_ts_dict_oid,
	Anum_pg_ts_dict_dictnamespace, Anum_pg_ts_dict_dictowner},
	{StatisticExtRelationId, Anum_pg_statistic_ext_oid,
	Anum_pg_statistic_ext_stxnamespace, Anum_pg_statistic_ext_stxowner},
};

/*
 * Does schema "nsp" hold an object a role other than a superuser owns?
 * Sets *role and *object to the first one found and *count to how many
 * there are.  The catalogs are read whole: this runs once per CREATE or
 * ALTER EXTENSION, and most have no index on the schema.
 */
static bool
foreign_object(Oid nsp, Oid *role, ObjectAddress *object, int *count)
{
	*count = 0;
	for (size_t i = 0; i < lengthof(owned_catalogs); i++)
	{
		const OwnedCatalog *cat = &owned_catalogs[i];
		Relation	rel = table_open(cat->catalog, AccessShareLock);
		TupleDesc	desc = RelationGetDescr(rel);
		SysScanDesc scan;
		HeapTuple	tuple;

		scan = systable_beginscan(rel, InvalidOid, false, NULL, 0, NULL);
		while (HeapTupleIsValid(tuple = systable_getnext(scan)))
		{
			bool		isnull;
			Oid			owner;

			if (DatumGetObjectId(heap_getattr(tuple, cat->namespace, desc,
											  &isnull)) != nsp || isnull)
				continue;
			owner = effective_role(DatumGetObjectId(heap_getattr(tuple,
																 cat->owner,
																 desc,
																 &isnull)));
			if (superuser_arg(owner))
				continue;
			if ((*count)++ == 0)
			{
				*role = owner;
				object->classId = cat->catalog;
				object->objectId = DatumGetObjectId(heap_getattr(tuple, cat->oid,
																 desc,
																 &isnull));
				object->objectSubId = 0;
			}
		}
		systable_endscan(scan);
		table_close(rel, AccessShareLock);
	}
	return *count > 0;
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
		ObjectAddress object;
		int			count;

		if (!foreign_object(nsp, &role, &object, &count))
			PG_RETURN_VOID();
		rolename = GetUserNameFromId(role, true);
		ereport(level,
				(errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				 updating ?
				 errmsg("hoplock is installed in schema \"%s\", which is not safe", nspname) :
				 errmsg("hoplock cannot be installed in schema \"%s\"", nspname),
				 errdetail_plural("Role \"%s\", which is not a superuser, owns %s in the schema, which could capture calls to hoplock's functions (%d object of roles that are not superusers in all).",
								  "Role \"%s\", which is not a superuser, owns %s in the schema, which could capture calls to hoplock's functions (%d objects of roles that are not superusers in all).",
								  count,
								  rolename ? rolename : "?",
#if PG_VERSION_NUM >= 140000
								  getObjectDescription(&object, false),
#else
								  getObjectDescription(&object),
#endif
								  count),
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
