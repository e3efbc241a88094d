# Debian's pg_cron 1.4 (postgresql-15-cron) with the gate of examples/pg_cron,
# on a server that preloads 'pg_cron,hoplock'.  Jobs every minute whose
# critical sections take 70 s, observed over three minutes:
#  - pg_cron itself neither runs a job twice at once nor skips: it queues the
#    run that falls due while the previous one is running, and starts it the
#    moment that one ends (an ungated job shows it);
#  - jobs gated by one lease -- two in the lease's database, on two
#    schedules, and one in another database that gates through it with
#    cron_gate.run_via -- never run their sections together; a run due
#    while the lease is held is skipped, the run pg_cron queued included,
#    so sections begin only on the minute; every run of theirs is
#    accounted for in cron_gate.run_details, each skip with its reason;
#  - a job in another database gated by a lease of the same name in its
#    own database is not excluded: its section overlaps theirs;
#  - a job's session that dies mid-run (pg_terminate_backend) takes its
#    term with it at once, with background workers
#    (cron.use_background_workers = on) and with libpq connections, for a
#    lease in the job's own database and for one behind dblink; a section
#    that overruns its ttl keeps the lease held (fenced) until hoplock ends
#    its session, ttl + hoplock.hung_holder_timeout after the term began, and
#    its writes roll back -- behind dblink too, where the lease is free at
#    that moment and the section fails when it tries to commit.
#  - once per tick: two jobs standing for two nodes, one of them a few
#    seconds late each minute (node-a in odd minutes, node-b in even ones),
#    run the same body: acquire with min_hold (30 s, the period is 1 min),
#    do the work, release.  Every minute exactly one of them does the work,
#    whichever comes first; the other finds the name kept.  Without
#    min_hold (the control) both do it, every minute.  The same through
#    cron_gate.run(..., min_hold), which logs the skip and why.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('cron');
# (PostgreSQL 13's PostgresNode has no config_data: the pg_config on PATH is
# the same installation)
my $pkglibdir = $node->can('config_data') ? $node->config_data('--pkglibdir') : `pg_config --pkglibdir`;
chomp $pkglibdir;
plan skip_all => 'pg_cron is not installed (Debian: apt-get install postgresql-15-cron)'
  unless -f "$pkglibdir/pg_cron.so";
plan skip_all => 'dblink is not installed' unless -f "$pkglibdir/dblink.so";

$node->init;
my $host = $node->host;
my $port = $node->port;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'pg_cron,hoplock'
cron.database_name = 'postgres'
cron.host = '$host'
cron.use_background_workers = on
max_worker_processes = 20
hoplock.hung_holder_timeout = '2s'
});
$node->start;

my $lease_db = "host=$host port=$port dbname=postgres";
my $gate = slurp_file('examples/pg_cron/gate.sql');
my $gate_remote = slurp_file('examples/pg_cron/gate_remote.sql');
my $run_details = slurp_file('examples/pg_cron/run_details.sql');

# A section records when it began and ended in "sections" (database
# postgres) through a connection of its own, so that a section still
# running, or one that never commits, is seen too.
my $test_objects = qq{
CREATE TABLE marks (what text NOT NULL);
CREATE FUNCTION test_section(job text, secs float8) RETURNS void LANGUAGE plpgsql AS \$f\$
DECLARE
    n integer;
BEGIN
    SELECT s.id INTO n FROM cron_gate.dblink('$lease_db',
        format('INSERT INTO sections (job, db, pid, began) VALUES (%L, %L, %s, clock_timestamp()) RETURNING id',
               job, current_database(), pg_backend_pid())) AS s(id integer);
    PERFORM pg_sleep(secs);
    PERFORM cron_gate.dblink_exec('$lease_db',
        format('UPDATE sections SET ended = clock_timestamp() WHERE id = %s', n));
END
\$f\$;
};

