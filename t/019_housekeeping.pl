# Housekeeping by the expiry worker, so that hoplock can live for years in
# a database: names released (or lapsed) longer than
# hoplock.released_retention ago are forgotten, in small batches, and the
# lease table returns to its steady size; a forgotten name that comes back
# still gets a generation above every one it had; the history keeps the
# newest hoplock.history_size terms; a term the worker ends is recorded as
# "expired" and counted in hoplock_stats.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('housekeeping');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.released_retention = 1
hoplock.history_size = 300
autovacuum_naptime = 1
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

my $names = 20000;

# One wave of short-lived names: each acquired and released, in batches
# of a thousand per transaction; returns name => generation.
sub wave
{
	my %gen;
	for (my $from = 1; $from <= $names; $from += 1000)
	{
		my $to = $from + 999;
		my $out = $node->safe_psql('postgres', qq{
			SELECT l.name, l.generation
			  FROM generate_series($from, $to) AS i,
			       LATERAL hoplock_acquire('job-' || i, 'worker', '1 h') AS l;
			SELECT count(*) FILTER (WHERE NOT hoplock_release('job-' || i, 'worker'))
			  FROM generate_series($from, $to) AS i;
		});
		my @lines = split /\n/, $out;
		my $not_released = pop @lines;
		die "$not_released releases failed" if $not_released ne '0';
		for (@lines)
		{
			my ($n, $g) = split /\|/;
			$gen{$n} = $g;
		}
	}
	return \%gen;
}

sub rows
{
	return $node->safe_psql('postgres',
		'SELECT count(*) FROM hoplock_internal.lease');
}

sub wait_forgotten
{
	$node->poll_query_until('postgres',
		"SELECT count(*) = 0 FROM hoplock_internal.lease WHERE name LIKE 'job-%'")
	  or die 'the released names were not forgotten';
}

sub table_pages
{
	$node->safe_psql('postgres', 'VACUUM hoplock_internal.lease');
	return $node->safe_psql('postgres',
		"SELECT pg_relation_size('hoplock_internal.lease') / 8192");
}

# A held lease, never forgotten, and a lease the worker will end.
$node->safe_psql('postgres', q{
	SELECT hoplock_acquire('kept', 'leader', '1 h');
	SELECT hoplock_acquire('lapses', 'leader', '500 ms');
});

my $first = wave();
is(scalar(keys %$first), $names, "$names names granted");
wait_forgotten();
pass('released names are forgotten after hoplock.released_retention');
is($node->safe_psql('postgres',
	"SELECT string_agg(name, ',' ORDER BY name) FROM hoplock_internal.lease"),
	'kept', 'the held lease stays; the lapsed one, announced, went too');
table_pages();

# The same names again: each one's generation is greater than before.
my $second = wave();
my @not_above = grep { $second->{$_} <= $first->{$_} } keys %$first;
is(scalar(@not_above), 0,
	'every forgotten name comes back with a greater generation')
  or diag("e.g. $not_above[0]: $first->{$not_above[0]} then $second->{$not_above[0]}");
wait_forgotten();

my $pages2 = table_pages();

# One more wave, after a vacuum (as autovacuum does): the table does not
# grow from wave to wave (a wave the table did not make room for would
# add its $names rows, far more than the margin).
my $third = wave();
wait_forgotten();
my $pages3 = table_pages();
cmp_ok($pages3, '<=', $pages2 * 1.1 + 8,
	"the table stays at its steady size ($pages2 pages, then $pages3)");
my @not_above3 = grep { $third->{$_} <= $second->{$_} } keys %$second;
is(scalar(@not_above3), 0, 'still monotone after three waves');

# The history keeps the newest hoplock.history_size terms (the running
# one besides).
$node->poll_query_until('postgres',
	'SELECT count(*) <= 301 FROM hoplock_internal.history')
  or die 'the history was not trimmed';
is($node->safe_psql('postgres', q{
	SELECT count(*) FILTER (WHERE name = 'kept' AND ended_at IS NULL)
	  FROM hoplock_history}),
	'1', 'a running term stays in the history');
# The terms of job names it keeps are all of the last wave (the
# generations that wave was granted): the older ones were dropped.
my @kept = map { [ split /\|/ ] } split /\n/, $node->safe_psql('postgres', q{
	SELECT name, generation FROM hoplock_history WHERE name LIKE 'job-%'});
