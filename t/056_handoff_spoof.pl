# hoplock_handoff hands a term only to a candidate of a role the caller
# has the privileges of.  An ordinary role that waits under the owner the
# leader means to hand over to, with a higher priority, is passed over: the
# term goes to the real follower, of the leader's role, and the follower's
# hoplock_wait returns it.  (Before, the other role got the term under that
# owner, and the real follower's wait failed with 42501.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('handoff_spoof');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE app LOGIN;
	CREATE ROLE intruder LOGIN;
});

my $g = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('svc', 'app-leader', '1 h')},
	extra_params => [ '-U', 'app' ]);

sub wait_as
{
	my ($role, $prio) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-U', $role,
			'-c', "SELECT coalesce(owner, 'NULL') FROM hoplock_wait('svc', 'app-standby', '1 h', '10 s', priority => $prio)"
		],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'svc' AND role = '$role'")
	  or die "$role is no candidate";
	return [ $h, \$out ];
}

my $legit = wait_as('app', 0);
my $evil = wait_as('intruder', 2147483647);

$node->safe_psql('postgres',
	"SELECT hoplock_handoff('svc', 'app-leader', $g, 'app-standby')",
	extra_params => [ '-U', 'app' ]);
$_->[0]->finish for ($legit, $evil);

is($node->safe_psql('postgres', q{SELECT role FROM hoplock_leases WHERE name = 'svc'}),
	'app', 'the term handed to app-standby is app\'s, not the intruder\'s');
unlike(${ $legit->[1] }, qr/permission denied/,
	'the real app-standby\'s hoplock_wait does not fail with 42501');

$node->stop;
done_testing();
