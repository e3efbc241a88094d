# hoplock_handoff by a superuser holder never hands its term to an
# ordinary role's candidate: a term goes only to a candidate whose role has
# the privileges of the term's role (a superuser has those of every role,
# not every role those of the superuser).  An ordinary LOGIN role waiting
# under the owner string the superuser leader hands over to, with a higher
# priority, is passed over; the superuser's real follower gets the term,
# and it alone: no other session under the same owner takes it before.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('handoff_su');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE intruder LOGIN;
});
my $su = $node->safe_psql('postgres', 'SELECT current_user');

my $g = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('svc', 'leader', '1 h')});

sub wait_as
{
	my ($role, $prio) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-U', $role,
			'-c', "SELECT owner || ' ' || generation FROM hoplock_wait('svc', 'standby', '1 h', '5 s', priority => $prio)"
		],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'svc' AND role = '$role'")
	  or die "$role is no candidate";
	return [ $h, \$out ];
}

my $legit = wait_as($su, 0);
my $evil = wait_as('intruder', 10);

$node->safe_psql('postgres',
	"SELECT hoplock_handoff('svc', 'leader', $g, 'standby')");
$_->[0]->finish for ($legit, $evil);

is($node->safe_psql('postgres',
		q{SELECT role FROM hoplock_leases WHERE name = 'svc'}),
	$su, 'the term the superuser handed to "standby" is its own role\'s');
my ($l) = split /\n/, ${ $legit->[1] };
my ($e) = split /\n/, ${ $evil->[1] };
note "follower: ", $l // '', "; intruder: ", $e // '';
ok(!(defined $l && defined $e && $l ne '' && $l eq $e),
	'no two sessions get the same term out of one handoff');

$node->stop;
done_testing();
