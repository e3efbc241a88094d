# hoplock_handoff and hoplock.max_names_per_role: a term handed to a
# candidate counts against no limit (the name exists, and the candidate
# asked for it), so a candidate whose role is at its limit cannot make the
# holder's handoff fail, and the handoff takes no lock of another role: a
# role still creates its names while another role's handoff is open.  A
# candidate whose role was dropped while it waited is passed over.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('handoff_role');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->append_conf('postgresql.conf', "hoplock.max_names_per_role = 2");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE app LOGIN;
	CREATE ROLE other LOGIN;
	CREATE ROLE gone LOGIN;
});

sub candidate
{
	my ($name, $role, $owner, $prio, $timeout) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-U', $role,
			'-c', "SELECT coalesce(owner, 'NULL') FROM hoplock_wait('$name', '$owner', '1 h', '$timeout', priority => $prio)"
		],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = '$name' AND role = '$role'")
	  or die "$role is no candidate";
	return [ $h, \$out ];
}

# --- 1. a candidate at its role's limit breaks the handoff -------------------
$node->safe_psql('postgres', q{
	SELECT hoplock_acquire('o1', 'x', '1 h'); SELECT hoplock_acquire('o2', 'x', '1 h');
}, extra_params => [ '-U', 'other' ]);
my $g = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('h1', 'lead', '1 h')},
	extra_params => [ '-U', 'app' ]);
my $c1 = candidate('h1', 'other', 'standby', 100, '3 s');
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT coalesce(owner, 'NULL') FROM hoplock_handoff('h1', 'lead', $g)",
	extra_params => [ '-U', 'app' ]);
$c1->[0]->finish;
is($ret, 0, 'a candidate at its role\'s limit does not make the holder\'s handoff fail')
  or diag($stderr);

# --- 2. the handing transaction holds the candidate role's lock ---------------
$node->safe_psql('postgres', q{SELECT hoplock_release('h1', 'lead')},
	extra_params => [ '-U', 'app' ]);
$g = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('h2', 'lead', '1 h')},
	extra_params => [ '-U', 'app' ]);
my $c2 = candidate('h2', 'gone', 'g', 0, '20 s');
my $hold = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-U', 'app',
		'-c', "BEGIN", '-c', "SELECT owner FROM hoplock_handoff('h2', 'lead', $g)",
		'-c', 'SELECT pg_sleep(4)', '-c', 'COMMIT'
	],
	'>', \my $hout, '2>&1');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM pg_stat_activity WHERE query = 'SELECT pg_sleep(4)'})
  or die 'handoff did not happen';
($ret, $stdout, $stderr) = $node->psql('postgres',
	q{SELECT hoplock_acquire('g-own', 'g', '1 h')},
	extra_params => [ '-U', 'gone' ]);
is($ret, 0, 'another role\'s open handoff does not stop a role creating its own names')
  or diag($stderr);
$hold->finish;
$c2->[0]->finish;

# --- 3. a candidate whose role is dropped while it waits ----------------------
$g = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('h3', 'lead', '1 h')},
	extra_params => [ '-U', 'postgres' ]);
$node->safe_psql('postgres', q{CREATE ROLE tmp LOGIN});
my $c3 = candidate('h3', 'tmp', 't', 0, '3 s');
$node->safe_psql('postgres', q{DROP ROLE tmp});
($ret, $stdout, $stderr) = $node->psql('postgres',
	"SELECT coalesce(owner, 'NULL') FROM hoplock_handoff('h3', 'lead', $g)",
	extra_params => [ '-U', 'postgres' ]);
$c3->[0]->finish;
unlike($stderr, qr/invalid role OID|cache lookup/,
	'a dropped role\'s candidate gives no internal error');

$node->stop;
done_testing();
