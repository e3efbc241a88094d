# Restarts: a term that lapses while the server is down is announced once,
# after the next start; a worker killed with SIGKILL takes the server
# through a crash-restart, after which the worker is back and catches up,
# and session-bound terms of the sessions that died end.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Hoplock::Crash;
use Hoplock::Listener;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
hoplock.log_events = on
restart_after_crash = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub expired_lines
{
	my ($name) = @_;
	my @lines = slurp_file($node->logfile) =~ /(hoplock: lease "\Q$name\E" expired.*)$/mg;
	return scalar @lines;
}

sub wait_for_worker
{
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM hoplock_workers WHERE state = 'sleeping'})
	  or die 'no worker';
}

# --- Lapsing while the server is down ----------------------------------------
wait_for_worker();
$node->safe_psql('postgres', q{SELECT hoplock_acquire('down', 'a', '2 s')});
$node->stop('immediate');
sleep 3;
$node->start;
$node->poll_query_until('postgres',
	q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'down'})
  or die 'not announced after restart';
pass('a term that lapsed while the server was down is announced after the start');
is(expired_lines('down'), 1, 'its expired event is in the log, once');

# Once announced, it stays announced: another restart sends nothing more.
$node->restart;
wait_for_worker();
sleep 1;
is(expired_lines('down'), 1, 'a further restart does not announce it again');

# --- A lapse at the same instant as an immediate shutdown -------------------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('edge-' || i, 'a', (i * 10 || ' ms')::interval) FROM generate_series(1, 100) AS i});
$node->stop('immediate');
$node->start;
$node->poll_query_until('postgres',
	q{SELECT count(*) = 100 FROM hoplock_internal.lease WHERE name LIKE 'edge-%' AND state = 'x'})
  or die 'not all announced';
my $dupes = 0;
$dupes += (expired_lines("edge-$_") != 1) for 1 .. 100;
is($dupes, 0, 'terms lapsing around an immediate shutdown are each announced exactly once');

# --- SIGKILL of the worker ---------------------------------------------------
wait_for_worker();
my $listener = Hoplock::Listener->new($node, 'postgres');
$node->safe_psql('postgres', q{SELECT hoplock_acquire('killed', 'a', '1 s')});
my $pid = $node->safe_psql('postgres', 'SELECT pid FROM hoplock_workers');
# a session-bound term whose session will die in the crash-restart
my $bound = $node->background_psql('postgres');
$bound->query_safe(q{SELECT hoplock_acquire('bound', 'b', '1 h', session_bound => true)});
kill_and_wait_for_restart($node, $pid);
$node->poll_query_until('postgres',
	q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'killed'})
  or die 'not announced after crash-restart';
pass('after a SIGKILLed worker the server came back and the lapsed term was announced');
ok($node->log_contains("terminated by signal 9: Killed"), 'the kill was a crash');
is(expired_lines('killed'), 1, 'announced once');
$node->poll_query_until('postgres',
	q{SELECT hoplock_holder('bound') IS NULL})
  or die 'session-bound term not ended';
is($node->safe_psql('postgres', q{SELECT state FROM hoplock_internal.lease WHERE name = 'bound'}),
	'r', 'the crash-restart ended the session-bound term of a session that died in it');
my $bound_gen = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_history WHERE name = 'bound'});
like(slurp_file($node->logfile), qr/hoplock: lease "bound" released, generation $bound_gen\b/,
	'with a released event');
eval { $bound->quit };

$listener->disconnect;
$node->stop;
done_testing();
