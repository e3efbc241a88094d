# The server's clock steps (libfaketime, from Debian's libfaketime, preloaded
# into the server, which is restarted with each new offset): the terms of a name never overlap in server time as
# recorded -- a new term never begins before the previous one ended --, a
# step forward makes running terms lapse early, a step back makes them last
# longer, and generations keep counting up (a branch begun on a clock behind
# the data begins above the data, with a warning).
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
	 WHERE name = 'c';
});
my $g_c1 = $node->safe_psql('postgres', q{SELECT generation FROM terms WHERE ended_at IS NOT NULL});
like($g_c1, qr/^\d+$/, 'the first term of c is recorded with its end');
my $log_offset = -s $node->logfile;
step_clock('-10s');
my $before = server_clock();
$node->safe_psql('postgres', q{
	INSERT INTO terms SELECT name, generation, acquired_at, NULL
	  FROM hoplock_acquire('c', 'b', '1 h');
});
is($node->safe_psql('postgres', q{
	SELECT count(*) || '/' || count(*) FILTER (WHERE t2.acquired_at < t1.ended_at)
	  FROM terms AS t1 JOIN terms AS t2 ON t2.name = t1.name AND t2.generation > t1.generation}),
	'1/0', 'after the clock stepped 10 s back, the new term does not begin before the released one ended');
my $g_c2 = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_holder('c')});
cmp_ok($g_c2, '>', $g_c1, "and its generation ($g_c2) is above the first ($g_c1)");
is($node->safe_psql('postgres', q{SELECT string_agg(generation::text, ' ' ORDER BY acquired_at) FROM terms}),
	"$g_c1 $g_c2", 'the terms recorded are those two');
# The clock now runs behind the data the first branch minted: the start's
# branch begins above the data all the same, and says so.
like(substr(slurp_file($node->logfile), $log_offset),
	qr/WARNING:  the server's clock is [0-9.]+ s behind hoplock's data/,
	'the new branch warns that the clock is behind the data');
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
my $g_fwd_a = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('fwd', 'a', '1 h')});
step_clock('+2h');
my $g_fwd_b = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('fwd', 'b', '1 h')});
cmp_ok($g_fwd_b || 0, '>', $g_fwd_a,
	'a step forward past the ttl ends a running term early: another owner takes it, in a new term');
$node->poll_query_until('postgres',
	qq{SELECT state = 'h' AND generation = $g_fwd_b FROM hoplock_internal.lease WHERE name = 'fwd'})
  or die 'lost';
$log_offset = -s $node->logfile;
step_clock(undef);
is($node->safe_psql('postgres', q{SELECT owner || '/' || generation FROM hoplock_holder('fwd')}), "b/$g_fwd_b",
	'and when the clock steps back, the new term is still held');
is($node->safe_psql('postgres', q{SELECT hoplock_renew('fwd', 'a', '1 h') IS NULL}), 't',
	'the old holder cannot renew');
is($node->safe_psql('postgres', qq{SELECT hoplock_renew('fwd', 'a', '1 h', $g_fwd_a) IS NULL}), 't',
	'not with its own generation either');
is($node->safe_psql('postgres', q{SELECT generation FROM hoplock_acquire('fwd', 'b', '1 h')}), $g_fwd_b,
	'the new holder still can');
# Minted 2 h ahead of the real clock: a new name's first term is above them
# all the same (the branch begins above the data), with the warning.
cmp_ok($node->safe_psql('postgres', q{SELECT generation FROM hoplock_acquire('after-fwd', 'c', '1 h')}),
	'>', $g_fwd_b, 'a term granted after the clock stepped back is above those granted 2 h ahead');
like(substr(slurp_file($node->logfile), $log_offset),
	qr/WARNING:  the server's clock is 7[0-9]{3}\.[0-9]+ s behind hoplock's data/,
	'and the branch begun on the real clock warns that it is about 2 h behind the data');

$node->stop;
done_testing();
