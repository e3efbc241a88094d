# An expired lease is free: an acquire of a lapsed term takes it over even
# while the expiry worker is announcing that term (its transaction holds the
# row until it commits; the acquire waits for it, briefly, instead of
# returning NULL as for a lease someone else is changing).
#
# Each round: 400 names are acquired with a 300 ms ttl, so that they lapse
# together and the worker announces them in batches, each commit of which
# is made to take 20 ms; right as they lapse, one statement acquires every
# name for another owner.  Every acquire must return the lease.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('takeover');
$node->init;
# Every commit that flushes WAL sleeps 20 ms first (fsync must be on for
# that): the worker's announcements hold their rows that much longer, so
# that the takeovers meet them.
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
fsync = on
commit_delay = 20000
commit_siblings = 0
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');
$node->poll_query_until('postgres',
	q{SELECT state = 'sleeping' FROM hoplock_workers WHERE datname = 'postgres'})
  or die 'the worker did not start';

my $names = 400;
my ($nulls, $taken, $by_worker) = (0, 0, 0);
for my $round (1 .. 6)
{
	my $out = $node->safe_psql(
		'postgres', qq{
		SELECT count(hoplock_acquire('n' || i, 'a', '300 ms'))
		  FROM generate_series(1, $names) AS i;
		SELECT pg_sleep(0.3);
		SELECT count(*) FILTER (WHERE l.generation IS NULL) || ' ' ||
		       count(*) FILTER (WHERE l.owner = 'b')
		  FROM generate_series(1, $names) AS i,
		       LATERAL hoplock_acquire('n' || i, 'b', '1 h') AS l;
		SELECT count(hoplock_force_release('n' || i))
		  FROM generate_series(1, $names) AS i;});
	my @lines = split /\n/, $out;
	my ($n, $t) = split / /, $lines[2];
	$nulls += $n;
	$taken += $t;
	note "round $round: $t taken over, $n NULL";
}
# Who announced the expiries (the worker, or the acquire that took the lease
# over first) is a race; both must have happened for the test to mean much.
my $announced = $node->safe_psql('postgres',
	q{SELECT count(*) FROM hoplock_events(0) WHERE event = 'expired'});
note "$announced expiries announced, "
  . $node->safe_psql('postgres',
	q{SELECT expiries_announced FROM hoplock_workers WHERE datname = 'postgres'})
  . ' of them by the worker';
is($nulls, 0, 'no acquire of a lapsed term returned NULL');
is($taken, 6 * $names, 'every lapsed term was taken over');

$node->stop;
done_testing();
