# Session-bound terms end when their backend exits, whichever way it goes:
# disconnect, a client that dies, pg_terminate_backend; a waiter takes over
# at once.  The ttl still bounds a holder whose connection stays open but
# silent.  A term the exiting backend cannot end (fenced by another
# connection) is ended by the worker once it can be.  A session forgets the
# names whose terms ended, whoever ended them.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use Hoplock::Listener;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');
my $listener = Hoplock::Listener->new($node, 'postgres');

# A psql that acquires a session-bound term and stays connected.
sub bound_holder
{
	my ($name, $ttl) = @_;
	$ttl //= '1 h';
	my $in = "SELECT hoplock_acquire('$name', 'holder', '$ttl', session_bound => true) IS NOT NULL;\n";
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err);
	my $t0 = time();
	while ($out !~ /^t$/m && time() - $t0 < 30)
	{
		$h->pump_nb;
		usleep(10_000);
	}
	die "could not acquire $name: $err" unless $out =~ /^t$/m;
	my ($pid, $generation) = split /\|/, $node->safe_psql('postgres',
		"SELECT session_pid, generation FROM hoplock_internal.lease WHERE name = '$name'");
	return { h => $h, in => \$in, pid => $pid, generation => $generation };
}

sub released_within
{
	my ($name, $seconds) = @_;
	my $events = $listener->collect($seconds,
		sub { grep { $_->{event} eq 'released' && $_->{name} eq $name } @{ $_[0] } });
	my ($event) = grep { $_->{event} eq 'released' && $_->{name} eq $name } @$events;
	return $event;
}

# --- Disconnect ----------------------------------------------------------------
my $holder = bound_holder('quit');
${ $holder->{in} } .= "\\q\n";
my $t0 = time();
$holder->{h}->finish;
ok(released_within('quit', 5), 'a disconnect ends the session-bound term, with a released event');
cmp_ok(time() - $t0, '<', 2, 'at once');
is($node->safe_psql('postgres', q{SELECT hoplock_holder('quit') IS NULL}), 't', 'nobody holds it');
$listener->reset;

# --- The client dies --------------------------------------------------------
$holder = bound_holder('client-killed');
kill 'KILL', $holder->{h}{KIDS}[0]{PID};
ok(released_within('client-killed', 5), 'a client killed with SIGKILL: the backend sees EOF and ends the term');
eval { $holder->{h}->finish };
$listener->reset;