$node->safe_psql('postgres', q{
	CREATE SCHEMA hoplock;
	CREATE EXTENSION hoplock SCHEMA hoplock;
	CREATE EXTENSION pg_cron;
	CREATE DATABASE other;
	CREATE TABLE sections (id serial PRIMARY KEY, job text NOT NULL, db name NOT NULL,
	                       pid integer NOT NULL, began timestamptz NOT NULL, ended timestamptz);
});
$node->safe_psql('postgres', $gate);
$node->safe_psql('postgres', $gate_remote);
$node->safe_psql('postgres', $run_details);
$node->safe_psql('postgres', $test_objects);
$node->safe_psql('other', 'CREATE SCHEMA hoplock; CREATE EXTENSION hoplock SCHEMA hoplock;');
$node->safe_psql('other', $gate);
$node->safe_psql('other', $gate_remote);
$node->safe_psql('other', $test_objects);

# Once per tick.  The body a node's job runs: the work (a row in
# tick_runs) only if the lease can be had; min_hold keeps it from the other
# node for the rest of the tick once the work is done and the lease
# released.  tick_node stands for a node's schedule: node-a's job runs 4 s
# late in odd minutes, node-b's in even ones.
$node->safe_psql('postgres', q{
CREATE TABLE tick_runs (lease text NOT NULL, node text NOT NULL, ran boolean NOT NULL,
                        at timestamptz NOT NULL DEFAULT clock_timestamp());
CREATE FUNCTION once_per_tick(tick_lease text, node text, hold interval) RETURNS void
LANGUAGE plpgsql AS $f$
BEGIN
    IF (hoplock.hoplock_acquire(tick_lease, node, '1 min', min_hold => hold)).generation IS NULL THEN
        INSERT INTO tick_runs (lease, node, ran) VALUES (tick_lease, node, false);
        RETURN;
    END IF;
    INSERT INTO tick_runs (lease, node, ran) VALUES (tick_lease, node, true);
    PERFORM hoplock.hoplock_release(tick_lease, node);
END
$f$;
CREATE PROCEDURE tick_node(tick_lease text, node text, hold interval)
LANGUAGE plpgsql AS $p$
BEGIN
    PERFORM pg_sleep(CASE WHEN (extract(epoch FROM date_trunc('minute', now()))::bigint / 60 % 2 = 0)
                              = (node = 'node-b')
                          THEN 4 ELSE 0 END);
    COMMIT;
    IF tick_lease = 'tick-gate' THEN
        CALL cron_gate.run(tick_lease, '1 min',
            format('INSERT INTO tick_runs (lease, node, ran) VALUES (%L, %L, true)', tick_lease, node),
            hold);
    ELSE
        PERFORM once_per_tick(tick_lease, node, hold);
    END IF;
END
$p$;
});

sub q_pg { return $node->safe_psql('postgres', $_[0]); }

