# hoplock_renew_all: the worker's side (sql/renew_all.sql has the calls).
# A lapsed keepalive lapses every term attached to it: the worker announces
# each with its own "expired" event -- also more terms than it announces in
# one round, and after a restart, or a server down at the lapse -- fences
# of their generations are refused, the keepalive is deleted, and another
# owner's terms run on.  A handoff of an attached term ends just that term.
# A keepalive whose terms all ended is deleted when it lapses, also after a
# restart.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('renew_all');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

# every term of owner $o announced, each once, and fenced off
sub check_lapsed
{
	my ($o, $n, $what) = @_;
	$node->poll_query_until('postgres',
		"SELECT NOT EXISTS (SELECT FROM hoplock_internal.lease WHERE owner = '$o' AND state = 'h')")
	  or die "the terms of $o were not announced";
	is(q1("SELECT count(*) FROM hoplock_internal.lease WHERE owner = '$o' AND state = 'x' AND keepalive IS NULL"),
		$n, "$what: all $n terms announced as expired");
	is(q1(qq{SELECT count(*) FROM hoplock_internal.lease AS l
		  WHERE l.owner = '$o'
		    AND (SELECT count(*) FROM hoplock_events(0) AS e
		          WHERE e.name = l.name AND e.generation = l.generation
		            AND e.event = 'expired') = 1}),
		$n, "$what: one expired event for each term, with its generation");
	is(q1(qq{SELECT count(DISTINCT e.at) FROM hoplock_events(0) AS e
		  JOIN hoplock_internal.lease AS l USING (name, generation)
		 WHERE l.owner = '$o' AND e.event = 'expired'}),
		1, "$what: all expired at the keepalive's instant");
	is(q1(qq{SELECT count(*) FROM hoplock_internal.keepalive WHERE owner = '$o'}),
		0, "$what: the keepalive is deleted");
	my ($stdout, $stderr);
	$node->psql('postgres', qq{
		DO \$\$
		DECLARE r record; refused int := 0;
		BEGIN
			FOR r IN SELECT name, generation FROM hoplock_internal.lease WHERE owner = '$o' LOOP
				BEGIN
					PERFORM hoplock_fence(r.name, r.generation);
				EXCEPTION WHEN lock_not_available THEN
					refused := refused + 1;
				END;
			END LOOP;
			RAISE NOTICE 'refused %', refused;
		END \$\$}, stdout => \$stdout, stderr => \$stderr);
	like($stderr, qr/refused $n\b/, "$what: every fence of the lapsed generations is refused");
}

# --- 1. a keepalive of 1,500 terms lapses (more than a round's batch) ------
q1(q{SELECT count(hoplock_acquire('k' || i, 'K', '1 h')) FROM generate_series(1, 1500) AS i});
q1(q{SELECT count(hoplock_acquire('l' || i, 'L', '1 h')) FROM generate_series(1, 5) AS i});
is(q1(q{SELECT count(*) FROM hoplock_renew_all('K', '1 h')}), 1500, 'renew_all attaches 1,500 terms');
is(q1(q{SELECT count(*) FROM hoplock_renew_all('K', '2 s')}), 1500, 'and renews them, shorter');
check_lapsed('K', 1500, 'a lapsed keepalive');
is(q1(q{SELECT count(*) FROM hoplock_leases WHERE owner = 'L' AND NOT expired}), 5,
	"another owner's terms run on");
is(q1(q{SELECT count(*) FROM hoplock_renew_all('K', '1 h')}), 0, 'nothing is renewed after the lapse');

# --- 2. the worker restarts before the lapse --------------------------------
q1(q{SELECT count(hoplock_acquire('m' || i, 'M', '1 h')) FROM generate_series(1, 20) AS i});
q1(q{SELECT count(*) FROM hoplock_renew_all('M', '1 h')});
q1(q{SELECT count(*) FROM hoplock_renew_all('M', '3 s')});
$node->restart;
check_lapsed('M', 20, 'after a restart');

# --- 3. the server is down at the lapse -------------------------------------
q1(q{SELECT count(hoplock_acquire('n' || i, 'N', '1 h')) FROM generate_series(1, 20) AS i});
q1(q{SELECT count(*) FROM hoplock_renew_all('N', '2 s')});
$node->stop;
sleep 3;
$node->start;
check_lapsed('N', 20, 'down at the lapse');

# --- 4. a handoff of an attached term ends that term alone ------------------
q1(q{SELECT count(hoplock_acquire('h' || i, 'H', '1 h')) FROM generate_series(1, 3) AS i});
q1(q{SELECT count(*) FROM hoplock_renew_all('H', '1 h')});
my $out = '';
my $c = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
	  q{SELECT owner FROM hoplock_wait('h1', 'C', '1 h', '60 s')} ],
	'>', \$out, '2>&1');
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'h1'})
  or die 'no candidate';
is(q1(q{SELECT owner FROM hoplock_handoff('h1', 'H', (SELECT generation FROM hoplock_holder('h1')))}),
	'C', 'the attached term is handed to the candidate');
$c->finish;
is($out, "C\n", 'the candidate has it');
is(q1(q{SELECT string_agg(name, ' ' ORDER BY name) FROM hoplock_renew_all('H', '1 h')}),
	'h2 h3', 'renew_all renews the other terms, not the handed one');
is(q1(q{SELECT keepalive IS NULL FROM hoplock_internal.lease WHERE name = 'h1'}), 't',
	"the candidate's term is not attached to H's keepalive");

# --- 5. a keepalive whose terms all ended, the worker restarted -----------
q1(q{SELECT count(hoplock_acquire('p' || i, 'P', '1 h')) FROM generate_series(1, 2) AS i});
q1(q{SELECT count(*) FROM hoplock_renew_all('P', '3 s')});
q1(q{SELECT hoplock_release('p' || i, 'P') FROM generate_series(1, 2) AS i});
$node->restart;
$node->poll_query_until('postgres',
	q{SELECT NOT EXISTS (SELECT FROM hoplock_internal.keepalive WHERE owner = 'P')})
  or die 'the keepalive of P was not deleted';
pass('a lapsed keepalive no term names is deleted after a restart');

$node->stop;
done_testing();