# --- pg_terminate_backend, with a waiter ready to take over ----------------
$holder = bound_holder('terminated');
my ($wout, $werr) = ('', '');
my $waiter = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		q{SELECT owner || ' ' || generation FROM hoplock_wait('terminated', 'successor', '1 h', '30 s')}
	],
	'>', \$wout, '2>', \$werr);
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%hoplock_wait(''terminated''%' AND state = 'active' AND pid <> pg_backend_pid()})
  or die 'waiter did not start';
$t0 = time();
$node->safe_psql('postgres', "SELECT pg_terminate_backend($holder->{pid})");
$waiter->finish;
my $took = time() - $t0;
# the waiter's term is a new one, above the terminated holder's
like($wout, qr/^successor (\d+)\n\z/, 'pg_terminate_backend ends the term and the waiter takes over');
my ($successor) = $wout =~ /^successor (\d+)$/m;
cmp_ok($successor // 0, '>', $holder->{generation},
	"with a generation above the terminated holder's ($holder->{generation})");
is($node->safe_psql('postgres', q{SELECT owner || ' ' || generation FROM hoplock_holder('terminated')}),
	"successor " . ($successor // ''), 'the server holds the term the waiter was given');
cmp_ok($took, '<', 2, sprintf('within %.0f ms of the termination', $took * 1000));
eval { $holder->{h}->finish };
$listener->reset;

# --- The ttl still bounds a silent connection --------------------------------
$holder = bound_holder('silent', '300 ms');
my $events = $listener->collect(5,
	sub { grep { $_->{event} eq 'expired' && $_->{name} eq 'silent' } @{ $_[0] } });
ok((grep { $_->{event} eq 'expired' && $_->{name} eq 'silent' } @$events),
	'a connected but silent holder loses the term at its ttl (expired)');
${ $holder->{in} } .= "\\q\n";
$holder->{h}->finish;
$events = $listener->collect(1);
is(scalar(grep { $_->{name} eq 'silent' && $_->{event} eq 'released' } @$events), 0,
	'and its exit later sends no released for the term that already expired');
$listener->reset;

# --- Extending keeps or moves the binding ------------------------------------
$holder = bound_holder('extended');
$node->safe_psql('postgres', q{SELECT hoplock_acquire('extended', 'holder', '1 h')});
is($node->safe_psql('postgres', q{SELECT session_pid FROM hoplock_internal.lease WHERE name = 'extended'}),
	$holder->{pid}, 'an extension without session_bound keeps the binding');
${ $holder->{in} } .= "\\q\n";
$holder->{h}->finish;
ok(released_within('extended', 5), 'so the original session\'s exit still ends it');
$listener->reset;

# --- A fenced term the exiting backend cannot end ----------------------------
$holder = bound_holder('fenced');
my $fencer = $node->background_psql('postgres');
$fencer->query_safe("BEGIN; SELECT hoplock_fence('fenced', $holder->{generation})");
${ $holder->{in} } .= "\\q\n";
$holder->{h}->finish;
$events = $listener->collect(1);
is(scalar(grep { $_->{name} eq 'fenced' && $_->{event} eq 'released' } @$events), 0,
	'while a fence of the term is open, the exiting backend cannot end it');
$fencer->query_safe('COMMIT');
ok(released_within('fenced', 5), 'the worker ends it as soon as the fence is gone');
$fencer->quit;

# --- A session forgets the names whose terms ended ---------------------------
# One session binds two terms it keeps, then 5,000 more, each ended in its
# own transaction (released, or force-released): the names it remembers
# stay few, and the two it kept still end when it exits.
$listener->reset;
my $churner = $node->background_psql('postgres');
$churner->query_safe(q{
SELECT hoplock_acquire('kept-' || i, 'holder', '1 h', session_bound => true) IS NOT NULL
  FROM generate_series(1, 2) AS i});
$churner->query_safe(q{
DO $$
BEGIN
	FOR i IN 1..5000 LOOP
		PERFORM hoplock_acquire('churn-' || i, 'holder', '1 h', session_bound => true);
		COMMIT;
		IF i % 2 = 0 THEN
			PERFORM hoplock_release('churn-' || i, 'holder');
		ELSE
			PERFORM hoplock_force_release('churn-' || i);
		END IF;
		COMMIT;
	END LOOP;
END
$$});
is($node->safe_psql('postgres',
	q{SELECT count(*) FROM hoplock_internal.lease WHERE name LIKE 'churn-%' AND state = 'r'}),
	5000, 'a session began and ended 5,000 session-bound terms');
SKIP:
{
	skip 'pg_backend_memory_contexts needs PostgreSQL 14', 1
	  if $node->safe_psql('postgres', 'SHOW server_version_num') < 140000;
	my $bytes = $churner->query_safe(q{
SELECT coalesce(sum(total_bytes), 0) FROM pg_backend_memory_contexts
 WHERE 'hoplock session-bound names' IN (name, ident)});
	cmp_ok($bytes, '<', 100_000, "and remembers only the few it may still hold ($bytes bytes)");
}
$churner->quit;
my $ended = $listener->collect(5,
	sub { 2 == grep { $_->{event} eq 'released' && $_->{name} =~ /^kept-/ } @{ $_[0] } });
is(scalar(grep { $_->{event} eq 'released' && $_->{name} =~ /^kept-/ } @$ended), 2,
	'its exit ends the two terms it still held');
$listener->reset;

# A name bound again in the statement that prunes: the statement's snapshot
# does not see its own new term, only the released one before it.  63
# bindings, 'again' among them, all released; then one statement binds
# 'again' (found, not pruned), 'fill' (the 64th) and 'prune' (which prunes).
# The session's exit must still end all three.
my $rebinder = $node->background_psql('postgres');
$rebinder->query_safe(q{
SELECT count(hoplock_acquire(n, 'holder', '1 h', session_bound => true))
  FROM (SELECT 'old-' || i FROM generate_series(1, 62) AS i
        UNION ALL SELECT 'again') AS t(n)});
$rebinder->query_safe(q{
SELECT count(hoplock_release(n, 'holder'))
  FROM (SELECT 'old-' || i FROM generate_series(1, 62) AS i
        UNION ALL SELECT 'again') AS t(n)});
$listener->collect(5,
	sub { 63 == grep { $_->{event} eq 'released' } @{ $_[0] } });
$listener->reset;
is($rebinder->query_safe(q{
SELECT count(hoplock_acquire(n, 'holder', '1 h', session_bound => true))
  FROM unnest(ARRAY['again', 'fill', 'prune']) WITH ORDINALITY AS t(n, o)}),
	3, 'one statement binds a name again and two more');
$rebinder->quit;
$ended = $listener->collect(5,
	sub { 3 == grep { $_->{event} eq 'released' && $_->{name} =~ /^(again|fill|prune)$/ } @{ $_[0] } });
is(join(',', sort map { $_->{name} } grep { $_->{event} eq 'released' } @$ended),
	'again,fill,prune', 'its exit ends a term bound again in the statement that pruned');
$listener->reset;

$listener->disconnect;
$node->stop;
done_testing();
