# Who may hold a lease up, and for how long.  A sleeping hoplock_wait holds
# no lock on the lease table, so VACUUM FULL does not queue behind it, and
# an unrelated leader's renewal is not held up either.  The ttl bounds a
# hung holder: a session that keeps a lapsed term's fence, or an
# uncommitted renewal of it (or a lock on its row that a change waits
# for), for longer than hoplock.hung_holder_timeout
# after the term lapsed is ended by the expiry worker, and hoplock_leases
# shows who held it up meanwhile.  A term change still in flight is left
# alone, and so is a session whose role lacks the privileges of the term's
# role (another role's SECURITY DEFINER code fenced its term there).
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
my $g_w = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('W', 'holder', '1 h')});
my $g_other = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('other', 'leader', '1 h')});
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
	$g_other, 'an unrelated leader renews meanwhile (its term goes on)');
$node->safe_psql('postgres', q{SELECT hoplock_release('W', 'holder')});
my ($g_w2) = $waiter->query_safe('') =~ /^(\d+)$/m;
cmp_ok($g_w2 // 0, '>', $g_w, 'and the waiter gets the lease when it is released, in a new term');
is($node->safe_psql('postgres', q{SELECT owner || '/' || generation FROM hoplock_holder('W')}),
	'w1/' . ($g_w2 // ''), 'the term the waiter was given');
$waiter->quit;

# --- A hung holder with an uncommitted renewal ----------------------------------
my $listener = Hoplock::Listener->new($node, 'postgres');
my $hung = $node->background_psql('postgres', on_error_stop => 0);
my $hung_pid = $hung->query_safe('SELECT pg_backend_pid()');
my $g_hung = $hung->query_safe(q{SELECT generation FROM hoplock_acquire('hung', 'h', '1 s')});
$hung->query_safe(q{BEGIN});
$hung->query_safe(q{SELECT hoplock_renew('hung', 'h', '1 s')});
# idle in transaction from here on, its renewal uncommitted
usleep(200_000);
is($node->safe_psql('postgres', q{SELECT blocked_by FROM hoplock_leases WHERE name = 'hung'}),
	$hung_pid, 'hoplock_leases shows the session holding the lease up');
$t0 = time();
# (NULL while contended: the poll goes on)
$node->poll_query_until('postgres',
	qq{SELECT generation > $g_hung FROM hoplock_acquire('hung', 'taker', '1 h')})
  or die 'never taken over';
my $took = time() - $t0;
my $g_hung2 = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_holder('hung') WHERE owner = 'taker'});
cmp_ok($took, '<', 4,
	sprintf('the lease is taken over %.1f s later (ttl 1 s + hung_holder_timeout 1 s)', $took));
ok(!$node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $hung_pid"),
	'the hung session was ended');
like(slurp_file($node->logfile),
	qr/terminating process $hung_pid, which holds up lease 'hung' \(generation $g_hung\) after it lapsed/,
	'the worker says whom it ended, and why');
my $events = $listener->collect(3,
	sub { grep { $_->{name} eq 'hung' && $_->{event} eq 'acquired' && $_->{generation} == $g_hung2 } @{ $_[0] } });
is(join(' ', map { "$_->{event}($_->{generation})" } grep { $_->{name} eq 'hung' } @$events),
	"acquired($g_hung) expired($g_hung) acquired($g_hung2)", 'the events of the lease are well formed');
eval { $hung->quit };

# --- A hung holder with an open fence --------------------------------------------
my $fencer = $node->background_psql('postgres', on_error_stop => 0);
my $fencer_pid = $fencer->query_safe('SELECT pg_backend_pid()');
my $g_fenced = $fencer->query_safe(q{SELECT generation FROM hoplock_acquire('fenced', 'f', '1 s')});
$fencer->query_safe(q{BEGIN});
$fencer->query_safe(qq{SELECT hoplock_fence('fenced', $g_fenced)});
my $follower = $node->background_psql('postgres');
$t0 = time();
$follower->query_until(qr/waiting/, q{
	\echo waiting
	SELECT generation FROM hoplock_wait('fenced', 'follower', '1 h', '30 s');
});
my ($g_fenced2) = $follower->query_safe('') =~ /^(\d+)$/m;
cmp_ok($g_fenced2 // 0, '>', $g_fenced,
	'the follower waiting behind the fence gets the lease, in a new term');
$took = time() - $t0;
cmp_ok($took, '<', 4, sprintf('%.1f s later (ttl 1 s + hung_holder_timeout 1 s)', $took));
ok(!$node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $fencer_pid"),
	'the session holding the lapsed fence was ended');
$follower->quit;
eval { $fencer->quit };

# --- Two sessions hold a lapsed term up at once -----------------------------------
# A paused leader can hold its term up on two connections: a fence on one,
# an uncommitted renewal on the other.  The worker ends the first when
# hoplock.hung_holder_timeout is up, not at its next backoff retry (it was
# up to a second late with 5 s), and the second right after it, not a
# retry later (a second more).
$node->append_conf('postgresql.conf', "hoplock.hung_holder_timeout = '3s'");
$node->reload;
$node->poll_query_until('postgres', q{SELECT current_setting('hoplock.hung_holder_timeout') = '3s'})
  or die 'no reload';
usleep(200_000);    # the worker reads the file on its next loop
my $two_a = $node->background_psql('postgres', on_error_stop => 0);
my $two_b = $node->background_psql('postgres', on_error_stop => 0);
my $two_a_pid = $two_a->query_safe('SELECT pg_backend_pid()');
my $two_b_pid = $two_b->query_safe('SELECT pg_backend_pid()');
my ($g_two, $lapse) = split /\|/, $two_a->query_safe(
	q{SELECT generation || '|' || extract(epoch FROM expires_at) FROM hoplock_acquire('two', 't', '1 s')});
$two_a->query_safe(q{BEGIN});
$two_a->query_safe(qq{SELECT hoplock_fence('two', $g_two)});
$two_b->query_safe(q{BEGIN});
$two_b->query_safe(qq{SELECT generation FROM hoplock_renew('two', 't', '1 s', $g_two)});
$node->poll_query_until('postgres',
	qq{SELECT generation > $g_two FROM hoplock_acquire('two', 'taker', '1 h')}, 't')
  or die 'never taken over';
$took = time() - $lapse;
cmp_ok($took, '>=', 2.9, sprintf('taken over %.2f s after the lapse: not before hung_holder_timeout (3 s)', $took));
cmp_ok($took, '<', 3.6, sprintf('... and %.2f s, not a retry or two after it', $took));
is($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid IN ($two_a_pid, $two_b_pid)"),
	'0', 'both sessions holding the lapsed term up were ended');
eval { $two_a->quit };
eval { $two_b->quit };
$node->append_conf('postgresql.conf', "hoplock.hung_holder_timeout = '1s'");
$node->reload;
$node->poll_query_until('postgres', q{SELECT current_setting('hoplock.hung_holder_timeout') = '1s'})
  or die 'no reload';
usleep(200_000);

# --- A hung holder with a row lock that a change waits for ------------------------
# FOR SHARE on the lease row keeps the worker from announcing the lapse, as
# an uncommitted renewal would: it is named and ended alike.  FOR KEY SHARE
# (a foreign key referencing lease names) holds nothing up.
my $g_locked = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('locked', 'l', '1 s')});
my $locker = $node->background_psql('postgres', on_error_stop => 0);
my $locker_pid = $locker->query_safe('SELECT pg_backend_pid()');
$locker->query_safe(q{BEGIN});
$locker->query_safe(q{SELECT name FROM hoplock_internal.lease WHERE name = 'locked' FOR SHARE});
my $keysharer = $node->background_psql('postgres');
$keysharer->query_safe(q{BEGIN});
$keysharer->query_safe(q{SELECT name FROM hoplock_internal.lease WHERE name = 'locked' FOR KEY SHARE});
is($node->safe_psql('postgres', q{SELECT blocked_by FROM hoplock_leases WHERE name = 'locked'}),
	$locker_pid, 'hoplock_leases names the session holding FOR SHARE on the row');
