# Slots with real sessions: waiters of a lease with slots are served in
# the candidates' order (priority, then the longest waiting) whichever slot
# frees, each woken within milliseconds; a handoff gives a slot to a
# waiting candidate; a slot's term lapses and is announced by the worker
# ("expired" with its slot); a session-bound slot term ends with its
# session; a plain acquire does not take a slot ahead of a candidate.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('slots');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# A psql waiting for a slot of lease $name (3 slots) as $owner; returns
# once it is a candidate.
sub start_waiter
{
	my ($name, $owner, $priority) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[
			'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
			"SELECT coalesce(owner, 'timeout') || ' ' || (extract(epoch FROM clock_timestamp()) * 1000)::bigint"
			  . " FROM hoplock_wait('$name', '$owner', '1 h', '60 s', priority => $priority, slots => 3)"
		],
		'>', \$out, '2>&1');
	$node->poll_query_until('postgres',
		"SELECT count(*) = 1 FROM hoplock_candidates WHERE name = '$name' AND owner = '$owner'")
	  or die "$owner is no candidate";
	return { h => $h, out => \$out };
}

sub finish
{
	my ($w) = @_;
	$w->{h}->finish;
	chomp(my $o = ${ $w->{out} });
	return split / /, $o;
}

sub running { return sql("SELECT string_agg(owner, ',' ORDER BY owner) FROM hoplock_leases WHERE name = '$_[0]' AND NOT expired"); }

# --- the candidates' order, whichever slot frees --------------------------------
sql(q{SELECT hoplock_acquire('q', o, '1 h', slots => 3) FROM unnest('{h1,h2,h3}'::text[]) AS o});
is(running('q'), 'h1,h2,h3', 'three slots held');
my $low = start_waiter('q', 'low', 0);
usleep(2_000);
my $high = start_waiter('q', 'high', 5);
usleep(2_000);
my $high2 = start_waiter('q', 'high2', 5);
is(sql(q{SELECT string_agg(owner, ' ') FROM hoplock_candidates WHERE name = 'q'}),
	'high high2 low', 'candidates of a lease with slots, in their order');

is(sql(q{SELECT hoplock_acquire('q', 'plain', '1 h', slots => 3) IS NULL}), 't',
	'no slot free: a plain acquire gets NULL');

my $t0 = sql(q{SELECT (extract(epoch FROM clock_timestamp()) * 1000)::bigint FROM hoplock_release('q', 'h2')});
my ($who, $at) = finish($high);
is($who, 'high', 'the freed slot goes to the first candidate');
cmp_ok($at - $t0, '<', 500, "... woken within milliseconds (" . ($at - $t0) . ' ms)');
is(sql(q{SELECT hoplock_acquire('q', 'plain', '1 h', slots => 3) IS NULL}), 't',
	'a plain acquire does not take a slot ahead of the waiting candidates');

# a handoff of another slot's term goes to the next candidate
my $g3 = sql(q{SELECT generation FROM hoplock_leases WHERE name = 'q' AND owner = 'h3'});
is(sql(qq{SELECT owner FROM hoplock_handoff('q', 'h3', $g3)}), 'high2',
	'a handoff of a slot\'s term goes to the first candidate');
($who) = finish($high2);
is($who, 'high2', '... which takes it');
is(sql(q{SELECT hoplock_force_release('q')}), 't', 'force-release ends them all');
($who) = finish($low);
is($who, 'low', 'the last candidate gets a slot freed by force');
is(running('q'), 'low', 'only its term runs');

# --- a slot's term lapses: the worker announces it, with its slot ---------------
sql(q{SELECT hoplock_acquire('lapse', o, '300 ms', slots => 2) FROM unnest('{a,b}'::text[]) AS o});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 2 FROM hoplock_events(0) WHERE name = 'lapse' AND event = 'expired' AND slot IS NOT NULL}),
	'both slots\' terms are announced as expired, each with its slot');
is(sql(q{SELECT count(DISTINCT slot) FROM hoplock_events(0) WHERE name = 'lapse' AND event = 'expired'}), '2',
	'... two slots');
is(sql(q{SELECT owner FROM hoplock_acquire('lapse', 'c', '1 h', slots => 2)}), 'c', 'a lapsed slot is taken');

# --- a session-bound slot term ends with its session ----------------------------
my $bound = $node->background_psql('postgres');
$bound->query_safe(q{SELECT hoplock_acquire('bound', 'sb', '1 h', session_bound => true, slots => 2)});
sql(q{SELECT hoplock_acquire('bound', 'other', '1 h', slots => 2)});
is(running('bound'), 'other,sb', 'a session-bound slot term and another');
$bound->quit;
ok($node->poll_query_until('postgres', q{SELECT string_agg(owner, ',') = 'other' FROM hoplock_leases WHERE name = 'bound'}),
	'the session-bound slot term ends with its session; the other goes on');
is(sql(q{SELECT slot IS NOT NULL FROM hoplock_events(0) WHERE name = 'bound' AND event = 'released' AND owner = 'sb'}),
	't', '... released, with its slot');

