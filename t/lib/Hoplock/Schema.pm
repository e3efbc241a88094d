# Hoplock::Schema: what the extension hoplock is made of in a database, as
# text that two databases can be compared by -- its members, their
# definitions, privileges, comments and dependencies, the tables' columns,
# constraints, indexes and options, the extension's configuration tables --
# and a unified diff of two such texts.
#
# The text names objects by name, never by OID, so that a database where
# the extension was upgraded and one where it was installed afresh (or one
# restored from a dump) compare equal when, and only when, they define the
# same things.
package Hoplock::Schema;

use strict;
use warnings;
use File::Temp qw(tempdir);
use IPC::Run;
use PostgreSQL::Test::Utils;

# One "== key" line per fact, then its value; sorted by key and value.
our $FINGERPRINT = <<'SQL';
WITH ext AS (
    SELECT e.oid FROM pg_catalog.pg_extension AS e WHERE e.extname = 'hoplock'
), members AS (
    SELECT d.classid, d.objid, d.objsubid
      FROM pg_catalog.pg_depend AS d, ext
     WHERE d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass
       AND d.refobjid = ext.oid AND d.deptype = 'e'
), rels AS (
    -- member relations, the row types of member composite types, and the
    -- indexes of member tables
    SELECT c.oid FROM pg_catalog.pg_class AS c
     WHERE (c.oid IN (SELECT objid FROM members WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass)
            OR c.oid IN (SELECT t.typrelid FROM pg_catalog.pg_type AS t
                          WHERE t.oid IN (SELECT objid FROM members WHERE classid = 'pg_catalog.pg_type'::pg_catalog.regclass)))
    UNION
    SELECT i.indexrelid FROM pg_catalog.pg_index AS i
     WHERE i.indrelid IN (SELECT objid FROM members WHERE classid = 'pg_catalog.pg_class'::pg_catalog.regclass)
), facts(key, value) AS (
    -- the extension itself
    SELECT 'extension', pg_catalog.format('name %s, version %s, relocatable %s, schema %s, owner %s',
               e.extname, e.extversion, e.extrelocatable, e.extnamespace::pg_catalog.regnamespace,
               pg_catalog.pg_get_userbyid(e.extowner))
      FROM pg_catalog.pg_extension AS e, ext WHERE e.oid = ext.oid
    UNION ALL
    SELECT 'extension config ' || c.cfg::pg_catalog.regclass::text,
           pg_catalog.format('condition %L', e.extcondition[c.n])
      FROM pg_catalog.pg_extension AS e, ext,
           unnest(e.extconfig) WITH ORDINALITY AS c(cfg, n)
     WHERE e.oid = ext.oid
    UNION ALL
    SELECT 'extension comment', pg_catalog.obj_description(ext.oid, 'pg_extension') FROM ext
    UNION ALL
    -- its members
    SELECT 'member ' || pg_catalog.pg_describe_object(m.classid, m.objid, m.objsubid), ''
      FROM members AS m
    UNION ALL
    -- everything in its schemas, member or not
    SELECT 'in schema ' || pg_catalog.pg_describe_object(x.classid, x.objid, 0),
           CASE WHEN (x.classid, x.objid) IN (SELECT classid, objid FROM members) THEN 'member' ELSE 'NOT A MEMBER' END
      FROM (SELECT 'pg_catalog.pg_class'::pg_catalog.regclass AS classid, c.oid AS objid, c.relnamespace AS nsp FROM pg_catalog.pg_class AS c
            UNION ALL SELECT 'pg_catalog.pg_proc'::pg_catalog.regclass, p.oid, p.pronamespace FROM pg_catalog.pg_proc AS p
            UNION ALL SELECT 'pg_catalog.pg_type'::pg_catalog.regclass, t.oid, t.typnamespace FROM pg_catalog.pg_type AS t
                       WHERE t.typrelid = 0 AND t.typelem = 0   -- not row types, not array types
            UNION ALL SELECT 'pg_catalog.pg_operator'::pg_catalog.regclass, o.oid, o.oprnamespace FROM pg_catalog.pg_operator AS o
            UNION ALL SELECT 'pg_catalog.pg_collation'::pg_catalog.regclass, o.oid, o.collnamespace FROM pg_catalog.pg_collation AS o
            UNION ALL SELECT 'pg_catalog.pg_conversion'::pg_catalog.regclass, o.oid, o.connamespace FROM pg_catalog.pg_conversion AS o
            UNION ALL SELECT 'pg_catalog.pg_opclass'::pg_catalog.regclass, o.oid, o.opcnamespace FROM pg_catalog.pg_opclass AS o
            UNION ALL SELECT 'pg_catalog.pg_opfamily'::pg_catalog.regclass, o.oid, o.opfnamespace FROM pg_catalog.pg_opfamily AS o
            UNION ALL SELECT 'pg_catalog.pg_ts_config'::pg_catalog.regclass, o.oid, o.cfgnamespace FROM pg_catalog.pg_ts_config AS o
            UNION ALL SELECT 'pg_catalog.pg_ts_dict'::pg_catalog.regclass, o.oid, o.dictnamespace FROM pg_catalog.pg_ts_dict AS o
            UNION ALL SELECT 'pg_catalog.pg_statistic_ext'::pg_catalog.regclass, o.oid, o.stxnamespace FROM pg_catalog.pg_statistic_ext AS o) AS x
     WHERE x.nsp IN (SELECT n.oid FROM pg_catalog.pg_namespace AS n WHERE n.nspname IN ('hoplock_internal')
                     UNION SELECT e.extnamespace FROM pg_catalog.pg_extension AS e, ext WHERE e.oid = ext.oid)
       AND NOT (x.classid = 'pg_catalog.pg_class'::pg_catalog.regclass
                AND (SELECT c.relkind FROM pg_catalog.pg_class AS c WHERE c.oid = x.objid) IN ('i', 'I', 'c'))
    UNION ALL
    -- schemas
    SELECT 'schema ' || n.nspname,
           pg_catalog.format('owner %s, acl %s, comment %L', pg_catalog.pg_get_userbyid(n.nspowner),
               n.nspacl, pg_catalog.obj_description(n.oid, 'pg_namespace'))
      FROM pg_catalog.pg_namespace AS n
     WHERE n.oid IN (SELECT objid FROM members WHERE classid = 'pg_catalog.pg_namespace'::pg_catalog.regclass)
    UNION ALL
    -- functions
    SELECT 'function ' || p.oid::pg_catalog.regprocedure::text,
           pg_catalog.format(E'owner %s, acl %s, comment %L\n%s', pg_catalog.pg_get_userbyid(p.proowner),
               p.proacl, pg_catalog.obj_description(p.oid, 'pg_proc'),
               pg_catalog.pg_get_functiondef(p.oid))
      FROM pg_catalog.pg_proc AS p
     WHERE p.oid IN (SELECT objid FROM members WHERE classid = 'pg_catalog.pg_proc'::pg_catalog.regclass)
    UNION ALL
    -- types
    SELECT 'type ' || t.oid::pg_catalog.regtype::text,
           pg_catalog.format('typtype %s, owner %s, acl %s, comment %L, array %s',
               t.typtype, pg_catalog.pg_get_userbyid(t.typowner), t.typacl,
               pg_catalog.obj_description(t.oid, 'pg_type'), t.typarray::pg_catalog.regtype)
      FROM pg_catalog.pg_type AS t
     WHERE t.oid IN (SELECT objid FROM members WHERE classid = 'pg_catalog.pg_type'::pg_catalog.regclass)
    UNION ALL
    -- relations
    SELECT 'relation ' || c.oid::pg_catalog.regclass::text,
           pg_catalog.format('relkind %s, persistence %s, owner %s, acl %s, options %s, am %s, tablespace %s, '
                             'rowsecurity %s/%s, replident %s, toast %s, natts %s, comment %L',
               c.relkind, c.relpersistence, pg_catalog.pg_get_userbyid(c.relowner), c.relacl, c.reloptions,
               (SELECT a.amname FROM pg_catalog.pg_am AS a WHERE a.oid = c.relam), c.reltablespace,
               c.relrowsecurity, c.relforcerowsecurity, c.relreplident, c.reltoastrelid <> 0, c.relnatts,
               pg_catalog.obj_description(c.oid, 'pg_class'))
      FROM pg_catalog.pg_class AS c WHERE c.oid IN (SELECT oid FROM rels)
    UNION ALL
    SELECT 'relation ' || c.oid::pg_catalog.regclass::text || ' column ' || pg_catalog.lpad(a.attnum::text, 3, '0'),
           pg_catalog.format('%s %s, not null %s, dropped %s, collation %s, default %s, identity %L, generated %L, '
                             'storage %s, compression %L, stattarget %s, options %s, acl %s, comment %L',
               a.attname, pg_catalog.format_type(a.atttypid, a.atttypmod), a.attnotnull, a.attisdropped,
               (SELECT co.collname FROM pg_catalog.pg_collation AS co WHERE co.oid = a.attcollation),
               (SELECT pg_catalog.pg_get_expr(d.adbin, d.adrelid) FROM pg_catalog.pg_attrdef AS d
                 WHERE d.adrelid = a.attrelid AND d.adnum = a.attnum),
               a.attidentity, a.attgenerated, a.attstorage,
               pg_catalog.to_jsonb(a) ->> 'attcompression', -- 14 and later
               a.attstattarget,
               (SELECT pg_catalog.array_agg(o ORDER BY o) FROM pg_catalog.unnest(a.attoptions) AS o
                 WHERE o NOT LIKE 'pg\_attver=%'), -- a version stamp of the server's, not a definition
               a.attacl, pg_catalog.col_description(c.oid, a.attnum))
      FROM pg_catalog.pg_class AS c JOIN pg_catalog.pg_attribute AS a ON a.attrelid = c.oid
     WHERE c.oid IN (SELECT oid FROM rels) AND a.attnum > 0
    UNION ALL
    SELECT 'relation ' || c.oid::pg_catalog.regclass::text || ' view', pg_catalog.pg_get_viewdef(c.oid)
      FROM pg_catalog.pg_class AS c WHERE c.oid IN (SELECT oid FROM rels) AND c.relkind IN ('v', 'm')
    UNION ALL
    SELECT 'relation ' || s.seqrelid::pg_catalog.regclass::text || ' sequence',
           pg_catalog.format('type %s, start %s, increment %s, min %s, max %s, cache %s, cycle %s',
               s.seqtypid::pg_catalog.regtype, s.seqstart, s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle)
      FROM pg_catalog.pg_sequence AS s WHERE s.seqrelid IN (SELECT oid FROM rels)
    UNION ALL
    SELECT 'relation ' || i.indrelid::pg_catalog.regclass::text || ' index ' || i.indexrelid::pg_catalog.regclass::text,
           pg_catalog.format('%s; primary %s, unique %s, nulls not distinct %s, immediate %s, clustered %s, valid %s, ready %s, replident %s',
               pg_catalog.pg_get_indexdef(i.indexrelid), i.indisprimary, i.indisunique,
               pg_catalog.to_jsonb(i) ->> 'indnullsnotdistinct', -- 15 and later
               i.indimmediate, i.indisclustered, i.indisvalid, i.indisready, i.indisreplident)
      FROM pg_catalog.pg_index AS i WHERE i.indexrelid IN (SELECT oid FROM rels)
    UNION ALL
    SELECT 'relation ' || co.conrelid::pg_catalog.regclass::text || ' constraint ' || co.conname,
           pg_catalog.format('%s; type %s, deferrable %s, deferred %s, validated %s, noinherit %s, index %s, comment %L',
               pg_catalog.pg_get_constraintdef(co.oid), co.contype, co.condeferrable, co.condeferred,
               co.convalidated, co.connoinherit, co.conindid::pg_catalog.regclass,
               pg_catalog.obj_description(co.oid, 'pg_constraint'))
      FROM pg_catalog.pg_constraint AS co WHERE co.conrelid IN (SELECT oid FROM rels)
    UNION ALL
    SELECT 'relation ' || tg.tgrelid::pg_catalog.regclass::text || ' trigger ' || tg.tgname,
           pg_catalog.format('%s; enabled %s', pg_catalog.pg_get_triggerdef(tg.oid), tg.tgenabled)
      FROM pg_catalog.pg_trigger AS tg WHERE tg.tgrelid IN (SELECT oid FROM rels) AND NOT tg.tgisinternal
    UNION ALL
    SELECT 'relation ' || r.ev_class::pg_catalog.regclass::text || ' rule ' || r.rulename,
           pg_catalog.format('%s; enabled %s', pg_catalog.pg_get_ruledef(r.oid), r.ev_enabled)
      FROM pg_catalog.pg_rewrite AS r WHERE r.ev_class IN (SELECT oid FROM rels) AND r.rulename <> '_RETURN'
    UNION ALL
    SELECT 'relation ' || po.polrelid::pg_catalog.regclass::text || ' policy ' || po.polname,
           pg_catalog.format('cmd %s, permissive %s, roles %s, using %s, check %s', po.polcmd, po.polpermissive,
               po.polroles::pg_catalog.regrole[], pg_catalog.pg_get_expr(po.polqual, po.polrelid),
               pg_catalog.pg_get_expr(po.polwithcheck, po.polrelid))
      FROM pg_catalog.pg_policy AS po WHERE po.polrelid IN (SELECT oid FROM rels)
    UNION ALL
    SELECT 'relation ' || st.stxrelid::pg_catalog.regclass::text || ' statistics ' || st.stxname,
           pg_catalog.pg_get_statisticsobjdef(st.oid)
      FROM pg_catalog.pg_statistic_ext AS st WHERE st.stxrelid IN (SELECT oid FROM rels)
    UNION ALL
    SELECT 'relation ' || ih.inhrelid::pg_catalog.regclass::text || ' inherits', ih.inhparent::pg_catalog.regclass::text
      FROM pg_catalog.pg_inherits AS ih WHERE ih.inhrelid IN (SELECT oid FROM rels) OR ih.inhparent IN (SELECT oid FROM rels)
    UNION ALL
    -- the privileges pg_dump takes as the extension's own (pg_init_privs)
    SELECT 'initial privileges ' || pg_catalog.pg_describe_object(ip.classoid, ip.objoid, ip.objsubid),
           pg_catalog.format('%s %s', ip.privtype, ip.initprivs)
      FROM pg_catalog.pg_init_privs AS ip
     WHERE (ip.classoid, ip.objoid) IN (SELECT classid, objid FROM members)
        OR (ip.classoid = 'pg_catalog.pg_class'::pg_catalog.regclass AND ip.objoid IN (SELECT oid FROM rels))
    UNION ALL
    -- dependencies from and on the members (but their membership)
    SELECT 'dependency ' || pg_catalog.pg_describe_object(d.classid, d.objid, d.objsubid),
           pg_catalog.format('%s on %s', d.deptype, pg_catalog.pg_describe_object(d.refclassid, d.refobjid, d.refobjsubid))
      FROM pg_catalog.pg_depend AS d
     WHERE ((d.classid, d.objid) IN (SELECT classid, objid FROM members)
            OR (d.refclassid, d.refobjid) IN (SELECT classid, objid FROM members)
            OR (d.classid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.objid IN (SELECT oid FROM rels))
            OR (d.refclassid = 'pg_catalog.pg_class'::pg_catalog.regclass AND d.refobjid IN (SELECT oid FROM rels)))
       AND NOT (d.refclassid = 'pg_catalog.pg_extension'::pg_catalog.regclass AND d.deptype = 'e')
)
SELECT pg_catalog.string_agg(
           '== ' || pg_catalog.regexp_replace(key, 'pg_toast_[0-9]+', 'pg_toast_N', 'g') || E'\n'
           || pg_catalog.regexp_replace(COALESCE(value, '(null)'), 'pg_toast_[0-9]+', 'pg_toast_N', 'g'),
           E'\n' ORDER BY key, value)
  FROM facts
SQL

# The fingerprint of database $dbname; $before, if given, is SQL run first
# in the same transaction, which is rolled back (its output is discarded).
sub fingerprint
{
	my ($node, $dbname, $before) = @_;
	return $node->safe_psql($dbname, "$FINGERPRINT;") unless defined $before;
	return $node->safe_psql($dbname,
		"BEGIN;\n\\o /dev/null\n$before;\n\\o\n$FINGERPRINT;\nROLLBACK;");
}

# A unified diff of two texts ('' if they are equal).
sub diff
{
	my ($old, $new, $old_label, $new_label) = @_;
	return '' if $old eq $new;
	my $dir = tempdir(CLEANUP => 1);
	my ($a, $b) = ("$dir/$old_label", "$dir/$new_label");
	PostgreSQL::Test::Utils::append_to_file($a, "$old\n");
	PostgreSQL::Test::Utils::append_to_file($b, "$new\n");
	my $out = '';
	IPC::Run::run([ 'diff', '-u', $a, $b ], '>', \$out, '2>&1');
	$out =~ s/\Q$dir\E\///g;
	return $out;
}

1;