# Poll $sql (in postgres) every 50 ms until it returns 't'; false after
# $timeout seconds.
sub wait_until
{
	my ($sql, $timeout, $db) = @_;
	my $until = time() + $timeout;
	while (time() < $until)
	{
		return 1 if $node->safe_psql($db // 'postgres', $sql) eq 't';
		usleep(50_000);
	}
	return 0;
}

# The run that holds lease $name (the newest 'running' row of
# cron_gate.log): the job's backend, its database, and the term.
sub running_run
{
	my ($name) = @_;
	my ($pid, $db, $owner, $gen) = split /\|/, q_pg(qq{
		SELECT pid, database, owner, generation FROM cron_gate.log
		 WHERE lease = '$name' AND outcome = 'running' ORDER BY id DESC LIMIT 1});
	return { pid => $pid || 0, db => $db // '', owner => $owner // '', generation => $gen || 0 };
}

# --- A job's session dies mid-run ------------------------------------------
# Two jobs hold their leases for 10 minutes each: one in the lease's
# database, one in "other" through run_via.  Terminating the job's backend
# must end its term at once: long before the ttl.
sub session_death
{
	my ($mode) = @_;
	my ($local, $remote) = ("die-local-$mode", "die-remote-$mode");
	ok(wait_until(qq{SELECT count(*) = 2 FROM hoplock.hoplock_leases
		WHERE name IN ('$local', '$remote') AND NOT expired AND owner LIKE 'cron:%'}, 90),
		"$mode: both jobs hold their leases");
	my $l = running_run($local);
	my $r = running_run($remote);

	my $backend = $mode eq 'bgw' ? q{backend_type = 'pg_cron'}
	  : q{backend_type = 'client backend' AND application_name = 'pg_cron'};
	is(q_pg(qq{SELECT string_agg(datname, ',' ORDER BY datname) FROM pg_stat_activity
		WHERE pid IN ($l->{pid}, $r->{pid}) AND $backend}), 'other,postgres',
		"$mode: the jobs run in pg_cron's " . ($mode eq 'bgw' ? 'background workers' : 'libpq sessions'));
	is(q_pg(qq{SELECT holder_pid FROM hoplock.hoplock_leases WHERE name = '$local'}), $l->{pid},
		"$mode: the local term is bound to the job's own session");
	isnt(q_pg(qq{SELECT holder_pid FROM hoplock.hoplock_leases WHERE name = '$remote'}), $r->{pid},
		"$mode: the remote term is bound to the job's gate session in the lease's database");

	# the clock is read first, then both are terminated
	my ($killed_at) = split /\|/, q_pg(qq{SELECT clock_timestamp(),
		pg_terminate_backend($l->{pid}), pg_terminate_backend($r->{pid})});
	for my $t ([ $local, $l ], [ $remote, $r ])
	{
		my ($name, $run) = @$t;
		ok(wait_until(qq{SELECT ended_at IS NOT NULL FROM hoplock.hoplock_history
			WHERE name = '$name' AND generation = $run->{generation}}, 30),
			"$mode: $name: the term ended");
		my ($how, $after) = split /\|/, q_pg(qq{SELECT how,
			round(extract(epoch FROM ended_at - '$killed_at')::numeric * 1000)
			FROM hoplock.hoplock_history WHERE name = '$name' AND generation = $run->{generation}});
		is($how, 'session ended', "$mode: $name: ended with the session");
		ok($after ne '' && $after < 1000, "$mode: $name: ${after} ms after the termination (ttl 10 min)");
		is(q_pg(qq{SELECT hoplock.hoplock_holder('$name') IS NULL}), 't', "$mode: $name: nobody holds it");
		ok(wait_until(qq{SELECT gate = 'aborted' AND status = 'failed' FROM cron_gate.run_details
			WHERE job_pid = $run->{pid} AND database = '$run->{db}'}, 150),
			"$mode: $name: cron_gate.run_details shows the run aborted, pg_cron has it failed");
	}
}

# With background workers: @reboot jobs run as soon as the scheduler starts.
q_pg(qq{
	SELECT cron.schedule('die-local-bgw', '\@reboot',
		\$\$CALL cron_gate.run('die-local-bgw', '10 min', 'SELECT pg_sleep(120)')\$\$);
	SELECT cron.schedule_in_database('die-remote-bgw', '\@reboot',
		\$\$CALL cron_gate.run_via('$lease_db', 'die-remote-bgw', '10 min', 'SELECT pg_sleep(120)')\$\$,
		'other');
});
$node->restart;
session_death('bgw');
q_pg(q{SELECT cron.unschedule(jobid) FROM cron.job});

# The rest with libpq connections, pg_cron's default.
$node->adjust_conf('postgresql.conf', 'cron.use_background_workers', 'off');
$node->restart;

# --- Scheduling the minute jobs --------------------------------------------
# They must all be known to the scheduler before the minute they first run
# in begins: leave at least 6 s.
my $to_minute = q_pg(q{SELECT 60 - extract(epoch FROM clock_timestamp() - date_trunc('minute', clock_timestamp()))});
usleep(int(($to_minute + 0.5) * 1_000_000)) if $to_minute < 6;
my $m = q_pg(q{SELECT date_trunc('minute', clock_timestamp()) + interval '1 min'});
note "first minute: $m";
# B runs every other minute, starting with the second: so the first minute
# has two contenders, A and D, and the one that wins is due again while its
# section runs.
my $b_minutes = q_pg(qq{SELECT extract(minute FROM '$m'::timestamptz AT TIME ZONE 'UTC')::int % 2}) ? '*/2' : '1-59/2';
sub gated { my ($job, $secs) = @_; return "SELECT test_section(''$job'', $secs)"; }
q_pg(q{
	BEGIN;
	SELECT cron.schedule('A', '* * * * *',
		$$CALL cron_gate.run('report', '5 min', '} . gated('A', 70) . q{')$$);
	SELECT cron.schedule('B', '} . $b_minutes . q{ * * * *',
		$$CALL cron_gate.run('report', '5 min', '} . gated('B', 70) . q{')$$);
	SELECT cron.schedule_in_database('D', '* * * * *',
		$$CALL cron_gate.run_via('} . $lease_db . q{', 'report', '5 min', '} . gated('D', 70) . q{')$$,
		'other');
	SELECT cron.schedule_in_database('C', '* * * * *',
		$$CALL cron_gate.run('report', '5 min', '} . gated('C', 70) . q{')$$, 'other');
	SELECT cron.schedule('F', '* * * * *', $$SELECT test_section('F', 70)$$);
	SELECT cron.schedule('die-local-libpq', '* * * * *',
		$$CALL cron_gate.run('die-local-libpq', '10 min', 'SELECT pg_sleep(120)')$$);
	SELECT cron.schedule_in_database('die-remote-libpq', '* * * * *',
		$$CALL cron_gate.run_via('} . $lease_db . q{', 'die-remote-libpq', '10 min', 'SELECT pg_sleep(120)')$$,
		'other');
	SELECT cron.schedule('overrun-local', '* * * * *',
		$$CALL cron_gate.run('overrun-local', '15 s',
		  'INSERT INTO marks VALUES (''overrun-local''); SELECT pg_sleep(60)')$$);
	SELECT cron.schedule_in_database('overrun-remote', '* * * * *',
		$$CALL cron_gate.run_via('} . $lease_db . q{', 'overrun-remote', '15 s',
		  'INSERT INTO marks VALUES (''overrun-remote''); SELECT pg_sleep(25)')$$, 'other');
	SELECT cron.schedule('tick-a', '* * * * *', $$CALL tick_node('tick', 'node-a', '30 s')$$);
	SELECT cron.schedule('tick-b', '* * * * *', $$CALL tick_node('tick', 'node-b', '30 s')$$);
	SELECT cron.schedule('tick-ctl-a', '* * * * *', $$CALL tick_node('tick-ctl', 'node-a', NULL)$$);
	SELECT cron.schedule('tick-ctl-b', '* * * * *', $$CALL tick_node('tick-ctl', 'node-b', NULL)$$);
	SELECT cron.schedule('tick-gate-a', '* * * * *', $$CALL tick_node('tick-gate', 'node-a', '30 s')$$);
	SELECT cron.schedule('tick-gate-b', '* * * * *', $$CALL tick_node('tick-gate', 'node-b', '30 s')$$);
	COMMIT;
});

# --- The session tests, in the first minute ----------------------------------
ok(wait_until(q{SELECT count(*) = 2 FROM hoplock.hoplock_leases
	WHERE name IN ('overrun-local', 'overrun-remote') AND NOT expired AND owner LIKE 'cron:%'}, 90),
	'overrun: both jobs hold their leases');
my $o = running_run('overrun-local');
my $or = running_run('overrun-remote');
my $gate_pid = q_pg(q{SELECT holder_pid FROM hoplock.hoplock_leases WHERE name = 'overrun-remote'}) || 0;

session_death('libpq');

# A section that overruns its ttl (15 s): the lapsed term stays fenced, so
# nobody can take the lease, until hoplock ends the job's session at
# ttl + hung_holder_timeout (2 s); its insert rolls back.
ok(wait_until(q{SELECT expired FROM hoplock.hoplock_leases WHERE name = 'overrun-local'}, 20),
	'overrun: its term lapses');
my ($refused, $blocked_by, $alive) = split /\|/, q_pg(qq{
	SELECT hoplock.hoplock_acquire('overrun-local', 'intruder', '1 min') IS NULL,
	       (SELECT blocked_by FROM hoplock.hoplock_leases WHERE name = 'overrun-local'),
	       EXISTS (SELECT FROM pg_stat_activity WHERE pid = $o->{pid})});
is($alive, 't', 'overrun: the job still runs after its ttl');
is($refused, 't', 'overrun: and nobody can take the lease meanwhile');
is($blocked_by, $o->{pid}, 'overrun: hoplock_leases names the job as blocking it');
ok(wait_until(qq{SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $o->{pid})}, 10),
	'overrun: hoplock ends the job');
my $ended = q_pg(q{SELECT extract(epoch FROM clock_timestamp() - acquired_at)
	FROM hoplock.hoplock_history WHERE name = 'overrun-local' AND owner LIKE 'cron:%' ORDER BY generation DESC LIMIT 1});
cmp_ok($ended, '>=', 17, sprintf('overrun: not before ttl + hung_holder_timeout (%.1f s after its term began)', $ended));
cmp_ok($ended, '<', 18.5, 'overrun: and not much later');
is(q_pg(q{SELECT hoplock.hoplock_acquire('overrun-local', 'intruder', '1 min') IS NOT NULL}), 't',
	'overrun: then the lease can be had');
q_pg(q{SELECT hoplock.hoplock_release('overrun-local', 'intruder')});
is(q_pg(q{SELECT count(*) FROM marks WHERE what = 'overrun-local'}), '0', 'overrun: its insert rolled back');

# The same behind dblink: the gate session, which fences the term in the
# lease's database, is ended; the lease is free while the section still
# runs in "other"; the section then fails instead of committing.
ok(wait_until(qq{SELECT NOT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $gate_pid)}, 10),
	'overrun via dblink: hoplock ends the gate session');
