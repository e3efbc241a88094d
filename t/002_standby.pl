# Hot standby and promotion: reads work on a standby, writes and fences
# fail with 25006, and an asynchronous standby promoted after missing the
# last grants hands out generations above every one the old primary gave.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION hoplock');
$primary->safe_psql('postgres',
	q{SELECT hoplock_acquire('job', 'a', '1 h'), hoplock_acquire('other', 'a', '1 h'),
	         hoplock_acquire('short', 'a', '3 s')});

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

# --- Reads on the hot standby ----------------------------------------------
is( $standby->safe_psql(
		'postgres', q{SELECT owner || '/' || generation FROM hoplock_holder('job')}),
	'a/1',
	'hoplock_holder works on a hot standby');
is( $standby->safe_psql(
		'postgres', q{SELECT count(*) FROM hoplock_leases}),
	'3',
	'hoplock_leases works on a hot standby');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM hoplock_workers}),
	'0', 'a hot standby runs no expiry worker');

# --- Writes on the hot standby ---------------------------------------------
foreach my $call (
	q{hoplock_acquire('job', 'b', '1 h')},
	q{hoplock_renew('job', 'a', '1 h')},
	q{hoplock_release('job', 'a')},
	q{hoplock_force_release('job')},
	q{hoplock_write('job', NULL, 'b', '1 h')},
	q{hoplock_delete('job', 'x')},
	q{hoplock_fence('job', 1)})
{
	my ($ret, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT $call");
	like($err, qr/ERROR:  25006: cannot execute hoplock_\w+\(\) (in a read-only transaction|during recovery)/,
		"$call on a standby fails with 25006");
}

# --- Promotion of a standby that missed the last grants --------------------
$standby->stop;
$primary->safe_psql(
	'postgres', q{
	SELECT hoplock_release('job', 'a');
	SELECT hoplock_acquire('job', 'b', '1 h');
	SELECT hoplock_release('job', 'b');
	SELECT hoplock_acquire('job', 'c', '1 h');
});
my $last_on_primary = $primary->safe_psql('postgres',
	q{SELECT generation FROM hoplock_holder('job')});
is($last_on_primary, '3', 'the old primary reached generation 3');
$primary->stop('immediate');

$standby->start;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby did not leave recovery';

is( $standby->safe_psql(
		'postgres', q{SELECT owner || '/' || generation FROM hoplock_holder('job')}),
	'a/1',
	'the promoted standby missed the last grants');
$standby->safe_psql('postgres', q{SELECT hoplock_force_release('job')});
# the worker starts after promotion, and announces what lapsed meanwhile
$standby->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE pid IS NOT NULL})
  or die 'no worker after promotion';
pass('after promotion the expiry worker starts');
$standby->poll_query_until('postgres',
	q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'short'})
  or die 'not announced after promotion';
pass('and announces the term that lapsed while it was a standby');

my $next = $standby->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('job', 'd', '1 h')});
cmp_ok($next, '>', $last_on_primary,
	"the first term after promotion ($next) is above every term of the old primary");
is($next, (1 << 40) + 1, 'it starts the new timeline\'s range of generations');

# And names the old primary never had start in the new range too; later
# terms continue one by one.
is( $standby->safe_psql(
		'postgres', q{SELECT generation FROM hoplock_acquire('new-name', 'd', '1 h')}),
	(1 << 40) + 1,
	'a new name on the new timeline');
$standby->safe_psql('postgres', q{SELECT hoplock_release('job', 'd')});
is( $standby->safe_psql(
		'postgres', q{SELECT generation FROM hoplock_acquire('job', 'e', '1 h')}),
	(1 << 40) + 2,
	'the next term on the same timeline is one higher');

$standby->stop;
done_testing();
