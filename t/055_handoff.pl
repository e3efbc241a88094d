# hoplock_handoff: the holder ends its term and begins the next for a
# waiting candidate -- the one it names, or the first -- in one
# transaction, with one "released" and one "acquired" event.  The new term
# has the candidate's ttl and, if the candidate asked for it, is bound to
# the candidate's session; the candidate's hoplock_wait returns it.  With
# no such candidate it returns NULL, and the term goes on.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('handoff');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE intruder LOGIN;
	-- the service's role, and a member of it: a term is handed within its role
	CREATE ROLE app LOGIN;
	CREATE ROLE cand LOGIN IN ROLE app;
	CREATE TABLE work (generation bigint);
	CREATE TRIGGER work_fenced BEFORE INSERT ON work
	    FOR EACH ROW EXECUTE FUNCTION hoplock_fenced('h', 'generation');
	GRANT INSERT ON work TO cand;
});

# A psql waiting for lease 'h' as $owner; returns once it is a candidate.
# A session-bound candidate stays connected a second after its wait.
sub start_candidate
{
	my ($owner, $ttl, $bound, $role) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'),
			'-U', $role // 'postgres', '-c',
			"SELECT coalesce(owner || ' ' || generation, 'timeout') FROM hoplock_wait('h', '$owner', '$ttl', '60 s', session_bound => $bound)",
			'-c', ($bound eq 'true' ? 'SELECT pg_sleep(1)' : 'SELECT')
		],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'h' AND owner = '$owner'")
	  or die "$owner is no candidate";
	my $pid = $node->safe_psql('postgres',
		"SELECT pid FROM hoplock_candidates WHERE name = 'h' AND owner = '$owner'");
	return { h => $h, out => \$out, pid => $pid };
}

sub finish
{
	my ($c) = @_;
	$c->{h}->finish;
	my ($o) = split /\n/, ${ $c->{out} };
	return $o;
}

my $g1 = $node->safe_psql('postgres',
	q{SET ROLE app; SELECT generation FROM hoplock_acquire('h', 'old', '1 h')});

# --- no candidate: NULL, and the term goes on -------------------------------
is($node->safe_psql('postgres', "SELECT hoplock_handoff('h', 'old', $g1) IS NULL"),
	't', 'no candidate: NULL');
is($node->safe_psql('postgres', q{SELECT owner || ' ' || generation FROM hoplock_holder('h')}),
	"old $g1", '... and the term goes on');

# --- to the first candidate --------------------------------------------------
my $c1 = start_candidate('c1', '30 s', 'false', 'app');
my $c2 = start_candidate('c2', '1 h', 'true', 'cand');
is($node->safe_psql('postgres', "SELECT hoplock_handoff('h', 'old', $g1, 'nobody') IS NULL"),
	't', 'to an owner that does not wait: NULL');
is($node->safe_psql('postgres', "SELECT hoplock_handoff('h', 'old', $g1 + 1) IS NULL"),
	't', 'of another generation: NULL');
my ($ret, $out, $err) = $node->psql('postgres',
	"SELECT hoplock_handoff('h', 'old', $g1)", extra_params => [ '-U', 'intruder' ]);
like($err, qr/permission denied|must be a member/, 'another role cannot hand the term off');

my $before = $node->safe_psql('postgres', 'SELECT coalesce(max(seq), 0) FROM hoplock_events(0)');
my $new = $node->safe_psql('postgres',
	"SELECT owner || ' ' || (generation > $g1) || ' ' || (expires_at - acquired_at) || ' ' || handle FROM hoplock_handoff('h', 'old', $g1)");
my $handed_handle = (split ' ', $new)[3];
$new =~ s/ \S+$//;
is($new, 'c1 true 00:00:30', 'handed to the first candidate: a new generation, the candidate\'s ttl');
my $got1 = finish($c1);
isnt($node->safe_psql('postgres', q{SELECT handle FROM hoplock_holder('h')}), $handed_handle,
	'the candidate\'s wait takes the term: a write of its own (a new handle)');
is($node->safe_psql('postgres', q{SELECT handed_pid IS NULL FROM hoplock_internal.lease WHERE name = 'h'}), 't',
	'... and the row names no candidate any more (taken)');
my ($o1, $g2) = split ' ', $got1;
is($o1, 'c1', 'the candidate\'s hoplock_wait returns the term');
is($node->safe_psql('postgres', q{SELECT owner || ' ' || generation FROM hoplock_holder('h')}),
	"c1 $g2", '... the term it was handed');
$node->poll_query_until('postgres',
	"SELECT count(*) >= 2 FROM hoplock_events($before)");
is( $node->safe_psql('postgres',
		"SELECT string_agg(event || ' ' || owner || ' ' || (generation = $g1), ', ' ORDER BY seq) FROM hoplock_events($before) WHERE event IN ('released', 'acquired')"),
	'released old true, acquired c1 false',
	'one released and one acquired event, in that order');
is( $node->safe_psql('postgres',
		"SELECT how FROM hoplock_history WHERE name = 'h' AND generation = $g1"),
	'handed off', 'the history says how the term ended');
