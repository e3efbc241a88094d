# Zombie writes, counted: every hoplock_fence refused and every row
# hoplock_fenced rejected because its generation no longer holds the lease
# is counted per term (hoplock_history.refused_writes), per name
# (hoplock_leases.refused_writes) and per database (hoplock_stats:
# fences_refused, writes_refused); the first refusal of a term writes one
# log line, the later ones none.  A role without the privileges of the
# term's role is refused as ever and counts for nothing.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('zombie');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE app LOGIN;
	CREATE ROLE stranger LOGIN;
	GRANT EXECUTE ON FUNCTION hoplock_force_release(text) TO app;
	CREATE TABLE work (generation bigint, note text);
	CREATE TRIGGER work_fenced BEFORE INSERT ON work
	    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('z', 'generation');
	GRANT INSERT, SELECT ON work TO app, stranger;
});

sub sql
{
	my ($role, $query) = @_;
	my ($ret, $out, $err) = $node->psql('postgres', $query,
		extra_params => [ '-U', $role ]);
	return ($ret, $out, $err);
}

sub log_lines
{
	my ($generation) = @_;
	my @l = slurp_file($node->logfile) =~
	  /(hoplock: refused a [a-z ]+ of lease "z" by generation \Q$generation\E)\b/g;
	return scalar @l;
}

sub counts
{
	return $node->safe_psql('postgres', q{
		SELECT (SELECT string_agg(refused_writes::text, ',' ORDER BY generation) FROM hoplock_history WHERE name = 'z')
		    || ' / ' || coalesce((SELECT refused_writes::text FROM hoplock_leases WHERE name = 'z'), 'released')
		    || ' / ' || (SELECT fences_refused || ',' || writes_refused FROM hoplock_stats WHERE datname = current_database())});
}

my $g1 = $node->safe_psql('postgres', q{SET ROLE app; SELECT generation FROM hoplock_acquire('z', 'a', '1 h')});
my ($ret, $out, $err) = sql('app', "INSERT INTO work VALUES ($g1, 'leader')");
is($ret, 0, 'the leader writes');
is(counts(), '0 / 0 / 0,0', 'nothing refused yet');

# a new term: the old leader is a zombie now
$node->safe_psql('postgres', q{SET ROLE app; SELECT hoplock_force_release('z'); SELECT hoplock_acquire('z', 'b', '1 h')});
my $g2 = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_holder('z')});
for my $i (1 .. 3)
{
	($ret, $out, $err) = sql('app', "INSERT INTO work VALUES ($g1, 'zombie $i')");
	like($err, qr/55P03|not $g1|at generation/, "zombie write $i is refused");
}
for my $i (1 .. 2)
{
	($ret, $out, $err) = sql('app', "SELECT hoplock_fence('z', $g1)");
	like($err, qr/at generation $g2, not $g1/, "zombie fence $i is refused");
}
is(counts(), '5,0 / 5 / 2,3',
	'counted: 5 for the old term, none for the new; 5 for the name; 2 fences and 3 writes in the database');
is(log_lines($g1), 1, 'one log line for the refused term, not one per refusal');
like(slurp_file($node->logfile),
	qr/refused a fenced write of lease "z" by generation $g1\n.*DETAIL:  The lease is at generation $g2\./,
	'... naming what was refused, and the generation that holds the lease');

# another role: refused, never counted, never logged
($ret, $out, $err) = sql('stranger', "SELECT hoplock_fence('z', $g1)");
like($err, qr/not $g1/, "another role's fence is refused");
($ret, $out, $err) = sql('stranger', "INSERT INTO work VALUES ($g1 - 1, 'stranger')");
isnt($ret, 0, "another role's write is refused");
is(counts(), '5,0 / 5 / 2,3', "... and counts for nothing");
is(log_lines($g1 - 1), 0, '... nor is logged');

