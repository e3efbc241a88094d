# The server's clock steps (libfaketime, from Debian's libfaketime, preloaded
# into the server, which is restarted with each new offset): the terms of a name never overlap in server time as
# recorded -- a new term never begins before the previous one ended --, a
# step forward makes running terms lapse early, a step back makes them last
# longer, and generations keep counting up.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $libfaketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1';
plan skip_all => "libfaketime is not installed ($libfaketime)" unless -e $libfaketime;

my $node = PostgreSQL::Test::Cluster->new('clock');
$node->init;
# No expiry worker: libfaketime does not reach the processes the postmaster
# starts from its signal handlers (background workers), so a worker would
# run on the real clock while the sessions run on the stepped one.  Every
# decision tested here is a session's.
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.databases = 'none_at_all'
});

# Step the server's clock: restart it with libfaketime preloaded and the
# clock offset by $offset ("-30s", "+2h"; undef: the real clock).  Terms
# are durable, so they live through the restart and meet the new clock.
sub step_clock
{
	my ($offset) = @_;
	local $ENV{LD_PRELOAD} = defined $offset ? $libfaketime : '';
	local $ENV{FAKETIME} = $offset // '';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	$node->stop('fast') if defined $node->{_pid};
	$node->start;
}
step_clock(undef);
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE TABLE terms (name text, generation bigint, acquired_at timestamptz,
	                    ended_at timestamptz);
});

# The clock, as the server reads it
sub server_clock
{
	return $node->safe_psql('postgres', 'SELECT clock_timestamp()');
}

# --- A step back between a release and the next term --------------------------
$node->safe_psql('postgres', q{
	INSERT INTO terms SELECT name, generation, acquired_at, NULL
	  FROM hoplock_acquire('c', 'a', '1 h');
	SELECT hoplock_release('c', 'a');
	UPDATE terms SET ended_at = (SELECT expires_at FROM hoplock_internal.lease WHERE name = 'c')
	 WHERE generation = 1;
});
step_clock('-10s');
my $before = server_clock();
$node->safe_psql('postgres', q{
	INSERT INTO terms SELECT name, generation, acquired_at, NULL
	  FROM hoplock_acquire('c', 'b', '1 h');
});
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM terms AS t1 JOIN terms AS t2 ON t2.generation = t1.generation + 1
	 WHERE t2.acquired_at < t1.ended_at}),
	'0', 'after the clock stepped 10 s back, the new term does not begin before the released one ended');
is($node->safe_psql('postgres', q{SELECT max(generation) FROM terms}), '2',
	'and its generation counts up');
ok($node->safe_psql('postgres', qq{
	SELECT expires_at > '$before'::timestamptz + interval '1 h'
	  FROM hoplock_holder('c')}) eq 't',
	'its ttl runs from where the previous term ended: it lasts longer by the step');

# --- A step back while a term runs: it lasts longer ------------------------------
step_clock(undef);
$node->safe_psql('postgres', q{SELECT hoplock_acquire('back', 'a', '2 s')});
step_clock('-30s');
sleep 3;
is($node->safe_psql('postgres', q{SELECT owner FROM hoplock_holder('back')}), 'a',
	'a term held while the clock steps back lasts longer than its ttl');
is($node->safe_psql('postgres', q{SELECT hoplock_acquire('back', 'b', '1 s') IS NULL}), 't',
	'and nobody else gets it meanwhile');

# --- A step forward: running terms lapse early ------------------------------------
step_clock(undef);
$node->safe_psql('postgres', q{SELECT hoplock_acquire('fwd', 'a', '1 h')});
step_clock('+2h');
is($node->safe_psql('postgres', q{SELECT generation FROM hoplock_acquire('fwd', 'b', '1 h')}), '2',
	'a step forward past the ttl ends a running term early: another owner takes it');
$node->poll_query_until('postgres',
	q{SELECT state = 'h' AND generation = 2 FROM hoplock_internal.lease WHERE name = 'fwd'})
  or die 'lost';
step_clock(undef);
is($node->safe_psql('postgres', q{SELECT owner || '/' || generation FROM hoplock_holder('fwd')}), 'b/2',
	'and when the clock steps back, the new term is still held');
is($node->safe_psql('postgres', q{SELECT hoplock_renew('fwd', 'a', '1 h') IS NULL}), 't',
	'the old holder cannot renew');
is($node->safe_psql('postgres', q{SELECT generation FROM hoplock_acquire('fwd', 'b', '1 h')}), '2',
	'the new holder still can');

$node->stop;
done_testing();
