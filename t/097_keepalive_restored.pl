# hoplock_renew_all after its tables were restored by SQL into a database
# whose worker had already found no keepalive there.  The worker clears the
# database's "a keepalive may exist" flag when its keepalive table is
# empty; a COPY (pg_restore's, psql's) or an INSERT that brings keepalive
# rows in afterwards must set it again, or the owner's new terms never
# attach to the restored keepalive and hoplock_renew_all leaves them out
# for good.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(sleep);

my $node = PostgreSQL::Test::Cluster->new('keepalive_restored');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('postgres', 'CREATE DATABASE dst');
$node->safe_psql('src', 'CREATE EXTENSION hoplock');
$node->safe_psql('dst', 'CREATE EXTENSION hoplock');

# src: owner "o" holds "t1", attached to its keepalive
$node->safe_psql('src', q{SELECT hoplock_acquire('t1', 'o', '1 h')});
is($node->safe_psql('src', q{SELECT name FROM hoplock_renew_all('o', '1 h')}),
	't1', 'the source keepalive renews t1');

# dst: wait until its worker has found the keepalive table empty (a new
# term then does not look its owner's keepalive up: no scan of the index)
my $probe = q{
	\set QUIET on
	BEGIN;
	SELECT hoplock_acquire('probe', 'nobody', '1 h') IS NOT NULL;
	SELECT pg_stat_get_xact_numscans(
	         'hoplock_internal.keepalive_by_owner'::regclass);
	ROLLBACK;
};
ok( $node->poll_query_until('dst', $probe, "t\n0"),
	"dst's worker found no keepalive");

# restore src's keepalive and leases into dst, as pg_restore would
my $dump = $node->basedir . '/ka.sql';
command_ok(
	[
		'pg_dump', '--data-only',
		'-t', 'hoplock_internal.keepalive',
		'-t', 'hoplock_internal.keepalive_id_seq',
		'-t', 'hoplock_internal.lease',
		'-f', $dump, '-d', $node->connstr('src')
	],
	'pg_dump of the keepalive and the leases');
$node->command_ok([ 'psql', '-X', '-v', 'ON_ERROR_STOP=1', '-q',
		'-f', $dump, '-d', $node->connstr('dst') ],
	'restored into dst');

# a new term of "o" attaches to the restored keepalive ...
$node->safe_psql('dst', q{SELECT hoplock_acquire('t2', 'o', '1 h')});
is( $node->safe_psql('dst',
		q{SELECT keepalive = (SELECT id FROM hoplock_internal.keepalive)
		    FROM hoplock_internal.lease WHERE name = 't2'}),
	't', 'a new term attaches to the restored keepalive');

# ... and hoplock_renew_all renews both
is( $node->safe_psql('dst',
		q{SELECT string_agg(name, ',' ORDER BY name)
		    FROM hoplock_renew_all('o', '1 h')}),
	't1,t2', 'hoplock_renew_all renews every running term of the owner');

# the same through an INSERT by a superuser: the worker deletes the
# keepalive once it lapses and clears the flag, then the rows come back
$node->safe_psql('dst', q{
	CREATE TABLE saved_ka AS SELECT * FROM hoplock_internal.keepalive;
	SELECT hoplock_release(name, 'o') FROM hoplock_internal.lease
	 WHERE state = 'h';
	SELECT count(*) FROM hoplock_renew_all('o', '1 s');
});
ok( $node->poll_query_until('dst', $probe, "t\n0"),
	"dst's worker found no keepalive again");
$node->safe_psql('dst', q{
	INSERT INTO hoplock_internal.keepalive
	SELECT id + 100, owner_roleid, owner, clock_timestamp(),
	       clock_timestamp() + interval '1 h', version, NULL
	  FROM saved_ka;
});
$node->safe_psql('dst', q{SELECT hoplock_acquire('t3', 'o', '1 h')});
is( $node->safe_psql('dst',
		q{SELECT string_agg(name, ',' ORDER BY name)
		    FROM hoplock_renew_all('o', '1 h')}),
	't3', 'a keepalive inserted by SQL: the new term is renewed');

# terms whose keepalive row is gone (deleted by SQL, or not restored with
# them) run on the expiry they have on their own row: the worker announces
# each when it lapses
$node->safe_psql('dst', q{
	SELECT hoplock_acquire('g' || i, 'g', '1 h') FROM generate_series(1, 3) AS i;
	SELECT count(*) FROM hoplock_renew_all('g', '2 s');
	DELETE FROM hoplock_internal.keepalive WHERE owner = 'g';
});
my $announced = 0;
for (my $i = 0; $i < 150 && !$announced; $i++)
{
	$announced = $node->safe_psql('dst',
		q{SELECT count(*) = 3 FROM hoplock_events(0)
		   WHERE owner = 'g' AND event = 'expired'}) eq 't';
	sleep 0.1 unless $announced;
}
ok($announced, 'the terms of a deleted keepalive are announced as they lapse');
is( $node->safe_psql('dst',
		q{SELECT count(*) FROM hoplock_internal.lease
		   WHERE owner = 'g' AND state = 'h'}),
	'0', '... and end');

$node->stop;
done_testing();
