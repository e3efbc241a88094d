# Review (failing now): a transaction whose waits took two handed terms,
# of two names, and then rolls back leaves the first term running for
# nobody.  candidates.c remembers one taken term per backend
# (taken_generation, taken_name); the second take overwrites the first, so
# the abort tells the worker of the second only.  The first keeps its
# holder's owner, handed_pid naming a session that waits no more, until
# its ttl ends or the worker happens to read the table.
#
# Cases: two takes then ROLLBACK; a take at the top level, a second in a
# savepoint rolled back to (which clears the one slot), then ROLLBACK;
# and, as controls, a single take ended by pg_terminate_backend (FATAL)
# and a take in a released savepoint then ROLLBACK.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('handed_two_takes');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE state = 'sleeping'})
  or die 'no worker';

sub hand
{
	my ($name) = @_;
	my $g = $node->safe_psql('postgres',
		"SELECT generation FROM hoplock_leases WHERE name = '$name'");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = '$name'")
	  or die "no candidate for $name";
	return $node->safe_psql('postgres',
		"SELECT generation FROM hoplock_handoff('$name', 'leader', $g, 'standby')");
}

sub running
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT count(*) FROM hoplock_leases WHERE name = '$name' AND NOT expired");
}

my %cases = (
	two => [ [ 'two_a', 'two_b' ],
		"BEGIN; SELECT hoplock_wait('two_a', 'standby', '1 h', '30 s') IS NOT NULL; SELECT hoplock_wait('two_b', 'standby', '1 h', '30 s') IS NOT NULL; ROLLBACK;" ],
	nested => [ [ 'nest_a', 'nest_b' ],
		"BEGIN; SELECT hoplock_wait('nest_a', 'standby', '1 h', '30 s') IS NOT NULL; SAVEPOINT s; SELECT hoplock_wait('nest_b', 'standby', '1 h', '30 s') IS NOT NULL; ROLLBACK TO s; ROLLBACK;" ],
	released => [ [ 'rel_a' ],
		"BEGIN; SAVEPOINT s; SELECT hoplock_wait('rel_a', 'standby', '1 h', '30 s') IS NOT NULL; RELEASE s; ROLLBACK;" ],
);

for my $case (sort keys %cases)
{
	my ($names, $sql) = @{ $cases{$case} };
	$node->safe_psql('postgres',
		"SELECT hoplock_acquire('$_', 'leader', '1 h')") for @$names;
	my $out = '';
	my $h = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>&1');
	hand($_) for @$names;
	$h->finish;
	is($out, join('', map { "t\n" } @$names), "$case: the waits returned the handed terms");
	sleep 3;
	is(running($_), '0', "$case: $_ ended after the rollback") for @$names;
}

# FATAL in the middle of the transaction that took the term
$node->safe_psql('postgres', "SELECT hoplock_acquire('fatal_a', 'leader', '1 h')");
my $out = '';
my $h = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		"BEGIN; SELECT hoplock_wait('fatal_a', 'standby', '1 h', '30 s') IS NOT NULL; SELECT pg_sleep(60); COMMIT;" ],
	'>', \$out, '2>&1');
hand('fatal_a');
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM pg_stat_activity WHERE query LIKE '%fatal_a%pg_sleep%' AND wait_event = 'PgSleep'")
  or die 'no sleeper';
$node->safe_psql('postgres',
	"SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE query LIKE '%fatal_a%pg_sleep%' AND pid <> pg_backend_pid()");
$h->finish;
sleep 3;
is(running('fatal_a'), '0', 'fatal: the term ended after the backend was terminated');

$node->stop;
done_testing();
