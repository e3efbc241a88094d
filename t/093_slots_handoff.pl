# hoplock_handoff of a slot's term never gives an owner a second slot of
# the name: a candidate whose owner holds another slot -- or is taking one
# in a transaction still open -- is passed over, as every candidate the
# term cannot go to is; named with to_owner, the handoff returns NULL and
# the term goes on.  The candidate's wait then returns its owner's own
# term, as an acquire of an owner with a slot does.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use Hoplock::Background;

my $node = PostgreSQL::Test::Cluster->new('slots_handoff');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');



# a candidate of lease 'q' under "owner"; returns once it waits
sub start_candidate
{
	my ($owner) = @_;
	my $p = start_psql($node, "SELECT owner FROM hoplock_wait('q', '$owner', '1 h', '60 s', slots => 2)");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'q' AND owner = '$owner'")
	  or die "$owner is no candidate";
	return $p;
}

my $ga = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('q', 'a', '1 h', slots => 2)});

# owner x takes the other slot in a transaction left open a while
my $b = start_psql($node, q{
	BEGIN;
	SELECT owner FROM hoplock_acquire('q', 'x', '1 h', slots => 2);
	SELECT pg_sleep(8);
	COMMIT;});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%pg_sleep(8)%'
	   AND wait_event = 'PgSleep'})
  or die 'x is not taking its slot';

# another session of x waits as a candidate, and so does d (after it)
my $cx = start_candidate('x');
my $cd = start_candidate('d');

is($node->safe_psql('postgres',
		"SELECT hoplock_handoff('q', 'a', $ga, to_owner => 'x') IS NULL"),
	't', 'to a candidate whose owner is taking another slot: NULL');
is($node->safe_psql('postgres', q{SELECT owner FROM hoplock_holder('q')}),
	'a', '... and the term goes on');
is($node->safe_psql('postgres',
		"SELECT owner FROM hoplock_handoff('q', 'a', $ga)"),
	'd', 'to the first candidate: x passed over, d gets it');

like(finish_psql($b), qr/^x$/m, 'x took its slot');
is(finish_psql($cx), "x\n", "x's candidate gets x's own term");
is(finish_psql($cd), "d\n", "d's candidate gets the handed term");
is($node->safe_psql('postgres', q{
	SELECT string_agg(owner, ',' ORDER BY owner) FROM hoplock_leases
	 WHERE name = 'q' AND NOT expired}),
	'd,x', 'one slot an owner');

$node->stop;
done_testing();
