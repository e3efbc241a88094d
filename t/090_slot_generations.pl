# The terms of a lease's slots never share a generation: a fence names its
# term by the generation alone (hoplock_fence finds the slot of it), so
# two slots' terms begun in the same microsecond by two sessions must
# still be told apart.  A storm of acquires and releases of a lease with
# 8 slots, then every term in the history has a generation of its own.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('slot_generations');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->append_conf('postgresql.conf', 'hoplock.history_size = 100000');
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

$node->pgbench(
	'-n -c 8 -j 2 -T 8',
	0,
	[qr/processed/],
	[qr/^$/],
	'acquire and release slots from 8 clients',
	{
		'slot_storm' => q{
\set o random(1, 64)
SELECT hoplock_release('storm', 'w' || :o) FROM hoplock_acquire('storm', 'w' || :o, '10 s', slots => 8);
}
	});

my ($terms, $shared) = split /\|/, $node->safe_psql('postgres', q{
	SELECT count(*), count(*) - count(DISTINCT generation)
	  FROM hoplock_history WHERE name = 'storm'});
cmp_ok($terms, '>', 1000, "a storm of terms ($terms)");
is($shared, '0', 'no two slot terms share a generation');

$node->stop;
done_testing();