($alive, my $took) = split /\|/, q_pg(qq{
	SELECT EXISTS (SELECT FROM pg_stat_activity WHERE pid = $or->{pid}),
	       hoplock.hoplock_acquire('overrun-remote', 'intruder', '1 min') IS NOT NULL});
is($alive, 't', 'overrun via dblink: the section still runs in the other database');
is($took, 't', 'overrun via dblink: the lease is free (ttl + hung_holder_timeout)');
q_pg(q{SELECT hoplock.hoplock_release('overrun-remote', 'intruder')});
ok(wait_until(qq{SELECT status = 'failed' AND gate = 'aborted' AND return_message LIKE '%cron_gate%'
	FROM cron_gate.run_details WHERE job_pid = $or->{pid} AND database = 'other'}, 30),
	'overrun via dblink: the section fails when it finds its gate session gone');
is($node->safe_psql('other', q{SELECT count(*) FROM marks WHERE what = 'overrun-remote'}), '0',
	'overrun via dblink: its insert rolled back');

q_pg(q{SELECT cron.unschedule(jobname) FROM cron.job WHERE jobname IN
	('die-local-libpq', 'die-remote-libpq', 'overrun-local', 'overrun-remote')});

# --- Three minutes of the gated jobs -----------------------------------------
# Until the third minute's runs have passed the gate (A and D in postgres,
# C in other) and F's second run is under way.
my $m2 = q_pg(qq{SELECT '$m'::timestamptz + interval '2 min'});
ok(wait_until(qq{SELECT (SELECT count(*) FROM cron_gate.log WHERE lease = 'report' AND due = '$m2') = 2
		AND (SELECT count(*) FROM sections WHERE job = 'F') = 2},
	q_pg(qq{SELECT extract(epoch FROM '$m2'::timestamptz + interval '30 s' - clock_timestamp())})),
	'the third minute\'s runs passed the gate');
