# hoplock_wait across sessions: several waiters race for a released lease,
# one wins at once and the others sleep on until their turn or timeout;
# wake-ups follow the release within milliseconds (a sanity bound here;
# bench/ measures).  Without shared_preload_libraries it still works, by
# polling, and says so once per session.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

# Start a psql running hoplock_wait for $owner; returns its handle and
# output buffer.
sub start_waiter
{
	my ($owner, $timeout) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
			"SELECT coalesce(owner || ' ' || (extract(epoch FROM acquired_at) * 1e6)::bigint, 'timeout')"
			  . " FROM hoplock_wait('race', '$owner', '1 h', '$timeout')"
		],
		'>', \$out, '2>&1');
	return ($h, \$out);
}

sub waiting_count
{
	return $node->safe_psql('postgres',
		q{SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%hoplock_wait(''race''%' AND state = 'active' AND pid <> pg_backend_pid()});
}

sub release_at
{
	my ($owner) = @_;
	# the clock just before the release (and its commit)
	return $node->safe_psql('postgres',
		"SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint; SELECT hoplock_release('race', '$owner')")
	  =~ s/\nt$//r;
}

# --- Five waiters, one release at a time ------------------------------------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('race', 'holder', '1 h')});
my %waiters;
for my $i (1 .. 5)
{
	my ($h, $out) = start_waiter("w$i", '60 s');
	$waiters{"w$i"} = { h => $h, out => $out };
}
$node->poll_query_until('postgres',
	q{SELECT count(*) = 5 FROM pg_stat_activity WHERE query LIKE '%hoplock_wait(''race''%' AND state = 'active' AND pid <> pg_backend_pid()})
  or die 'waiters did not start';

my @lags;
my $last = 'holder';
my %won;
for my $round (1 .. 5)
{
	my $released = release_at($last);
	# exactly one waiter returns
	my $winner;
	my $t0 = time();
	while (!$winner && time() - $t0 < 30)
	{
		for my $w (sort keys %waiters)
		{
			next if $won{$w};
			$waiters{$w}{h}->pump_nb;
			if (${ $waiters{$w}{out} } =~ /^(w\d) (\d+)$/m)
			{
				$winner = $1;
				push @lags, ($2 - $released) / 1000.0;
			}
		}
		usleep(1000) unless $winner;
	}
	ok($winner, "round $round: a waiter took the released lease");
	last unless $winner;
	$won{$winner} = 1;
	$waiters{$winner}{h}->finish;
	usleep(200_000);
	is(waiting_count(), 5 - $round, "round $round: the others are still waiting");
	$last = $winner;
}
is(scalar(keys %won), 5, 'every waiter won exactly once');
my @sorted = sort { $a <=> $b } @lags;
diag(sprintf('wake-up after release over %d rounds: median %.2f ms, max %.2f ms',
	scalar @sorted, $sorted[ int($#sorted / 2) ], $sorted[-1]));
cmp_ok($sorted[ int($#sorted / 2) ], '<', 100,
	'sanity: the median wake-up follows the release within 100 ms (a missed wake-up would cost up to a second)');
is($node->safe_psql('postgres', q{SELECT generation FROM hoplock_holder('race')}), '6',
	'six terms: the holder\'s and one per waiter');

# --- A waiter that times out leaves nothing behind -------------------------
my ($h, $out) = start_waiter('late', '300 ms');
$h->finish;
is($$out, "timeout\n", 'a waiter whose timeout passes gets NULL');
$node->safe_psql('postgres', "SELECT hoplock_release('race', '$last')");
is($node->safe_psql('postgres', q{SELECT hoplock_holder('race') IS NULL}), 't',
	'and it took nothing afterwards');

# --- A terminated waiter -----------------------------------------------------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('race', 'holder', '1 h')});
($h, $out) = start_waiter('doomed', '60 s');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%hoplock_wait(''race''%' AND state = 'active' AND pid <> pg_backend_pid()})
  or die 'waiter did not start';
$node->safe_psql('postgres',
	q{SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%hoplock_wait(''race'', ''doomed''%' AND pid <> pg_backend_pid()});
$h->finish;
like($$out, qr/terminating connection due to administrator command/, 'pg_terminate_backend ends a wait');
($h, $out) = start_waiter('next', '60 s');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%hoplock_wait(''race''%' AND state = 'active' AND pid <> pg_backend_pid()})
  or die 'waiter did not start';
$node->safe_psql('postgres', q{SELECT hoplock_release('race', 'holder')});
$h->finish;
like($$out, qr/^next \d+$/, 'and the next waiter is woken as usual');
$node->stop;

# --- Without shared_preload_libraries --------------------------------------
my $plain = PostgreSQL::Test::Cluster->new('plain');
$plain->init;
$plain->start;
$plain->safe_psql('postgres', 'CREATE EXTENSION hoplock');
is($plain->safe_psql('postgres', 'SELECT count(*) FROM hoplock_workers'), '0',
	'without shared_preload_libraries there is no worker');
$plain->safe_psql('postgres', q{SELECT hoplock_acquire('poll', 'a', '1 h')});
my ($stdout, $stderr) = ('', '');
my $poller = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $plain->connstr('postgres'),
		'-c', q{SELECT hoplock_wait('poll', 'x', '1 h', '100 ms') IS NULL},
		'-c', q{SELECT owner FROM hoplock_wait('poll', 'b', '1 h', '30 s')}
	],
	'>', \$stdout, '2>', \$stderr);
sleep 1;
$plain->safe_psql('postgres', q{SELECT hoplock_release('poll', 'a')});
$poller->finish;
is($stdout, "t\nb\n", 'without shared_preload_libraries hoplock_wait still works, by polling');
my @notices = ($stderr =~ /NOTICE:  hoplock_wait is polling for lease changes/g);
is(scalar @notices, 1, 'and says so once per session');
is($plain->safe_psql('postgres', q{SELECT generation FROM hoplock_holder('poll')}), '2',
	'the other calls work as usual');
$plain->stop;

done_testing();
