# Handed terms taken in a transaction that rolls back are all ended
# (found by a review): one transaction's waits may take several handed
# terms, of several names, some in savepoints; a rollback of the whole, or
# to a savepoint before a take, ends each term it undid ("abandoned"),
# not the last alone.  A take in a released savepoint belongs to its
# parent; a FATAL in the middle of the transaction ends the term too.  And
# until the candidate takes its term, no other session of its owner
# writes over it with hoplock_write.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('handed_takes');
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

# hoplock_write by another session of the candidate's owner, while the
# candidate (stopped here) has not taken its term: refused
$node->safe_psql('postgres', "SELECT hoplock_acquire('w_a', 'leader', '1 h')");
$out = '';
$h = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		"SELECT hoplock_wait('w_a', 'standby', '1 h', '30 s') IS NOT NULL" ],
	'>', \$out, '2>&1');
$node->poll_query_until('postgres',
	"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'w_a'") or die 'no candidate';
my $cpid = $node->safe_psql('postgres', "SELECT pid FROM hoplock_candidates WHERE name = 'w_a'");
kill 'STOP', $cpid;
my $handed = hand('w_a');
my $handle = $node->safe_psql('postgres', "SELECT handle FROM hoplock_read('w_a')");
is($node->safe_psql('postgres', "SELECT hoplock_write('w_a', '$handle', 'standby', '1 h') IS NULL"),
	't', 'another session of the owner cannot write over the handed term before it is taken');
kill 'CONT', $cpid;
$h->finish;
is($out, "t\n", 'the candidate takes its term');
is($node->safe_psql('postgres', "SELECT generation FROM hoplock_holder('w_a')"), $handed,
	'... the term it was handed');

$node->stop;
done_testing();
