# Who may hold a lease up, and for how long.  A sleeping hoplock_wait holds
# no lock on the lease table, so VACUUM FULL does not queue behind it, and
# an unrelated leader's renewal is not held up either.  The ttl bounds a
# hung holder: a session that keeps a lapsed term's fence, or an
# uncommitted renewal of it, for longer than hoplock.hung_holder_timeout
# after the term lapsed is ended by the expiry worker, and hoplock_leases
# shows who held it up meanwhile.  A term change still in flight is left
# alone.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);
use Hoplock::Listener;

my $node = PostgreSQL::Test::Cluster->new('holders');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.hung_holder_timeout = '1s'
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE state = 'sleeping'})
  or die 'no worker';

# --- A sleeping waiter holds no lock --------------------------------------------
$node->safe_psql('postgres', q{
	SELECT hoplock_acquire('W', 'holder', '1 h');
	SELECT hoplock_acquire('other', 'leader', '1 h');
});
my $waiter = $node->background_psql('postgres');
$waiter->query_until(qr/waiting/, q{
	\echo waiting
	SELECT generation FROM hoplock_wait('W', 'w1', '1 h', '60 s');
});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity
	   WHERE wait_event_type = 'Extension' AND query LIKE '%hoplock_wait(%'})
  or die 'the waiter never slept';
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM pg_locks AS l JOIN pg_stat_activity AS a USING (pid)
	 WHERE a.query LIKE '%hoplock_wait(%' AND l.locktype = 'relation'
	   AND l.relation IN ('hoplock_internal.lease'::regclass,
	                      'hoplock_internal.lease_pkey'::regclass)}),
	'0', 'a sleeping hoplock_wait holds no lock on the lease table');
my $t0 = time();
$node->safe_psql('postgres', 'VACUUM FULL hoplock_internal.lease');
cmp_ok(time() - $t0, '<', 2, 'VACUUM FULL does not wait for the sleeper');
is($node->safe_psql('postgres', q{SELECT generation FROM hoplock_renew('other', 'leader', '1 h')}),
	'1', 'an unrelated leader renews meanwhile');
$node->safe_psql('postgres', q{SELECT hoplock_release('W', 'holder')});
like($waiter->query_safe(''), qr/^2$/m, 'and the waiter gets the lease when it is released');
$waiter->quit;

# --- A hung holder with an uncommitted renewal ----------------------------------
my $listener = Hoplock::Listener->new($node, 'postgres');
my $hung = $node->background_psql('postgres', on_error_stop => 0);
my $hung_pid = $hung->query_safe('SELECT pg_backend_pid()');
$hung->query_safe(q{SELECT hoplock_acquire('hung', 'h', '1 s')});
$hung->query_safe(q{BEGIN});
$hung->query_safe(q{SELECT hoplock_renew('hung', 'h', '1 s')});
# idle in transaction from here on, its renewal uncommitted
usleep(200_000);
is($node->safe_psql('postgres', q{SELECT blocked_by FROM hoplock_leases WHERE name = 'hung'}),
	$hung_pid, 'hoplock_leases shows the session holding the lease up');
$t0 = time();
$node->poll_query_until('postgres',
	q{SELECT generation FROM hoplock_acquire('hung', 'taker', '1 h')}, '2')
  or die 'never taken over';
my $took = time() - $t0;
cmp_ok($took, '<', 4,
	sprintf('the lease is taken over %.1f s later (ttl 1 s + hung_holder_timeout 1 s)', $took));
ok(!$node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $hung_pid"),
	'the hung session was ended');
like(slurp_file($node->logfile),
	qr/terminating process $hung_pid, which holds up lease 'hung' \(generation 1\) after it lapsed/,
	'the worker says whom it ended, and why');
my $events = $listener->collect(3,
	sub { grep { $_->{name} eq 'hung' && $_->{event} eq 'acquired' && $_->{generation} == 2 } @{ $_[0] } });
is(join(' ', map { "$_->{event}($_->{generation})" } grep { $_->{name} eq 'hung' } @$events),
	'acquired(1) expired(1) acquired(2)', 'the events of the lease are well formed');
eval { $hung->quit };

# --- A hung holder with an open fence --------------------------------------------
my $fencer = $node->background_psql('postgres', on_error_stop => 0);
my $fencer_pid = $fencer->query_safe('SELECT pg_backend_pid()');
$fencer->query_safe(q{SELECT hoplock_acquire('fenced', 'f', '1 s')});
$fencer->query_safe(q{BEGIN});
$fencer->query_safe(q{SELECT hoplock_fence('fenced', 1)});
my $follower = $node->background_psql('postgres');
$t0 = time();
$follower->query_until(qr/waiting/, q{
	\echo waiting
	SELECT generation FROM hoplock_wait('fenced', 'follower', '1 h', '30 s');
});
like($follower->query_safe(''), qr/^2$/m, 'the follower waiting behind the fence gets the lease');
$took = time() - $t0;
cmp_ok($took, '<', 4, sprintf('%.1f s later (ttl 1 s + hung_holder_timeout 1 s)', $took));
ok(!$node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $fencer_pid"),
	'the session holding the lapsed fence was ended');
$follower->quit;
eval { $fencer->quit };

# --- A term change in flight is left alone ---------------------------------------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('inflight', 'old', '200 ms')});
usleep(300_000);
my $acquirer = $node->background_psql('postgres');
my $acquirer_pid = $acquirer->query_safe('SELECT pg_backend_pid()');
$acquirer->query_safe(q{BEGIN});
is($acquirer->query_safe(q{SELECT generation FROM hoplock_acquire('inflight', 'new', '1 h')}),
	'2', 'a new term is begun in a transaction that goes on');
sleep 3;
ok($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $acquirer_pid"),
	'the session beginning it is not ended');
is($node->safe_psql('postgres', q{SELECT blocked_by FROM hoplock_leases WHERE name = 'inflight'}),
	$acquirer_pid, 'but hoplock_leases shows it holding the lease up');
$acquirer->query_safe('COMMIT');
is($node->safe_psql('postgres', q{SELECT owner || '/' || generation FROM hoplock_holder('inflight')}),
	'new/2', 'and its term begins when it commits');
$acquirer->quit;

# --- hung_holder_timeout = 0: nobody is ended -------------------------------------
$node->append_conf('postgresql.conf', "hoplock.hung_holder_timeout = 0");
$node->reload;
sleep 1;
my $keeper = $node->background_psql('postgres', on_error_stop => 0);
my $keeper_pid = $keeper->query_safe('SELECT pg_backend_pid()');
$keeper->query_safe(q{SELECT hoplock_acquire('kept', 'k', '300 ms')});
$keeper->query_safe(q{BEGIN});
$keeper->query_safe(q{SELECT hoplock_fence('kept', 1)});
sleep 2;
ok($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $keeper_pid"),
	'with hung_holder_timeout = 0 the worker ends no session');
$keeper->query_safe('ROLLBACK');
$keeper->quit;

$listener->disconnect;
$node->stop;
done_testing();