$t0 = time();
$node->poll_query_until('postgres',
	qq{SELECT generation > $g_locked FROM hoplock_acquire('locked', 'taker', '1 h')})
  or die 'never taken over';
$took = time() - $t0;
cmp_ok($took, '<', 4, sprintf('the lease is taken over %.1f s later (ttl 1 s + hung_holder_timeout 1 s)', $took));
ok(!$node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $locker_pid"),
	'the session holding the row lock was ended');
$keysharer->query_safe('COMMIT');
$keysharer->quit;
eval { $locker->quit };

# --- A term change in flight is left alone ---------------------------------------
my $g_old = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('inflight', 'old', '200 ms')});
usleep(300_000);
my $acquirer = $node->background_psql('postgres');
my $acquirer_pid = $acquirer->query_safe('SELECT pg_backend_pid()');
$acquirer->query_safe(q{BEGIN});
my $g_new = $acquirer->query_safe(q{SELECT generation FROM hoplock_acquire('inflight', 'new', '1 h')});
cmp_ok($g_new, '>', $g_old, 'a new term is begun in a transaction that goes on');
sleep 3;
ok($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $acquirer_pid"),
	'the session beginning it is not ended');
is($node->safe_psql('postgres', q{SELECT blocked_by FROM hoplock_leases WHERE name = 'inflight'}),
	$acquirer_pid, 'but hoplock_leases shows it holding the lease up');
