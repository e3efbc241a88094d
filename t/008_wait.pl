# hoplock_wait across sessions: several waiters race for a released lease,
# one wins at once and the others sleep on until their turn or timeout;
# wake-ups follow the release within milliseconds (a sanity bound here;
# bench/ measures), and those of a forget too.  A waiter whose client was
# killed is never granted a term, and its backend exits within about a
# second.  Without shared_preload_libraries it still works, by polling,
# and says so once per session.
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
# (the holder's generation as its ordinal among the name's terms)
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_history
	WHERE name = 'race' AND generation <= (SELECT generation FROM hoplock_holder('race'))}), '6',
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

# --- A forget wakes the waiters of the name ---------------------------------
# A waiter that finds a released name being forgotten (the delete not yet
# committed) cannot take it until the forget commits, which wakes it: within
# milliseconds, not at its next try a second later.
my @forget_lags;
for my $round (1 .. 3)
{
	$node->safe_psql('postgres',
		q{SELECT hoplock_acquire('fg', 'a', '1 h'); SELECT hoplock_release('fg', 'a')});
	my $forgetter = $node->background_psql('postgres');
	$forgetter->query_safe(q{BEGIN; SELECT hoplock_forget('fg')});
	my $fout = '';
	my $fh = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
			"SELECT (extract(epoch FROM acquired_at) * 1e6)::bigint FROM hoplock_wait('fg', 'b', '1 h', '30 s')"
		],
		'>', \$fout, '2>&1');
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%hoplock_wait(''fg''%' AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()})
	  or die 'waiter did not start';
	# somewhere in its one-second retry, whatever the phase
	usleep(int(rand(500_000)));
	my $committed = $forgetter->query_safe(
		q{SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint; COMMIT});
	$forgetter->quit;
	$fh->finish;
	like($fout, qr/^\d+$/, "round $round: the waiter took the forgotten name");
	push @forget_lags, ($fout - $committed) / 1000.0 if $fout =~ /^\d+$/;
	$node->safe_psql('postgres', q{SELECT hoplock_release('fg', 'b')});
}
diag(sprintf('wake-up after a forget: %s ms', join(', ', map { sprintf('%.1f', $_) } @forget_lags)));
cmp_ok((sort { $b <=> $a } @forget_lags)[0] // 1e9, '<', 200,
	'the forget\'s commit wakes the waiter (not its next try, up to a second later)');
# --- A term begun in a subtransaction that rolls back ----------------------
# A brand-new name's first term, begun under a savepoint and rolled back to
# it while the transaction goes on: the waiter, which saw that term in
# flight (held for an hour), is woken by the rollback, not by the end of the
# transaction nor by its own deadline.
{
	my $sub = $node->background_psql('postgres');
	$sub->query_safe(q{BEGIN; SAVEPOINT s; SELECT hoplock_acquire('sx', 'a', '1 h')});
	my $sout = '';
	my $sh = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
			"SELECT coalesce((extract(epoch FROM acquired_at) * 1e6)::bigint::text, 'timeout') FROM hoplock_wait('sx', 'b', '1 h', '20 s')"
		],
		'>', \$sout, '2>&1');
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%hoplock_wait(''sx''%' AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()})
	  or die 'waiter did not start';
	my $rolled_back = $sub->query_safe(
		q{ROLLBACK TO s; SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint});
	$sh->finish;
	like($sout, qr/^\d+$/, 'the waiter took the name whose term was rolled back');
	my $lag = $sout =~ /^\d+$/ ? ($sout - $rolled_back) / 1000.0 : 1e9;
	diag(sprintf('wake-up after ROLLBACK TO SAVEPOINT: %.1f ms', $lag));
	cmp_ok($lag, '<', 1000, 'woken by the rollback to the savepoint, the transaction still open');
	$sub->query_safe('COMMIT');
	$sub->quit;
	$node->safe_psql('postgres', q{SELECT hoplock_release('sx', 'b')});
}

# --- A waiter whose client has gone is never granted a term --------------
# The client of a waiting backend is killed (kill -9: no Terminate message,
# the socket just closes).  The backend notices within a second, or before
# it would take a term, and ends with "connection to client lost", as a
# backend with client_connection_check_interval does, though that is not
# set: it never begins a term nobody would lead in.