ok(wait_until(qq{SELECT count(*) = 1 FROM cron_gate.log WHERE lease = 'report' AND due = '$m2'}, 10, 'other'),
	'and C\'s');

# Sections as seconds from the first minute.
sub sections
{
	my ($where) = @_;
	my @rows;
	for (split /\n/, q_pg(qq{
		SELECT job, extract(epoch FROM began - '$m'), coalesce(extract(epoch FROM ended - '$m')::text, '')
		  FROM sections WHERE $where ORDER BY began}))
	{
		my ($job, $b, $e) = split /\|/;
		push @rows, { job => $job, began => $b, ended => ($e eq '' ? undef : $e) };
	}
	return @rows;
}
sub show { return join(', ', map { sprintf('%s %.1f-%s', $_->{job}, $_->{began},
	defined $_->{ended} ? sprintf('%.1f', $_->{ended}) : 'running') } @_); }

# --- pg_cron queues, it does not skip --------------------------------------
my @f = sections(q{job = 'F'});
note 'F (not gated): ' . show(@f);
ok(defined $f[0]{ended} && $f[0]{ended} > 60, 'F\'s first run went on past the next minute');
cmp_ok($f[1]{began}, '>=', $f[0]{ended}, 'pg_cron did not start F again while it ran');
cmp_ok($f[1]{began} - $f[0]{ended}, '<', 3,
	'it started the run that fell due meanwhile the moment the first one ended');