($ret, $out, $err) = $node->psql('postgres', "INSERT INTO work VALUES ($g1)");
isnt($ret, 0, 'the old term\'s fenced write is refused');

# --- to a named, session-bound candidate ---------------------------------------
my $c3 = start_candidate('c3', '1 h', 'false');
$new = $node->safe_psql('postgres',
	"SELECT owner || ' ' || generation FROM hoplock_handoff('h', 'c1', $g2, 'c2')");
my ($o2, $g3) = split ' ', $new;
is($o2, 'c2', 'handed to the candidate named, not the first');
is( $node->safe_psql('postgres',
		q{SELECT role || ' ' || session_bound || ' ' || holder_pid FROM hoplock_leases WHERE name = 'h'}),
	"cand true $c2->{pid}",
	'the term is the candidate\'s role\'s, bound to the candidate\'s session');
is(finish($c2), "c2 $g3", 'its hoplock_wait returns it');
# its psql has exited: the session-bound term ends with its backend
$node->poll_query_until('postgres',
	"SELECT how IS NOT NULL FROM hoplock_history WHERE name = 'h' AND generation = $g3")
  or diag('the session-bound term outlived its session');
is( $node->safe_psql('postgres',
		"SELECT how FROM hoplock_history WHERE name = 'h' AND generation = $g3"),
	'session ended', 'and ends with the candidate\'s session');
is(finish($c3) =~ /^c3 /, 1, 'the remaining candidate gets the freed lease');

# --- a candidate whose wait ends before the handoff commits ----------------
# The handoff picks it and writes its term; the wait times out meanwhile.
# Once the handoff commits, the worker ends the term nobody took
# ("abandoned"), so the lease is free again within moments, not a ttl.
$node->safe_psql('postgres', q{SELECT hoplock_acquire('s', 'old', '1 h')});
my $gs = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_holder('s')});
my $sout = '';
my $sh = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		q{SELECT coalesce(owner, 'NULL') FROM hoplock_wait('s', 'f', '1 h', '2 s')}
	],
	'>', \$sout, '2>&1');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 's'})
  or die 'no candidate for s';
my $handed = $node->safe_psql('postgres', qq{
	BEGIN;
	SELECT owner FROM hoplock_handoff('s', 'old', $gs);
	SELECT pg_sleep(3);
	COMMIT;
});
$sh->finish;
is($handed =~ s/\n.*//sr, 'f', 'the handoff wrote the term for the candidate it picked');
is($sout =~ s/\n$//r, 'NULL', 'whose wait timed out before the handoff committed');
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM hoplock_leases WHERE name = 's' AND NOT expired}),
	'the worker ends the term nobody took');
is( $node->safe_psql('postgres',
		q{SELECT how FROM hoplock_history WHERE name = 's' AND owner = 'f'}),
	'abandoned', 'the history says it was abandoned');

# --- a candidate waiting under REPEATABLE READ is never picked -------------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('rr', 'old', '1 h')});
my $gr = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_holder('rr')});
my $rout = '';
my $rh = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'),
		'-c', 'BEGIN ISOLATION LEVEL REPEATABLE READ',
		'-c', q{SELECT coalesce(owner, 'NULL') FROM hoplock_wait('rr', 'f', '1 h', '2 s')},
		'-c', 'COMMIT'
	],
	'>', \$rout, '2>&1');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'rr'})
  or die 'no candidate for rr';
is($node->safe_psql('postgres', "SELECT hoplock_handoff('rr', 'old', $gr) IS NULL"),
	't', 'a candidate under REPEATABLE READ, which could not take the term, is not picked');
$rh->finish;
is($node->safe_psql('postgres', q{SELECT owner FROM hoplock_holder('rr')}),
	'old', '... and the term goes on');

# --- a candidate's value goes with the term handed to it, and the events
# carry it, in the NOTIFY payload too --------------------------------------
$node->safe_psql('postgres', q{SELECT hoplock_acquire('v', 'vh', '1 h')});
my $gv = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_holder('v')});
my $vout = '';
my $vh = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		q{SELECT owner || ' ' || value FROM hoplock_wait('v', 'vc', '1 h', '60 s', value => 'host-c:4444')}
	],
	'>', \$vout, '2>&1');
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'v'})
  or die 'no candidate for v';
my $listen_out = '';
my $lh = IPC::Run::start(
	[
		'psql', '-XAtq', '-d', $node->connstr('postgres'),
		'-c', 'LISTEN hoplock', '-c', 'SELECT pg_sleep(2)'
	],
	'>', \$listen_out, '2>&1');
sleep 1;
is($node->safe_psql('postgres', "SELECT value FROM hoplock_handoff('v', 'vh', $gv)"),
	'host-c:4444', 'the handed term has the candidate\'s value');
$vh->finish;
is($vout =~ s/\n$//r, 'vc host-c:4444', '... which the candidate\'s wait returns');
$lh->finish;
like($listen_out, qr/"event": "acquired", "name": "v", "owner": "vc".*"value": "host-c:4444"\}/,
	'the acquired event\'s payload carries the value');

$node->stop;
done_testing();