# --- a storm: the history keeps every promise of slots ------------------------
# 8 clients acquire or wait (short ttls, some session-bound), renew and
# release, for a few seconds: with 6 owners for 3 slots (the slots
# contended), and with 2 owners for 8 slots (an owner's sessions racing
# each other).  Then the history must show at most N terms at any instant,
# one at a time per slot and per owner, and generations rising above every
# term that ended before; the event log one well-formed stream per slot.
# (Two sessions of one owner may renew its term at once: the loser's
# renewal raises 55P03, "renew it again", which is no part of the test.)
sql(q{CREATE FUNCTION storm_renew(n text, o text, ttl interval) RETURNS void LANGUAGE plpgsql AS $$
	BEGIN
		PERFORM hoplock_renew(n, o, ttl);
	EXCEPTION WHEN lock_not_available THEN
		NULL;
	END $$});
for my $storm ([ 'storm', 6, 3 ], [ 'storm8', 2, 8 ])
{
	my ($n, $owners, $slots) = @$storm;
	$node->pgbench(
		'--no-vacuum --client=8 --jobs=2 --time=4',
		0, [qr{processed: [1-9]}], [qr{^$}], "$n: a storm of slot calls ($owners owners, $slots slots)",
		{
			"072_slots_$n" => qq{
\\set o random(1, $owners)
\\set ttl random(20, 200)
\\set r random(1, 10)
SELECT hoplock_acquire('$n', 'o' || :o, (:ttl || ' ms')::interval, session_bound => :r = 1, slots => $slots) IS NULL;
SELECT CASE WHEN :r <= 3 THEN hoplock_wait('$n', 'o' || :o, (:ttl || ' ms')::interval, '50 ms', slots => $slots) END IS NULL;
SELECT storm_renew('$n', 'o' || :o, (:ttl || ' ms')::interval);
SELECT CASE WHEN :r > 5 THEN hoplock_release('$n', 'o' || :o) END;
}
		});
	ok($node->poll_query_until('postgres',
			qq{SELECT count(*) = 0 FROM hoplock_leases WHERE name = '$n' AND NOT expired}),
		"$n: the terms lapse");
	ok($node->poll_query_until('postgres',
			qq{SELECT count(*) = 0 FROM hoplock_history WHERE name = '$n' AND ended_at IS NULL}),
		"$n: ... and the worker announces every one");
	my $terms = sql(qq{SELECT count(*) FROM hoplock_history WHERE name = '$n'});
	cmp_ok($terms, '>', 50, "$n: $terms terms");
	is(sql(qq{SELECT count(*) FROM hoplock_history AS a
			   WHERE a.name = '$n'
			     AND (SELECT count(*) FROM hoplock_history AS b
			           WHERE b.name = '$n' AND b.acquired_at <= a.acquired_at
			             AND b.ended_at > a.acquired_at) > $slots}),
		'0', "$n: never more than $slots terms at once");
	is(sql(qq{SELECT count(*) FROM hoplock_history AS a JOIN hoplock_history AS b
			   ON a.name = b.name AND a.generation < b.generation
			  WHERE a.name = '$n' AND (a.slot = b.slot OR a.owner = b.owner)
			    AND b.acquired_at < a.ended_at AND a.acquired_at < b.ended_at}),
		'0', "$n: terms of one slot, or of one owner, never overlap");
	is(sql(qq{SELECT count(*) FROM hoplock_history AS a JOIN hoplock_history AS b
			   ON a.name = b.name AND a.ended_at <= b.acquired_at
			  WHERE a.name = '$n' AND a.generation >= b.generation}),
		'0', "$n: a term's generation is above that of every term that ended before it began");
	is(sql(qq{SELECT count(*) FROM hoplock_history WHERE name = '$n' AND (slot IS NULL OR slot NOT BETWEEN 1 AND $slots)}),
		'0', "$n: every term in a slot of 1 to $slots");
	# per slot: acquired(g), then exactly one released(g) or expired(g), then the next
	is(sql(qq{WITH e AS (
			   SELECT slot, event, generation,
			          lag(event) OVER w AS prev_event, lag(generation) OVER w AS prev_gen
			     FROM hoplock_events(0) WHERE name = '$n' AND event IN ('acquired', 'released', 'expired')
			   WINDOW w AS (PARTITION BY slot ORDER BY seq))
			 SELECT count(*) FROM e
			  WHERE (event = 'acquired' AND prev_event IS NOT NULL AND (prev_event = 'acquired' OR prev_gen >= generation))
			     OR (event <> 'acquired' AND (prev_event IS DISTINCT FROM 'acquired' OR prev_gen <> generation))}),
		'0', "$n: the event log is one well-formed stream per slot");
}

# --- the sweep forgets a free name with slots whole ---------------------------
# (its number of slots with its slots' rows: it bound the name only while
# it was in use)
$node->append_conf('postgresql.conf', 'hoplock.released_retention = 1');
$node->reload;
sql(q{SELECT hoplock_acquire('swept', 'a', '1 h', slots => 2)});
my $swept = sql(q{SELECT max(generation) FROM hoplock_history WHERE name = 'swept'});
sql(q{SELECT hoplock_release('swept', 'a')});
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM hoplock_internal.lease WHERE name LIKE 'swept%'}, 't'),
	'the sweep forgets the free name: the slot\'s row and the number of slots');
is(sql(qq{SELECT owner || ' ' || (generation > $swept) FROM hoplock_acquire('swept', 'b', '1 h')}),
	'b true', '... and the name is taken without slots, above its generations');

done_testing();