$acquirer->query_safe('COMMIT');
is($node->safe_psql('postgres', q{SELECT owner || '/' || generation FROM hoplock_holder('inflight')}),
	"new/$g_new", 'and its term begins when it commits');
$acquirer->quit;

# --- A term's role cannot have another role's session ended --------------------
# An ordinary role's SECURITY DEFINER code -- here the trigger of a table it
# lets others write -- fences its own term in a victim's transaction.  Its
# term lapses while the victim's transaction runs on: the worker must not
# end the victim's session on its behalf (its role could not end it with
# pg_terminate_backend either), nor a superuser's.
$node->safe_psql('postgres', q{
	CREATE ROLE trapper LOGIN;
	CREATE ROLE bystander LOGIN;
	CREATE SCHEMA trap AUTHORIZATION trapper;
	GRANT USAGE ON SCHEMA trap TO PUBLIC;
});
$node->safe_psql('postgres', q{
	CREATE TABLE trap.inbox (msg text);
	GRANT INSERT ON trap.inbox TO PUBLIC;
	CREATE FUNCTION trap.fence() RETURNS trigger LANGUAGE plpgsql
	    SECURITY DEFINER SET search_path = pg_catalog AS $$
	BEGIN
	    PERFORM public.hoplock_fence('trap', (public.hoplock_read('trap')).generation);
	    RETURN NEW;
	END $$;
	CREATE TRIGGER fence BEFORE INSERT ON trap.inbox
	    FOR EACH ROW EXECUTE FUNCTION trap.fence();
}, extra_params => [ '-U', 'trapper' ]);
for my $victim_role ('bystander', $node->safe_psql('postgres', 'SELECT current_user'))
{
	my $victim = $node->background_psql('postgres', on_error_stop => 0,
		extra_params => [ '-U', $victim_role ]);
	my $victim_pid = $victim->query_safe('SELECT pg_backend_pid()');
	$node->safe_psql('postgres', q{SELECT hoplock_acquire('trap', 'trapper', '300 ms')},
		extra_params => [ '-U', 'trapper' ]);
	$victim->query_safe('BEGIN');
	$victim->query_safe(q{INSERT INTO trap.inbox VALUES ('hello')});
	is($node->safe_psql('postgres', q{SELECT blocked_by FROM hoplock_leases WHERE name = 'trap'}),
		$victim_pid, "the $victim_role session holds the trapper's lapsing term up");
	sleep 3;
	ok($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $victim_pid"),
		"a $victim_role session holding another role's lapsed term is not ended");
	$victim->query_safe('COMMIT');
	$victim->quit;
	$node->poll_query_until('postgres',
		q{SELECT expired AND blocked_by IS NULL FROM hoplock_leases WHERE name = 'trap'})
	  or die 'the lapse was never announced';
}
like(slurp_file($node->logfile), qr/not ending process \d+, which holds up lease 'trap'/,
	'the worker says why it leaves the session alone');

# --- hung_holder_timeout = 0: nobody is ended -------------------------------------
$node->append_conf('postgresql.conf', "hoplock.hung_holder_timeout = 0");
$node->reload;
sleep 1;
my $keeper = $node->background_psql('postgres', on_error_stop => 0);
my $keeper_pid = $keeper->query_safe('SELECT pg_backend_pid()');
my $g_kept = $keeper->query_safe(q{SELECT generation FROM hoplock_acquire('kept', 'k', '300 ms')});
$keeper->query_safe(q{BEGIN});
$keeper->query_safe(qq{SELECT hoplock_fence('kept', $g_kept)});
sleep 2;
ok($node->safe_psql('postgres', "SELECT count(*) FROM pg_stat_activity WHERE pid = $keeper_pid"),
	'with hung_holder_timeout = 0 the worker ends no session');
$keeper->query_safe('ROLLBACK');
$keeper->quit;

$listener->disconnect;
$node->stop;
done_testing();
