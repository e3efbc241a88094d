# Names restored by pg_restore are forgotten, though the restore records no
# event.  The expiry worker's sweep runs again only after a change it was
# told of (a term began or ended); a restore that writes hoplock's tables
# once the worker has swept the empty table tells it nothing.  The sweep
# must still run whole now and then (at least every
# hoplock.released_retention), so that the restored released names, past
# their retention, are forgotten with nothing else happening.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('housekeeping_restore');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
hoplock.released_retention = '1d'
autovacuum = off
});
$node->start;

$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', 'CREATE EXTENSION hoplock');
$node->safe_psql('src', q{
SELECT count(hoplock_acquire('gone-' || i, 'holder', '1 h')) FROM generate_series(1, 50) AS i;
SELECT count(hoplock_release('gone-' || i, 'holder')) FROM generate_series(1, 50) AS i;
});
my $dump = $node->basedir . '/released.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('src') ],
	'pg_dump of a database of released names');

# The extension first; its worker starts and sweeps the empty table
$node->safe_psql('postgres', 'CREATE DATABASE dst');
$node->command_ok(
	[ 'pg_restore', '--section=pre-data', '-d', $node->connstr('dst'), $dump ],
	'pg_restore of the schema');
ok( $node->poll_query_until('src',
		q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'dst'}),
	'a worker serves the restored database');
sleep 3;
$node->command_ok(
	[ 'pg_restore', '--section=data', '-d', $node->connstr('dst'), $dump ],
	'pg_restore of the data');
is($node->safe_psql('dst',
		q{SELECT count(*) FROM hoplock_internal.lease WHERE name LIKE 'gone-%'}),
	50, 'the released names restored');

# A short retention now: the restored names are long past it
$node->append_conf('postgresql.conf', q{hoplock.released_retention = 4});
$node->reload;
my $left;
my $until = time + 45;
while (time < $until)
{
	$left = $node->safe_psql('dst',
		q{SELECT count(*) FROM hoplock_internal.lease WHERE name LIKE 'gone-%'});
	last if $left == 0;
	sleep 1;
}
is($left, 0, 'the restored released names are forgotten, no term changing');

$node->stop;
done_testing();