# the new term's own writes and fences are no refusals
($ret, $out, $err) = sql('app', "BEGIN; SELECT hoplock_fence('z', $g2); INSERT INTO work VALUES ($g2, 'new leader'); COMMIT");
is($ret, 0, 'the new leader writes and fences');
is(counts(), '5,0 / 5 / 2,3', '... uncounted');

# a term that ended (released) is refused as a zombie too, logged once
$node->safe_psql('postgres', q{SET ROLE app; SELECT hoplock_release('z', 'b')});
($ret, $out, $err) = sql('app', "INSERT INTO work VALUES ($g2, 'after release')");
like($err, qr/no longer held/, 'a write of a released term is refused');
is(counts(), '5,1 / released / 2,4', 'counted for that term (hoplock_leases shows no released lease)');
like(slurp_file($node->logfile), qr/by generation $g2\n.*DETAIL:  The term is over\./,
	'logged: the term is over');

# a name that never had a term: refused, nothing to attribute it to
($ret, $out, $err) = sql('app', 'SELECT hoplock_fence(\'never\', 42)');
like($err, qr/never been acquired/, 'a fence of a name never acquired is refused');
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_internal.refusals() WHERE name = 'never'}),
	'0', '... and not counted');

# within the transaction that was refused, nothing survives but the counts
is($node->safe_psql('postgres', q{SELECT string_agg(note, ',' ORDER BY note) FROM work}),
	'leader,new leader', 'no refused row was written');

# a generation the lease never had is refused, and is no zombie write
($ret, $out, $err) = sql('app', "SELECT hoplock_fence('z', $g1 - 1)");
like($err, qr/not $g1 - 1|at generation/, 'a fence of a generation the lease never had is refused');
is($node->safe_psql('postgres', q{SELECT fences_refused FROM hoplock_stats WHERE datname = current_database()}),
	'2', '... and not counted');

# the terms of one role take 64 entries at most: its older ones make room,
# not another role's
$node->safe_psql('postgres', q{
	CREATE ROLE flood LOGIN;
	SET ROLE flood;
	DO $$
	DECLARE
		g bigint;
	BEGIN
		FOR i IN 1..70 LOOP
			g := (hoplock_acquire('e', 'f', '1 h')).generation;
			PERFORM hoplock_release('e', 'f');
			BEGIN
				PERFORM hoplock_fence('e', g);
			EXCEPTION WHEN lock_not_available THEN NULL;
			END;
		END LOOP;
	END $$});
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_internal.refusals() WHERE name = 'e'}),
	'64', "one role's terms: 64 entries at most");
is($node->safe_psql('postgres', qq{SELECT count(*) FROM hoplock_internal.refusals() WHERE name = 'z'}),
	'2', "another role's terms keep theirs");
is($node->safe_psql('postgres', q{SELECT fences_refused || ',' || writes_refused FROM hoplock_stats WHERE datname = current_database()}),
	'72,4', 'the database counts every refusal');

# with no history kept, a zombie write is counted by the role of the
# lease's last term
$node->safe_psql('postgres', 'ALTER SYSTEM SET hoplock.history_size = 0');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
my $h1 = $node->safe_psql('postgres', q{SET ROLE app; SELECT generation FROM hoplock_acquire('nh', 'a', '1 h')});
$node->safe_psql('postgres', q{SET ROLE app; SELECT hoplock_force_release('nh'); SELECT hoplock_acquire('nh', 'b', '1 h')});
($ret, $out, $err) = sql('app', "SELECT hoplock_fence('nh', $h1)");
like($err, qr/not $h1/, 'with no history kept, a zombie fence is refused');
is($node->safe_psql('postgres', q{SELECT refused_writes FROM hoplock_leases WHERE name = 'nh'}),
	'1', '... and counted');
$node->safe_psql('postgres', 'ALTER SYSTEM RESET hoplock.history_size');
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');

# hoplock_stats_reset() forgets them
$node->safe_psql('postgres', 'SELECT hoplock_stats_reset()');
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_internal.refusals()}),
	'0', 'hoplock_stats_reset() forgets the terms');

$node->stop;
done_testing();
