# Events are sent by the worker after the commits that recorded them: a
# listener sees every committed event, by number, in number order, and no
# rolled-back one -- under churn from many clients, across a worker killed
# while it sends, and across a server crash between the commits and their
# sending.  hoplock_watch serves several sessions, wakes at the commit,
# times out, and can be cancelled.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use FindBin;
use lib "$FindBin::RealBin/lib";
use Hoplock::Listener;

my $churn_seconds = $ENV{HOPLOCK_CHURN_SECONDS} // 10;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
max_connections = 60
# 10,000 term changes in one transaction below: each holds its lease's
# lock until the commit (the lock table is sized differently by version)
max_locks_per_transaction = 256
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

# Every event committed after $from, by number (hoplock_events reads the log)
sub committed_after
{
	my ($from) = @_;
	return [ split /\n/,
		$node->safe_psql('postgres', "SELECT seq FROM hoplock_events($from) ORDER BY seq") ];
}

# Wait until the listener has every one of @$want; returns the seqs it got,
# in the order it got them.
sub received
{
	my ($listener, $want, $timeout) = @_;
	my %want = map { $_ => 1 } @$want;
	my $events = $listener->collect(
		$timeout,
		sub {
			my %got = map { $_->{seq_text} => 1 } @{ $_[0] };
			return !grep { !$got{$_} } keys %want;
		});
	return [ map { $_->{seq_text} } @$events ];
}

