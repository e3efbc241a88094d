# A term hoplock_handoff wrote for a candidate that never took it does not
# outlive the wait it was written for, even when the worker's memory of it
# is lost (the worker restarted, the server restarted: the row names the
# candidate until it takes the term), nor when the candidate's own
# transaction rolls back after its hoplock_wait returned the term.  And two
# more findings of a review: the priority of a term its holder extends
# through hoplock_wait, and refusals of generations that were never terms
# of the lease (not zombie writes).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('handed_terms');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

# psql running @sql in the background
sub bg
{
	my @sql = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), map { ('-c', $_) } @sql ],
		'>', \$out, '2>&1');
	return { h => $h, out => \$out };
}

sub candidate
{
	my ($name, $owner, $timeout) = @_;
	my $c = bg("SELECT coalesce(owner, 'timeout') FROM hoplock_wait('$name', '$owner', '1 h', '$timeout')");
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = '$name' AND owner = '$owner'")
	  or die "$owner is no candidate";
	return $c;
}

sub holder
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		"SELECT coalesce((SELECT owner FROM hoplock_holder('$name')), 'free')");
}

# --- 1. the worker restarts while the abandoned term's handoff is open ------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('w', 'A', '1 h')});
my $c = candidate('w', 'C', '2 s');
my $h = bg(
	"BEGIN; SELECT owner FROM hoplock_handoff('w', 'A', (SELECT generation FROM hoplock_holder('w'))); SELECT pg_sleep(4);"
	  . " SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE backend_type = 'hoplock worker'; SELECT pg_sleep(2); COMMIT;");
$c->{h}->finish;
$h->{h}->finish;
like(${ $c->{out} }, qr/timeout/, 'the candidate gave up before the handoff committed');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE backend_type = 'hoplock worker'});
sleep 3;
is(holder('w'), 'free', 'worker restarted: the handed term nobody took is ended');

# --- 2. a fast restart while the worker still has to end it ----------------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('f', 'A', '1 h')});
$c = candidate('f', 'C', '2 s');
$h = bg("BEGIN; SELECT owner FROM hoplock_handoff('f', 'A', (SELECT generation FROM hoplock_holder('f'))); SELECT pg_sleep(4); COMMIT;");
# a row lock taken as the handoff commits keeps the worker from ending it
my $l = bg("BEGIN; SELECT pg_sleep(1.5); SELECT 1 FROM hoplock_internal.lease WHERE name = 'f' FOR UPDATE; SELECT pg_sleep(60); COMMIT;");
$c->{h}->finish;
$h->{h}->finish;
sleep 1;
is(holder('f'), 'C', 'the handed term is there, not ended yet (row locked)');
$node->restart('fast');
$l->{h}->finish;
sleep 3;
is(holder('f'), 'free', 'after a fast restart the handed term nobody took is ended');

# --- 3. the candidate's transaction rolls back after its wait took it ---------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('r', 'A', '1 h')});
$c = bg("BEGIN; SELECT owner FROM hoplock_wait('r', 'C', '1 h', '30 s'); ROLLBACK;");
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'r'}) or die;
$node->safe_psql('postgres',
	q{SELECT hoplock_handoff('r', 'A', (SELECT generation FROM hoplock_holder('r')))});
$c->{h}->finish;
like(${ $c->{out} }, qr/^C$/m, 'the candidate got the handed term, then rolled back');
sleep 2;
is(holder('r'), 'free', 'a handed term whose taking rolled back is ended');

# --- 4. priority of a term its holder renews through hoplock_wait ------------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('p', 'A', '1 h')});
$node->safe_psql('postgres', q{SELECT hoplock_wait('p', 'A', '1 h', '1 s', priority => 10)});
is($node->safe_psql('postgres', q{SELECT priority FROM hoplock_leases WHERE name = 'p'}),
	'10', 'the holder waiting at priority 10 holds a term of priority 10');
my $b = bg(q{SELECT coalesce(owner, 'timeout') FROM hoplock_wait('p', 'B', '1 h', '2 s', priority => 5, preempt => true)});
$b->{h}->finish;
is($node->safe_psql('postgres', q{SELECT step_down_at IS NULL FROM hoplock_leases WHERE name = 'p'}),
	't', 'a candidate of priority 5 does not ask it to step down');

# --- 5. refusals for generations that were never terms of the lease ---------
my $g = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('z', 'A', '1 h')});
$node->psql('postgres', "SELECT hoplock_fence('z', $g + $_)") for 1 .. 3;
is($node->safe_psql('postgres', q{SELECT refused_writes FROM hoplock_leases WHERE name = 'z'}),
	'0', 'fences by generations above the running one are no zombie writes');

$node->stop;
done_testing();
