# Zombie-write counts that no role can write for another (found by a
# review): a refusal counts for a term only for a caller with the
# privileges of that term's role (as the history has it), never for a
# generation the lease never had; and one role's terms take 64 entries of
# the shared table at most, so it cannot push out another database's
# counts.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('refusals_other');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE victim LOGIN;
	CREATE ROLE mallory LOGIN;
	CREATE DATABASE other;
});
$node->safe_psql('other', 'CREATE EXTENSION hoplock');

sub as
{
	my ($role, $sql, $db) = @_;
	return $node->safe_psql($db // 'postgres', $sql,
		extra_params => [ '-U', $role ]);
}

# 1. the victim's past term, accused by mallory
my $g1 = as('victim', q{SELECT generation FROM hoplock_acquire('job', 'v', '1 h')});
as('victim', q{SELECT hoplock_release('job', 'v')});
as('mallory', q{SELECT hoplock_acquire('job', 'm', '1 h')});
as('mallory', q{SELECT hoplock_release('job', 'm')});
for (1 .. 5)
{
	my ($ret) = $node->psql('postgres', "SELECT hoplock_fence('job', $g1)",
		extra_params => [ '-U', 'mallory' ]);
	die 'fence did not fail' if $ret == 0;
}
as('victim', q{SELECT hoplock_acquire('job', 'v', '1 h')});
is(as('victim', "SELECT refused_writes FROM hoplock_history WHERE name = 'job' AND generation = $g1"),
	'0', "another role's fences are not counted against the victim's past term");
is(as('victim', q{SELECT refused_writes FROM hoplock_leases WHERE name = 'job'}),
	'0', "nor against the victim's running term");

# 2. another database's counts, wiped by made-up generations
my $gx = as('victim', q{SELECT generation FROM hoplock_acquire('x', 'v', '1 s')}, 'other');
sleep 2;
$node->psql('other', "SELECT hoplock_fence('x', $gx)",
	extra_params => [ '-U', 'victim' ]);
is(as('victim', "SELECT refused_writes FROM hoplock_history WHERE name = 'x' AND generation = $gx", 'other'),
	'1', 'the zombie fence in database "other" is counted');
as('mallory', q{SELECT hoplock_acquire('mine', 'm', '1 h')});
$node->psql('postgres',
	join('', map { "SELECT hoplock_fence('mine', $_);\n" } 1 .. 1100),
	extra_params => [ '-U', 'mallory' ], on_error_stop => 0);
is(as('victim', "SELECT refused_writes FROM hoplock_history WHERE name = 'x' AND generation = $gx", 'other'),
	'1', 'made-up generations in one database do not wipe the counts of another');

$node->stop;
done_testing();