my @older = grep { ($third->{ $_->[0] } // '') ne $_->[1] } @kept;
ok(@kept > 0 && @older == 0, 'the oldest terms were dropped: ' . scalar(@kept) . ' job terms kept, all of the last wave')
  or diag(scalar(@older) . ' older, e.g. ' . join('|', @{ $older[0] // [] }));

# The worker's "expired": in the history and the counters.
$node->safe_psql('postgres', 'SELECT hoplock_stats_reset()');
$node->safe_psql('postgres', q{SELECT hoplock_acquire('lapses2', 'leader', '200 ms')});
$node->poll_query_until('postgres', q{
	SELECT how = 'expired' FROM hoplock_internal.history WHERE name = 'lapses2'})
  or die 'the lapsed term was not recorded';
is($node->safe_psql('postgres', 'SELECT expiries, terms_begun FROM hoplock_stats'),
	'1|1', 'the expiry is counted');

# Free names stay free while the worker forgets them: an acquire of a
# released name whose row the sweep is deleting right now waits for that
# (as for an expiry being announced) rather than return NULL, and the
# forget wakes the name's hoplock_wait waiters as a release does.  Each
# client picks a name whose row another transaction is changing right now
# (its xmax is a transaction in progress): the worker's forget in flight.
{
	$node->safe_psql('postgres', 'CREATE TABLE probe (kind text, raced int, nulls int, slow int, slowest_ms int)');
	for my $kind ('a', 'w')
	{
		$node->safe_psql('postgres', qq{
			SELECT count(hoplock_acquire('free-$kind-' || i, 'o', '1 h')) FROM generate_series(0, 9999) i;
			SELECT count(hoplock_release('free-$kind-' || i, 'o')) FROM generate_series(0, 9999) i;
		});
	}
	my $racer = sub {
		my ($kind, $call) = @_;
		return qq{
		DO \$\$
		DECLARE
			t0 timestamptz := clock_timestamp();
			t timestamptz;
			ms int;
			raced int := 0;
			nulls int := 0;
			slow int := 0;
			slowest int := 0;
			nm text;
		BEGIN
			-- until the sweep has been through every name (none left as
			-- released by 'o'), at most 15 s: longer than the 10 s between
			-- two sweeps
			WHILE clock_timestamp() < t0 + interval '15 s'
			  AND EXISTS (SELECT FROM hoplock_internal.lease
			               WHERE name LIKE 'free-$kind-%' AND owner = 'o') LOOP
				SELECT name INTO nm FROM hoplock_internal.lease
				 WHERE name LIKE 'free-$kind-%' AND state = 'r' AND xmax::text <> '0'
				   AND pg_xact_status(xmax::text::xid8) = 'in progress'
				 LIMIT 1;
				IF nm IS NULL THEN
					PERFORM pg_sleep(0.001);
				ELSE
					t := clock_timestamp();
					IF $call IS NULL THEN
						nulls := nulls + 1;
					ELSE
						PERFORM hoplock_release(nm, 'c');
					END IF;
					ms := extract(epoch FROM clock_timestamp() - t) * 1000;
					slowest := greatest(slowest, ms);
					IF ms > 200 THEN
						slow := slow + 1;
					END IF;
					raced := raced + 1;
				END IF;
				COMMIT;
			END LOOP;
			INSERT INTO probe VALUES ('$kind', raced, nulls, slow, slowest);
		END \$\$;
		};
	};
	my $waiter = $node->background_psql('postgres');
	$waiter->query_until(qr/started/,
		"\\echo started\n" . $racer->('w', q{hoplock_wait(nm, 'c', '1 min', '5 s')}));
	$node->safe_psql('postgres', $racer->('a', q{hoplock_acquire(nm, 'c', '1 min')}));
	$node->poll_query_until('postgres', q{SELECT count(*) = 2 FROM probe})
	  or die 'the waiting loop did not finish';
	$waiter->quit;
	my ($raced, $nulls, $slow, $slowest) = split /\|/, $node->safe_psql('postgres',
		q{SELECT raced, nulls, slow, slowest_ms FROM probe WHERE kind = 'a'});
	my ($wraced, $wnulls, $wslow, $wslowest) = split /\|/, $node->safe_psql('postgres',
		q{SELECT raced, nulls, slow, slowest_ms FROM probe WHERE kind = 'w'});
	diag("hoplock_acquire of a name being forgotten: $raced, $nulls NULL, slowest $slowest ms; "
		  . "hoplock_wait: $wraced, $wnulls NULL, $wslow over 200 ms, slowest $wslowest ms");
	cmp_ok($raced, '>', 0, 'the acquiring client met names being forgotten');
	is($nulls, 0, 'no acquire of a free name returned NULL');
	cmp_ok($wraced, '>', 0, 'the waiting client met names being forgotten');
	is($wnulls, 0, 'no hoplock_wait of a free name returned NULL');
	is($wslow, 0, 'none of them waited more than 200 ms: the forget woke them');
	$node->safe_psql('postgres', 'DROP TABLE probe');
}

# One released name that a user's foreign key references cannot be
# forgotten: it is reported and skipped, and stops neither the forgetting
# of the others nor the trimming of the history.
$node->append_conf('postgresql.conf', 'hoplock.history_size = 10');
$node->reload;
my $log_offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	CREATE TABLE app_job (lease text REFERENCES hoplock_internal.lease (name));
	SELECT count(hoplock_acquire('ref-' || i, 'o', '1 h')) FROM generate_series(0, 40) i;
	INSERT INTO app_job VALUES ('ref-0');
	SELECT count(hoplock_release('ref-' || i, 'o')) FROM generate_series(0, 40) i;
});
my $swept = 0;
for (1 .. 60)
{
	$swept = $node->safe_psql('postgres', q{
		SELECT (SELECT string_agg(name, ',') FROM hoplock_internal.lease
		         WHERE name LIKE 'ref-%') = 'ref-0'
		   AND (SELECT count(*) FROM hoplock_internal.history) <= 11}) eq 't';
	last if $swept;
	sleep 1;
}
ok($swept, 'the other released names are forgotten and the history trimmed')
  or diag($node->safe_psql('postgres', q{
	SELECT (SELECT count(*) FROM hoplock_internal.lease WHERE name LIKE 'ref-%'),
	       (SELECT count(*) FROM hoplock_internal.history)}));
is($node->safe_psql('postgres',
	"SELECT count(*) FROM hoplock_internal.lease WHERE name = 'ref-0'"),
	'1', 'the referenced name stays');
my $hk_log = slurp_file($node->logfile, $log_offset);
like($hk_log, qr/could not forget lease "ref-0"/,
	'the referenced name is reported');
unlike($hk_log, qr/ERROR:.*violates foreign key/,
	'with no error from the worker');
is($node->safe_psql('postgres',
	"SELECT state <> 'failing' FROM hoplock_workers WHERE datname = 'postgres'"),
	't', 'the worker is not failing');

# From here hoplock.released_retention = 0 (checked at the end, the
# trimming of the history meanwhile).
$node->append_conf('postgresql.conf', 'hoplock.released_retention = 0');
$node->reload;
$node->safe_psql('postgres', q{
	SELECT hoplock_acquire('stays', 'o', '1 h');
	SELECT hoplock_release('stays', 'o');
});
my $stays_released = time();

# Likewise a term of the history that a user's foreign key references: it
# stays, reported once, the others are trimmed, and the worker goes on
# announcing expiries without a pause.
$log_offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	CREATE TABLE app_audit (name text, generation bigint,
		FOREIGN KEY (name, generation) REFERENCES hoplock_internal.history (name, generation));
	SELECT hoplock_acquire('audited', 'o', '1 h');
	SELECT hoplock_release('audited', 'o');
	INSERT INTO app_audit SELECT name, generation FROM hoplock_internal.history WHERE name = 'audited';
	SELECT count(hoplock_acquire('later-' || i, 'o', '1 h')) FROM generate_series(1, 30) i;
	SELECT count(hoplock_release('later-' || i, 'o')) FROM generate_series(1, 30) i;
});
my $trimmed = 0;
my $failing = 0;
for (1 .. 120)
{
	$failing++ if $node->safe_psql('postgres',
		"SELECT count(*) FROM hoplock_workers WHERE datname = 'postgres' AND state = 'failing'") ne '0';
	$trimmed = $node->safe_psql('postgres', q{
		SELECT count(*) <= 11 FROM hoplock_internal.history}) eq 't';
	last if $trimmed;
	usleep(250_000);
}
ok($trimmed, 'the history is trimmed around the referenced term')
  or diag($node->safe_psql('postgres', 'SELECT count(*) FROM hoplock_internal.history'));
is($node->safe_psql('postgres',
	"SELECT count(*) FROM hoplock_internal.history WHERE name = 'audited'"),
	'1', 'the referenced term stays');
is($failing, 0, 'the worker was never failing');
$hk_log = slurp_file($node->logfile, $log_offset);
like($hk_log, qr/could not drop a row of table "hoplock_internal\.history"/,
	'the referenced term is reported');
unlike($hk_log, qr/ERROR:.*violates foreign key/, 'with no error from the worker');

# With hoplock.released_retention = 0, nothing is forgotten: 'stays',
# released before the history section above, is still there more than
# 12 s later (a sweep every 10 s).
my $stays_for = time() - $stays_released;
usleep(int((12 - $stays_for) * 1_000_000)) if $stays_for < 12;
is($node->safe_psql('postgres',
	"SELECT count(*) FROM hoplock_internal.lease WHERE name = 'stays'"),
	'1', 'with hoplock.released_retention = 0 released names stay');

ok(!$node->log_contains('TRAP|server process .* was terminated'),
	'no crash');
$node->stop;
done_testing();
