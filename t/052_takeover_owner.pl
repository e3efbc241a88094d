# What a database owner could leave behind for a superuser who takes the
# database or a schema over, that CREATE EXTENSION refuses (each part
# installed before the fix, and the planted function then ran as the
# superuser):
#
# 1. Objects given to pg_database_owner.  A database owner may give its
#    functions (and schemas) to pg_database_owner, which stands for the
#    database's owner at any time: once a superuser takes the database
#    over (ALTER DATABASE ... OWNER TO) they would count as the
#    superuser's.  Outside the owner and grantees of schema public,
#    pg_database_owner counts as a role that is not a superuser -- in
#    public (the contract's one-line install) and in a schema hoplock the
#    former owner made.
# 2. Uncommitted objects.  A function created in a transaction that is
#    still open when the superuser takes the schema over and installs
#    would appear beside hoplock's when that transaction commits: the
#    check reads the catalogs with a dirty snapshot.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('takeover_owner');
$node->init;
$node->append_conf('postgresql.conf', qq{shared_preload_libraries = 'hoplock'});
$node->start;

$node->safe_psql('postgres', q{
	CREATE ROLE dbo LOGIN CREATEDB;
	CREATE DATABASE app1 OWNER dbo;
	CREATE DATABASE app2 OWNER dbo;
	CREATE DATABASE app3 OWNER dbo;
});
for my $db (qw(app1 app2 app3))
{
	# a log the planted functions write to, owned by a superuser
	$node->safe_psql($db, q{
		CREATE SCHEMA log;
		CREATE TABLE log.captured (who name);
		GRANT USAGE ON SCHEMA log TO PUBLIC;
		GRANT INSERT ON log.captured TO PUBLIC;
	});
}
my $body = q{LANGUAGE sql AS $$INSERT INTO log.captured VALUES (current_user); SELECT 1::bigint$$};

# --- 1a. public: planted by the former owner as pg_database_owner ----------
$node->safe_psql('app1', qq{
	CREATE FUNCTION public.hoplock_fence(name text, generation integer) RETURNS bigint $body;
	CREATE FUNCTION public.hoplock_acquire(name text, owner text, ttl text) RETURNS bigint $body;
	ALTER FUNCTION public.hoplock_fence(text, integer) OWNER TO pg_database_owner;
	ALTER FUNCTION public.hoplock_acquire(text, text, text) OWNER TO pg_database_owner;
}, extra_params => [ '-U', 'dbo' ]);
$node->safe_psql('postgres', 'ALTER DATABASE app1 OWNER TO CURRENT_USER');
my ($ret, $out, $err) = $node->psql('app1', 'CREATE EXTENSION hoplock');
like($err, qr/Role "pg_database_owner", which is not a superuser, owns function "hoplock_(fence|acquire)"/,
	'the refusal of public names pg_database_owner and one of its functions');
isnt($ret, 0, 'public holding functions the former database owner gave pg_database_owner is refused')
  or do
{
	$node->safe_psql('app1', q{
		SELECT public.hoplock_acquire('a', 'b', '1 h');
		SELECT public.hoplock_fence('job', 2);
	});
	diag('captured: ' . $node->safe_psql('app1', 'SELECT count(*) FROM log.captured'));
};

# --- 1b. schema hoplock made by the former owner as pg_database_owner -------
$node->safe_psql('app2', qq{
	CREATE SCHEMA hoplock AUTHORIZATION pg_database_owner;
	CREATE FUNCTION hoplock.hoplock_fence(name text, generation integer) RETURNS bigint $body;
	ALTER FUNCTION hoplock.hoplock_fence(text, integer) OWNER TO pg_database_owner;
}, extra_params => [ '-U', 'dbo' ]);
$node->safe_psql('postgres', 'ALTER DATABASE app2 OWNER TO CURRENT_USER');
($ret, $out, $err) = $node->psql('app2', q{
	ALTER SCHEMA hoplock OWNER TO CURRENT_USER;
	CREATE EXTENSION hoplock SCHEMA hoplock;
});
isnt($ret, 0, 'a schema taken over holding a function given to pg_database_owner is refused')
  or do
{
	$node->safe_psql('app2', q{SELECT hoplock.hoplock_fence('job', 2)});
	diag('captured: ' . $node->safe_psql('app2', 'SELECT count(*) FROM log.captured'));
};

# --- 2. a function planted in a transaction still open at the takeover ------
$node->safe_psql('app3', 'CREATE SCHEMA hoplock', extra_params => [ '-U', 'dbo' ]);
my $planter = $node->background_psql('app3', extra_params => [ '-U', 'dbo' ]);
$planter->query_safe('BEGIN');
$planter->query_safe(qq{CREATE FUNCTION hoplock.hoplock_fence(name text, generation integer) RETURNS bigint $body});
($ret, $out, $err) = $node->psql('app3', q{
	ALTER SCHEMA hoplock OWNER TO CURRENT_USER;
	CREATE EXTENSION hoplock SCHEMA hoplock;
});
$planter->query_safe('COMMIT');
$planter->quit;
like($err, qr/Role "dbo", which is not a superuser, owns function "hoplock_fence"/,
	'the refusal names the function being planted and its owner');
isnt($ret, 0, 'a schema taken over while a function is being planted in it is refused')
  or do
{
	$node->safe_psql('app3', q{SELECT hoplock.hoplock_fence('job', 2)});
	diag('captured: ' . $node->safe_psql('app3', 'SELECT count(*) FROM log.captured'));
};

$node->stop;
done_testing();
