# A handed term does not outlive a wait whose transaction rolls back
# (found by a review): the candidate's hoplock_wait took it, and the
# transaction then aborts -- ROLLBACK, an error later in it, ROLLBACK TO a
# savepoint before the wait -- so the take is undone; the worker is told,
# and ends the term nobody holds ("abandoned"), as for a wait that ended
# without the term.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('handoff_rollback');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE state = 'sleeping'})
  or die 'no worker';

my $n = 0;
for my $tail ('ROLLBACK', 'SELECT 1/0; COMMIT', 'SAVEPOINT s; ROLLBACK; COMMIT')
{
	$n++;
	my $name = "rb$n";
	my $g = $node->safe_psql('postgres',
		"SELECT generation FROM hoplock_acquire('$name', 'leader', '1 h')");
	my $sql = $tail =~ /^SAVEPOINT/
	  ? "BEGIN; SAVEPOINT s; SELECT generation FROM hoplock_wait('$name', 'standby', '1 h', '10 s'); ROLLBACK TO s; COMMIT;"
	  : "BEGIN; SELECT generation FROM hoplock_wait('$name', 'standby', '1 h', '10 s'); $tail;";
	my $out = '';
	my $h = IPC::Run::start([ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = '$name'")
	  or die 'no candidate';
	my $h2 = $node->safe_psql('postgres',
		"SELECT generation FROM hoplock_handoff('$name', 'leader', $g, 'standby')");
	$h->finish;
	like($out, qr/$h2/, "$name: the candidate's wait returned the handed term");
	# the worker ends an abandoned handed term within milliseconds
	sleep 3;
	is($node->safe_psql('postgres',
			"SELECT count(*) FROM hoplock_leases WHERE name = '$name' AND NOT expired"),
		'0', "$name: after the candidate's transaction aborts ($tail), the handed term is ended");
}

$node->stop;
done_testing();