# A waiting psql for lease 'cl' as $owner: (handle, output, psql's pid,
# the backend's pid).
sub start_cl_waiter
{
	my ($owner, $timeout) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
			"SELECT owner || ' ' || (extract(epoch FROM acquired_at) * 1e6)::bigint FROM hoplock_wait('cl', '$owner', '10 s', '$timeout')"
		],
		'>', \$out, '2>&1');
	my $backend;
	for (1 .. 3000)
	{
		$backend = $node->safe_psql('postgres',
			"SELECT pid FROM pg_stat_activity WHERE query LIKE '%hoplock_wait(''cl'', ''$owner''%' AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()");
		last if $backend ne '';
		usleep(10_000);
	}
	die "waiter $owner did not start" if $backend eq '';
	return ($h, \$out, $h->{KIDS}[0]{PID}, $backend);
}

# Seconds until backend $pid has exited (undef: not within $limit s).
sub time_to_exit
{
	my ($pid, $t0, $limit) = @_;
	while (time() - $t0 < $limit)
	{
		return time() - $t0
		  if $node->safe_psql('postgres',
			"SELECT count(*) FROM pg_stat_activity WHERE pid = $pid") eq '0';
		usleep(10_000);
	}
	return undef;
}

my @exit_times;
for my $round (1 .. 3)
{
	my $offset = -s $node->logfile;
	$node->safe_psql('postgres', q{SELECT hoplock_acquire('cl', 'leader', '1 h')});
	my $gen = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_holder('cl')});

	# 1. released the moment the client is killed: the backend, woken by
	# the release, must see its client gone before it takes the term; a
	# live waiter after it gets the lease
	my ($dh, $dout, $dpsql, $dbackend) = start_cl_waiter("dead$round", '60 s');
	kill 'KILL', $dpsql;
	my $t0 = time();
	$node->safe_psql('postgres', q{SELECT hoplock_release('cl', 'leader')});
	$dh->finish;
	my $exited = time_to_exit($dbackend, $t0, 10);
	ok(defined $exited, "round $round: the backend of a killed waiter exits");
	is($node->safe_psql('postgres',
		q{SELECT owner FROM hoplock_wait('cl', 'live', '1 h', '5 s')}), 'live', "round $round: a live waiter gets the lease at once");
	is($node->safe_psql('postgres',
		"SELECT string_agg(owner, ',' ORDER BY generation) FROM hoplock_history WHERE name = 'cl' AND generation > $gen"),
		'live', "round $round: the killed waiter's backend began no term");
	ok($node->log_contains(qr/FATAL:  connection to client lost/, $offset),
		"round $round: it ended with \"connection to client lost\"");
	$node->safe_psql('postgres', q{SELECT hoplock_release('cl', 'live')});

	# 2. nothing happens to the lease: the backend still notices within
	# about a second
	$node->safe_psql('postgres', q{SELECT hoplock_acquire('cl', 'leader', '1 h')});
	$gen = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_holder('cl')});
	($dh, $dout, $dpsql, $dbackend) = start_cl_waiter("idle$round", '60 s');
	my ($lh, $lout) = start_cl_waiter("next$round", '30 s');
	kill 'KILL', $dpsql;
	$t0 = time();
	$dh->finish;
	$exited = time_to_exit($dbackend, $t0, 10);
	ok(defined $exited && $exited < 2.5,
		"round $round: a killed waiter's backend exits within about a second, the lease unchanged");
	push @exit_times, $exited if defined $exited;
	$node->safe_psql('postgres', q{SELECT hoplock_release('cl', 'leader')});
	$lh->finish;
	like($$lout, qr/^next$round \d+$/, "round $round: the live waiter then gets it");
	is($node->safe_psql('postgres',
		"SELECT string_agg(owner, ',' ORDER BY generation) FROM hoplock_history WHERE name = 'cl' AND generation > $gen"),
		"next$round", "round $round: and only it");
	$node->safe_psql('postgres', "SELECT hoplock_release('cl', 'next$round')");
}
diag(sprintf('killed client to backend exit, lease unchanged: %s s',
	join(', ', map { sprintf('%.2f', $_) } @exit_times)));

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
is($plain->safe_psql('postgres', q{SELECT count(*) FROM hoplock_history
	WHERE name = 'poll' AND generation <= (SELECT generation FROM hoplock_holder('poll'))}), '2',
	'the other calls work as usual');
$plain->stop;

done_testing();
