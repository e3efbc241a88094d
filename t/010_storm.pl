# An expiry storm: 100,000 leases lapsing within one second are all
# announced, each exactly once, in short batches, and a listener that
# keeps up receives every event.  (The acquires overflow the worker's
# mailbox, so this also exercises the rescan.)
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use Hoplock::Listener;

my $n = 100_000;
my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

my $listener = Hoplock::Listener->new($node, 'postgres');

# Every lease lapses at the same instant.  The acquires take seconds, more
# with the listener's events and far more on a loaded machine, so the
# instant is set by a second pass of renewals (no events, quicker than the
# acquires), timed from how long the acquires took; a commit every 1,000
# calls keeps each transaction's term locks few.
my $t0 = time();
$node->safe_psql(
	'postgres', qq{
	CREATE PROCEDURE storm(n int) LANGUAGE plpgsql AS \$\$
	BEGIN
		FOR i IN 1..n LOOP
			PERFORM hoplock_acquire('storm-' || i, 'o', '1 h');
			IF i % 1000 = 0 THEN COMMIT; END IF;
		END LOOP;
	END \$\$;
	CREATE PROCEDURE lapse_at(n int, lapse timestamptz) LANGUAGE plpgsql AS \$\$
	BEGIN
		FOR i IN 1..n LOOP
			PERFORM hoplock_renew('storm-' || i, 'o', lapse - clock_timestamp());
			IF i % 1000 = 0 THEN COMMIT; END IF;
		END LOOP;
	END \$\$;
	CALL storm($n);
});
my $acquires = time() - $t0;
$node->safe_psql('postgres',
	sprintf(q{CALL lapse_at(%d, clock_timestamp() + interval '%d s')}, $n, 2 + int(1.5 * $acquires)));
my $lapse = $node->safe_psql('postgres',
	q{SELECT extract(epoch FROM max(expires_at)) - extract(epoch FROM min(expires_at)) FROM hoplock_internal.lease});
cmp_ok($lapse, '<', 1, "$n leases, all lapsing within one second of each other");
diag(sprintf('acquired in %.1f s, set to lapse at one instant in %.1f s', $acquires, time() - $t0 - $acquires));

my $events = $listener->collect(120,
	sub { (grep { $_->{event} eq 'expired' } @{ $_[0] }) >= $n });
my @expired = grep { $_->{event} eq 'expired' } @$events;
is(scalar @expired, $n, 'the listener received an expired event for every lease');
my %names = map { $_->{name} => 1 } @expired;
is(scalar keys %names, $n, 'one per lease: no duplicates');
my @lags = map { $_->{received_at} - Hoplock::Listener::epoch($_->{expires_at}) } @expired;
diag(sprintf('announced from the lapse until %.2f s after it', (sort { $a <=> $b } @lags)[-1]));

# nothing more arrives
$listener->reset;
$events = $listener->collect(2);
is(scalar(grep { $_->{event} eq 'expired' } @$events), 0, 'and nothing more');
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_internal.lease WHERE state = 'x'}),
	$n, 'every row records its announcement');
is($node->safe_psql('postgres', q{SELECT expiries_announced FROM hoplock_workers}),
	$n, 'hoplock_workers counted them');

$listener->disconnect;
$node->stop;
done_testing();
