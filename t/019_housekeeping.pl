# Housekeeping by the expiry worker, so that hoplock can live for years in
# a database: names released (or lapsed) longer than
# hoplock.released_retention ago are forgotten, in small batches, and the
# lease table returns to its steady size; a forgotten name that comes back
# still gets a generation above every one it had; the history keeps the
# newest hoplock.history_size terms; a term the worker ends is recorded as
# "expired" and counted in hoplock_stats.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('housekeeping');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.released_retention = 1
hoplock.history_size = 300
autovacuum_naptime = 1
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

my $names = 20000;

# One wave of short-lived names: each acquired and released, in batches
# of a thousand per transaction; returns name => generation.
sub wave
{
	my %gen;
	for (my $from = 1; $from <= $names; $from += 1000)
	{
		my $to = $from + 999;
		my $out = $node->safe_psql('postgres', qq{
			SELECT l.name, l.generation
			  FROM generate_series($from, $to) AS i,
			       LATERAL hoplock_acquire('job-' || i, 'worker', '1 h') AS l;
			SELECT count(*) FILTER (WHERE NOT hoplock_release('job-' || i, 'worker'))
			  FROM generate_series($from, $to) AS i;
		});
		my @lines = split /\n/, $out;
		my $not_released = pop @lines;
		die "$not_released releases failed" if $not_released ne '0';
		for (@lines)
		{
			my ($n, $g) = split /\|/;
			$gen{$n} = $g;
		}
	}
	return \%gen;
}

sub rows
{
	return $node->safe_psql('postgres',
		'SELECT count(*) FROM hoplock_internal.lease');
}

sub wait_forgotten
{
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM hoplock_internal.lease WHERE name LIKE 'job-%'")
	  or die 'the released names were not forgotten';
}

sub table_pages
{
	$node->safe_psql('postgres', 'VACUUM hoplock_internal.lease');
	return $node->safe_psql('postgres',
		"SELECT pg_relation_size('hoplock_internal.lease') / 8192");
}

# A held lease, never forgotten, and a lease the worker will end.
$node->safe_psql('postgres', q{
	SELECT hoplock_acquire('kept', 'leader', '1 h');
	SELECT hoplock_acquire('lapses', 'leader', '500 ms');
});

my $first = wave();
is(scalar(keys %$first), $names, "$names names granted");
wait_forgotten();
pass('released names are forgotten after hoplock.released_retention');
is($node->safe_psql('postgres',
	"SELECT string_agg(name, ',' ORDER BY name) FROM hoplock_internal.lease"),
	'kept', 'the held lease stays; the lapsed one, announced, went too');
table_pages();

# The same names again: each one's generation is greater than before.
my $second = wave();
my @not_above = grep { $second->{$_} <= $first->{$_} } keys %$first;
is(scalar(@not_above), 0,
	'every forgotten name comes back with a greater generation')
  or diag("e.g. $not_above[0]: $first->{$not_above[0]} then $second->{$not_above[0]}");
wait_forgotten();

my $pages2 = table_pages();

# Two more waves, with a vacuum after each (as autovacuum does): the table
# does not grow from wave to wave.
wave();
wait_forgotten();
table_pages();
my $third = wave();
wait_forgotten();
my $pages4 = table_pages();
cmp_ok($pages4, '<=', $pages2 * 1.1 + 8,
	"the table stays at its steady size ($pages2 pages, then $pages4)");
my @not_above3 = grep { $third->{$_} <= $second->{$_} } keys %$second;
is(scalar(@not_above3), 0, 'still monotone after four waves');

# The history keeps the newest hoplock.history_size terms (the running
# one besides).
$node->poll_query_until('postgres',
	'SELECT count(*) <= 301 FROM hoplock_internal.history')
  or die 'the history was not trimmed';
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE name = 'kept' AND ended_at IS NULL)
	  FROM hoplock_history}),
	'1', 'a running term stays in the history');
is($node->safe_psql('postgres', q{
	SELECT min(generation) > 2 FROM hoplock_history WHERE name LIKE 'job-%'}),
	't', 'the oldest terms were dropped');

# The worker's "expired": in the history and the counters.
$node->safe_psql('postgres', 'SELECT hoplock_stats_reset()');
$node->safe_psql('postgres', q{SELECT hoplock_acquire('lapses2', 'leader', '200 ms')});
$node->poll_query_until('postgres', q{
	SELECT how = 'expired' FROM hoplock_internal.history WHERE name = 'lapses2'})
  or die 'the lapsed term was not recorded';
is($node->safe_psql('postgres', 'SELECT expiries, terms_begun FROM hoplock_stats'),
	'1|1', 'the expiry is counted');

# With hoplock.released_retention = 0, nothing is forgotten.
$node->append_conf('postgresql.conf', 'hoplock.released_retention = 0');
$node->reload;
$node->safe_psql('postgres', q{
	SELECT hoplock_acquire('stays', 'o', '1 h');
	SELECT hoplock_release('stays', 'o');
});
sleep(12);
is($node->safe_psql('postgres',
	"SELECT count(*) FROM hoplock_internal.lease WHERE name = 'stays'"),
	'1', 'with hoplock.released_retention = 0 released names stay');

ok(!$node->log_contains('TRAP|server process .* was terminated'),
	'no crash');
$node->stop;
done_testing();
