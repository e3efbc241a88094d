# ALTER EXTENSION hoplock UPDATE from 1.1.0 replaces three functions whose
# arguments or columns changed in 1.2.0 (hoplock_wait, hoplock_acquire,
# hoplock_events): the privileges granted and revoked on the old ones go
# to the new ones, and an object of the user's that depends on an old one
# stops the update with an error naming it (rather than a CASCADE hint),
# changing nothing.  So does a type of the user's (a table's) under the
# name of a type 1.2.0 adds.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('update_replaced');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE ROLE app LOGIN;
	CREATE ROLE other LOGIN;
	CREATE DATABASE acl;
	CREATE DATABASE dep;
});

# --- privileges -------------------------------------------------------------
$node->safe_psql('acl', q{
	CREATE EXTENSION hoplock VERSION '1.1.0';
	REVOKE EXECUTE ON FUNCTION hoplock_wait(text, text, interval, interval, boolean) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION hoplock_wait(text, text, interval, interval, boolean) TO app;
	REVOKE EXECUTE ON FUNCTION hoplock_acquire(text, text, interval, boolean) FROM PUBLIC;
	GRANT EXECUTE ON FUNCTION hoplock_acquire(text, text, interval, boolean) TO app WITH GRANT OPTION;
	REVOKE EXECUTE ON FUNCTION hoplock_events(bigint) FROM PUBLIC;
});
$node->safe_psql('acl', 'ALTER EXTENSION hoplock UPDATE');
is( $node->safe_psql('acl', q{
		SELECT string_agg(f || ':' || has_function_privilege('app', f, 'EXECUTE')
		                  || ':' || has_function_privilege('other', f, 'EXECUTE'), ' ' ORDER BY f)
		  FROM unnest(ARRAY['hoplock_wait(text,text,interval,interval,boolean,integer,text,boolean,interval,integer)',
		                    'hoplock_acquire(text,text,interval,boolean,text,interval,integer)',
		                    'hoplock_events(bigint)']) AS f}),
	'hoplock_acquire(text,text,interval,boolean,text,interval,integer):true:false hoplock_events(bigint):false:false hoplock_wait(text,text,interval,interval,boolean,integer,text,boolean,interval,integer):true:false',
	'the replaced functions keep the privileges granted and revoked on the old ones');
is( $node->safe_psql('acl', q{
		SELECT has_function_privilege('app', 'hoplock_acquire(text,text,interval,boolean,text,interval,integer)', 'EXECUTE WITH GRANT OPTION')}),
	't', '... with the grant option');
is($node->safe_psql('acl', q{SELECT extversion FROM pg_extension WHERE extname = 'hoplock'}),
	'1.2.0', 'updated');

# --- an object that depends on a replaced function ---------------------------
$node->safe_psql('dep', q{
	CREATE EXTENSION hoplock VERSION '1.1.0';
	CREATE VIEW my_leader AS
	    SELECT (hoplock_acquire('job', 'me', '10 s')).generation;
});
my ($ret, $out, $err) = $node->psql('dep', 'ALTER EXTENSION hoplock UPDATE');
isnt($ret, 0, 'a view on the old hoplock_acquire stops the update');
like($err, qr/replaces function .*hoplock_acquire.*view my_leader/, '... naming the function and the view');
like($err, qr/HINT:  Drop them, update the extension/, '... and saying what to do');
is($node->safe_psql('dep', q{SELECT extversion FROM pg_extension WHERE extname = 'hoplock'}),
	'1.1.0', '... changing nothing');
$node->safe_psql('dep', 'DROP VIEW my_leader; ALTER EXTENSION hoplock UPDATE');
is($node->safe_psql('dep', q{SELECT extversion FROM pg_extension WHERE extname = 'hoplock'}),
	'1.2.0', 'without it, the update goes through');

# --- a type of the user's under a name 1.2.0 adds ----------------------------
$node->safe_psql('postgres', q{
	CREATE DATABASE names;
});
$node->safe_psql('names', q{
	CREATE EXTENSION hoplock VERSION '1.1.0';
	CREATE TABLE hoplock_event (id int);
});
($ret, $out, $err) = $node->psql('names', 'ALTER EXTENSION hoplock UPDATE');
isnt($ret, 0, 'a table named hoplock_event in the schema stops the update');
like($err, qr/creates types named hoplock_event and hoplock_renewed in schema public, where hoplock_event exists/,
	'... naming it');
like($err, qr/HINT:  Rename it or move it to another schema/, '... and saying what to do');
is($node->safe_psql('names', q{SELECT extversion FROM pg_extension WHERE extname = 'hoplock'}),
	'1.1.0', '... changing nothing');
$node->safe_psql('names', 'ALTER TABLE hoplock_event RENAME TO my_event; ALTER EXTENSION hoplock UPDATE');
is($node->safe_psql('names', q{SELECT extversion FROM pg_extension WHERE extname = 'hoplock'}),
	'1.2.0', 'renamed, the update goes through');

$node->stop;
done_testing();