# --- One lease, three jobs, two databases ----------------------------------
my @g = sections(q{job IN ('A', 'B', 'D')});
note 'A, B, D (lease "report" in postgres): ' . show(@g);
is(scalar(@g), 2, 'two sections in three minutes');
my $overlaps = 0;
for my $i (1 .. $#g)
{
	$overlaps++ if !defined $g[ $i - 1 ]{ended} || $g[ $i - 1 ]{ended} > $g[$i]{began};
}
is($overlaps, 0, 'they never overlap');
cmp_ok($g[0]{ended} - $g[0]{began}, '>', 60, 'though each is longer than the period');
ok($g[0]{began} >= 0 && $g[0]{began} < 5, 'the first began on the first minute');
ok($g[1]{began} >= 120 && $g[1]{began} < 125,
	'the next on the third: the runs due meanwhile were skipped, none queued');

my @runs = split /\n/, q_pg(qq{
	SELECT jobname, extract(epoch FROM start_time - '$m'), status, coalesce(gate, '-'), coalesce(reason, '')
	  FROM cron_gate.run_details
	 WHERE jobname IN ('A', 'B', 'D') AND start_time >= '$m'
	 ORDER BY start_time});
note join("\n", 'runs of A, B, D (s from the first minute|status|gate|reason):', @runs);
is(scalar(@runs), 7, 'A and D ran every minute, B once');
is(scalar(grep { (split /\|/)[3] eq '-' } @runs), 0, 'every run of theirs shows what the gate did');
my @skips = grep { (split /\|/)[3] eq 'skipped' } @runs;
is(scalar(@skips), 5, 'all but the two that ran were skipped');
is(scalar(grep { (split /\|/)[2] ne 'succeeded' } @skips), 0,
	'pg_cron itself reports each skip as succeeded');
my @late = grep { my $t = (split /\|/)[1]; $t - 60 * int($t / 60) > 5 } @runs;
is(scalar(@late), 1, 'one run started late: the one pg_cron queued behind the first section');
like($late[0] // '', qr/\|skipped\|due at .* while cron:\S+ held the lease/,
	'it was skipped: due while the lease was held');
my $late_after = ((split /\|/, $late[0] // '0')[1]) - $g[0]{ended};
ok($late_after >= 0 && $late_after < 3,
	sprintf('it started as the first section ended (%.2f s after)', $late_after));

my ($cross) = q_pg(q{
	SELECT count(*) FROM cron_gate.log
	 WHERE lease = 'report' AND outcome = 'skipped' AND owner LIKE 'cron:%'
	   AND split_part(owner, ':', 2) <> database});
cmp_ok($cross, '>', 0, "the lease excluded jobs across databases ($cross skips for a holder in the other one)");
is(q_pg(q{SELECT count(DISTINCT due) FROM cron_gate.log WHERE lease = 'report' AND database = 'other'}), '3',
	'D, in database other, went through the gate in postgres every minute');

# --- Once per tick ------------------------------------------------------------
# Three minutes; in each, the run that comes first does the work.
ok(wait_until(qq{SELECT (SELECT count(*) FROM tick_runs WHERE lease IN ('tick', 'tick-ctl') AND at >= '$m2') = 4
		AND (SELECT count(*) FROM cron_gate.log WHERE lease = 'tick-gate' AND due = '$m2' AND outcome <> 'running') = 2},
	q_pg(qq{SELECT extract(epoch FROM '$m2'::timestamptz + interval '40 s' - clock_timestamp())})),
	'once per tick: the third minute\'s runs are done');
q_pg(q{SELECT cron.unschedule(jobname) FROM cron.job WHERE jobname LIKE 'tick-%'});
for my $lease ('tick', 'tick-ctl', 'tick-gate')
{
	note "$lease: " . join(', ', split /\n/, q_pg(qq{
		SELECT node || (CASE WHEN ran THEN ' ran ' ELSE ' skipped ' END)
		       || round(extract(epoch FROM at - '$m')::numeric, 1)
		  FROM tick_runs WHERE lease = '$lease' AND at >= '$m' ORDER BY at}));
}
# per minute: the node that came first, and the nodes that did the work
my @ticks = split /\n/, q_pg(qq{
	SELECT extract(epoch FROM t - '$m')::int,
	       CASE WHEN extract(epoch FROM t)::bigint / 60 % 2 = 0 THEN 'node-a' ELSE 'node-b' END,
	       (SELECT coalesce(string_agg(node, ',' ORDER BY at), '') FROM tick_runs
	         WHERE lease = 'tick' AND ran AND at >= t AND at < t + interval '1 min'),
	       (SELECT coalesce(string_agg(node, ',' ORDER BY at), '') FROM tick_runs
	         WHERE lease = 'tick-ctl' AND ran AND at >= t AND at < t + interval '1 min'),
	       (SELECT coalesce(string_agg(node, ',' ORDER BY at), '') FROM tick_runs
	         WHERE lease = 'tick-gate' AND ran AND at >= t AND at < t + interval '1 min'),
	       (SELECT count(*) FROM cron_gate.log WHERE lease = 'tick-gate' AND due = t
	           AND outcome = 'skipped' AND reason LIKE '%its hold keeps the lease until%')
	  FROM generate_series('$m'::timestamptz, '$m2', '1 min') AS t});
is(scalar(@ticks), 3, 'once per tick: three minutes');
for (@ticks)
{
	my ($at, $first, $tick, $ctl, $gated, $kept) = split /\|/;
	my $second = $first eq 'node-a' ? 'node-b' : 'node-a';
	is($tick, $first, "once per tick, minute at $at s: only $first, which came first, did the work");
	is($ctl, "$first,$second", "once per tick, minute at $at s: without min_hold, both did");
	is($gated, $first, "once per tick, minute at $at s: cron_gate.run with min_hold ran $first only");
	is($kept, 1, "once per tick, minute at $at s: and logged $second skipped, the lease kept by the hold");
}
# The hold ends 30 s after the acquire, which is a moment after pg_cron
# starts the job: on a loaded machine seconds into the minute.  Each freed
# event is measured against its own term's acquire.
my @freed = split /\n/, q_pg(qq{
	SELECT floor(extract(epoch FROM h.acquired_at - '$m')),
	       round(extract(epoch FROM e.at - h.acquired_at)::numeric, 2)
	  FROM hoplock.hoplock_events(0) AS e
	  JOIN hoplock.hoplock_history AS h USING (name, generation)
	 WHERE e.name = 'tick' AND e.event = 'freed' AND e.at < '$m2'
	 ORDER BY e.seq});
note 'tick freed (s from the first minute to the acquire|s from the acquire): ' . join(', ', @freed);
is(join(',', map { my ($a) = split /\|/; $a < 60 ? 0 : $a < 120 ? 1 : 2 } @freed), '0,1',
	'once per tick: the worker announced the end of the holds of the first two minutes');
is(scalar(grep { my (undef, $d) = split /\|/; $d >= 30 && $d < 31 } @freed), 2,
	'once per tick: each within a second of its hold\'s end, 30 s after its acquire');

# --- Same name, another database: not excluded -----------------------------
my @c = sections(q{job = 'C'});
note 'C (lease "report" in other): ' . show(@c);
ok(@c && $c[0]{began} < $g[0]{ended} && $g[0]{began} < $c[0]{ended},
	'C, gated by a lease named "report" in its own database, ran at the same time');
my @c_late = split /\n/, $node->safe_psql('other', qq{SELECT extract(epoch FROM at - '$m') FROM cron_gate.log
	WHERE lease = 'report' AND outcome = 'skipped' AND reason LIKE 'due at%'});
is(scalar(@c_late), 1, 'its own gate skipped one run: due while C\'s lease was held');
ok(@c_late && $c_late[0] >= $c[0]{ended} && $c_late[0] - $c[0]{ended} < 3,
	'the run pg_cron queued behind C\'s section, started as it ended');

$node->stop;
done_testing();