# The numbers received, checked against those committed: none missing,
# none that is not a committed event, the first arrival of each in number
# order.  Returns how many arrived more than once.
sub check_stream
{
	my ($label, $got, $want) = @_;
	my %want = map { $_ => 1 } @$want;
	my %seen;
	my @first = grep { !$seen{$_}++ } @$got;
	my @missing = grep { !$seen{$_} } @$want;
	my @foreign = grep { !$want{$_} } @first;
	is(scalar @missing, 0, "$label: no committed event missing")
	  or diag('missing: ' . join(' ', @missing[0 .. ($#missing < 5 ? $#missing : 4)]));
	is(scalar @foreign, 0, "$label: nothing but committed events")
	  or diag('not committed: ' . join(' ', @foreign[0 .. ($#foreign < 5 ? $#foreign : 4)]));
	my @sorted = sort { $a <=> $b } @first;
	is_deeply(\@first, \@sorted, "$label: in number order");
	return scalar(@$got) - scalar(@first);
}

# --- Churn: 16 clients change terms, some roll back -------------------------
my $from = $node->safe_psql('postgres', 'SELECT hoplock_position()');
my $listener = Hoplock::Listener->new($node, 'postgres');
my $script = $node->basedir . '/churn.sql';
PostgreSQL::Test::Utils::append_to_file($script, q{
SELECT hoplock_acquire('job-' || :client_id, 'c' || :client_id, '1 min');
SELECT hoplock_release('job-' || :client_id, 'c' || :client_id);
BEGIN;
SELECT hoplock_acquire('rolled-back-' || :client_id, 'c' || :client_id, '1 min');
ROLLBACK;
});
$node->command_ok(
	[
		'pgbench', '-n', '-c', '16', '-j', '4', '-T', $churn_seconds,
		'-f', $script, '-h', $node->host, '-p', $node->port, 'postgres'
	],
	"16 clients change terms for $churn_seconds s");
my $want = committed_after($from);
cmp_ok(scalar @$want, '>', 1000, 'they committed many events (' . scalar(@$want) . ')');
my $got = received($listener, $want, 60);
my $repeats = check_stream('churn', $got, $want);
is($repeats, 0, 'churn: nothing sent twice while the worker ran');
ok(!grep({ $_->{name} =~ /^rolled-back-/ } @{ $listener->{events} }),
	'churn: no event of a rolled-back change');
$listener->reset;

my ($delivered, $deliveries) = split /\|/, $node->safe_psql('postgres',
	'SELECT events_delivered, deliveries FROM hoplock_stats');
cmp_ok($delivered, '>=', scalar @$want, 'hoplock_stats counts the events sent');
cmp_ok($deliveries, '<', $delivered, 'in fewer transactions than events (batched)');
diag(sprintf('%d events in %d delivery transactions', $delivered, $deliveries));

# --- The worker is terminated while it sends ---------------------------------
# Sending is held back (maintenance locks the delivery table), 20,000
# events commit, then the lock goes and the worker is terminated while it
# sends (20 batches); its successor goes on from the recorded position.
$from = $node->safe_psql('postgres', 'SELECT hoplock_position()');
my $locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE hoplock_internal.delivery IN ACCESS EXCLUSIVE MODE');
$node->safe_psql('postgres', q{
	SELECT count(*) FROM generate_series(1, 10000) AS i,
	       LATERAL (SELECT hoplock_acquire('k-' || i, 'k', '1 min'),
	                       hoplock_release('k-' || i, 'k')) AS t});
my $worker = $node->safe_psql('postgres',
	q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'});
$locker->query_safe('COMMIT');
usleep(5_000);
$node->safe_psql('postgres', "SELECT pg_terminate_backend($worker)");
$locker->quit;
$want = committed_after($from);
is(scalar @$want, 20000, '20,000 events committed while sending was held');
$got = received($listener, $want, 60);
$repeats = check_stream('worker terminated', $got, $want);
diag("worker terminated while sending: $repeats events sent twice");
isnt($node->safe_psql('postgres',
		q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'}), $worker,
	'a new worker sent them');
$listener->reset;

# --- The server crashes after the commits, before the sending ----------------
# Sending is held back, 1,000 events commit, the server crashes.  After the
# restart (no worker until the listener is there) every one is sent.
$from = $node->safe_psql('postgres', 'SELECT hoplock_position()');
$node->safe_psql('postgres', q{ALTER SYSTEM SET hoplock.databases = 'none-yet'});
$locker = $node->background_psql('postgres');
$locker->query_safe('BEGIN; LOCK TABLE hoplock_internal.delivery IN ACCESS EXCLUSIVE MODE');
$node->safe_psql('postgres', q{
	SELECT count(*) FROM generate_series(1, 500) AS i,
	       LATERAL (SELECT hoplock_acquire('crash-' || i, 'k', '1 min'),
	                       hoplock_release('crash-' || i, 'k')) AS t});
$listener->disconnect;
$node->stop('immediate');
eval { $locker->quit };
$node->start;
$want = committed_after($from);
$listener = Hoplock::Listener->new($node, 'postgres');
cmp_ok($node->safe_psql('postgres', 'SELECT delivered FROM hoplock_internal.delivery'),
	'<=', $from, 'none of them was sent before the crash');
$node->safe_psql('postgres', q{ALTER SYSTEM RESET hoplock.databases; SELECT pg_reload_conf()});
$got = received($listener, $want, 60);
is(scalar @$want, 1000, '1,000 events committed before the crash');
check_stream('crash', $got, $want);
$listener->reset;

# --- hoplock_watch ------------------------------------------------------------
# Three sessions watch from the same number: one commit wakes them all.
$from = $node->safe_psql('postgres', 'SELECT hoplock_position()');
my @watchers;
for my $i (1 .. 3)
{
	my $out = '';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
			"SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint || ' ' || string_agg(event || ':' || name, ',' ORDER BY seq) FROM hoplock_watch($from, '30 s')"
		],
		'>', \$out, '2>&1');
	push @watchers, [ $h, \$out ];
}
$node->poll_query_until('postgres',
	q{SELECT count(*) = 3 FROM pg_stat_activity WHERE query LIKE '%hoplock_watch(%' AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()})
  or die 'watchers did not start';
my $committed = $node->safe_psql('postgres', q{
	SELECT hoplock_acquire('watched', 'w', '1 min');
	SELECT (extract(epoch FROM clock_timestamp()) * 1e6)::bigint});
$committed = (split /\n/, $committed)[-1];
my @lags;
for my $w (@watchers)
{
	$w->[0]->finish;
	chomp(my $line = ${ $w->[1] });
	my ($at, $events) = split / /, $line;
	is($events, 'acquired:watched', 'a watcher got the event');
	push @lags, ($at - $committed) / 1000.0 if $at =~ /^\d+$/;
}
diag(sprintf('watchers woken %s ms after the commit', join(', ', map { sprintf('%.1f', $_) } @lags)));
cmp_ok((sort { $b <=> $a } @lags)[0] // 1e9, '<', 1000, 'woken by the commit, not by a poll');

# A watch with nothing to return waits out its timeout, and returns nothing.
$from = $node->safe_psql('postgres', 'SELECT hoplock_position()');
my $t0 = time();
is($node->safe_psql('postgres', "SELECT count(*) FROM hoplock_watch($from, '300 ms')"),
	'0', 'a watch times out with nothing');
cmp_ok(time() - $t0, '>=', 0.3, 'after its timeout');

# A watch is cancelled like any statement, and holds no lock meanwhile.
my $cout = '';
my $ch = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
	  "SELECT count(*) FROM hoplock_watch($from, '30 s')" ],
	'>', \$cout, '2>&1');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%hoplock_watch(%' AND wait_event_type = 'Extension' AND pid <> pg_backend_pid()})
  or die 'watcher did not start';
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid)
	 WHERE a.query LIKE '%hoplock_watch(%' AND l.locktype = 'relation'
	   AND a.pid <> pg_backend_pid()}), '0', 'a sleeping watch holds no relation lock');
$node->safe_psql('postgres', q{
	SELECT pg_cancel_backend(pid) FROM pg_stat_activity
	 WHERE query LIKE '%hoplock_watch(%' AND pid <> pg_backend_pid()});
$ch->finish;
like($cout, qr/canceling statement due to user request/, 'a watch is cancelled');

$node->stop;
done_testing();
