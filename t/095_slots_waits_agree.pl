# Waits that give a free name the same new number of slots agree: a
# name's number binds while a candidate waits with it, not while the
# candidates all wait with the number the caller gives.  Two waits with
# slots => 2 (or two without slots) on a name whose free slots record 3
# must both wait, not have the second raise 22023 because the first
# waits.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use Hoplock::Background;
use Time::HiRes qw(sleep);

my $node = PostgreSQL::Test::Cluster->new('slots_waits_agree',
	port => $ENV{HOPLOCK_TAP_PORT});
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');




# name "name" records 3 free slots; a slot term of 3 is begun in a
# transaction left open (2 s), then rolled back; two waits with
# "slots" start meanwhile
sub race
{
	my ($name, $slots, $timeout) = @_;
	$node->safe_psql('postgres', qq{
		SELECT hoplock_acquire('$name', 'x', '1 h', slots => 3);
		SELECT hoplock_release('$name', 'x');});
	my $gate = start_psql($node, qq{
		BEGIN;
		SELECT hoplock_acquire('$name', 'g', '1 h', slots => 3) IS NOT NULL;
		SELECT pg_sleep(2);
		ROLLBACK;});
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = 1 FROM pg_stat_activity
		 WHERE query LIKE '%pg_sleep(2)%' AND wait_event = 'PgSleep'})
	  or die 'the gate did not close';
	my @w;
	for my $owner (qw(w1 w2))
	{
		push @w, start_psql($node, qq{SELECT coalesce(owner, 'none') FROM
			hoplock_wait('$name', '$owner', '1 h', '$timeout', slots => $slots)});
		# the first waits before the second starts; the second may raise
		if (@w == 1) { wait_candidates($node, $name, 1); } else { sleep 0.3; }
	}
	finish_psql($gate);
	return join ',', sort map { chomp(my $o = finish_psql($_)); $o } @w;
}

is(race('two', 2, '10 s'), 'w1,w2',
	'two waits giving a free name the same new N both get a slot');
like(race('one', 1, '4 s'), qr/^none,w[12]$/,
	'two waits without slots: one gets the name, the other times out');

$node->stop;
done_testing();
