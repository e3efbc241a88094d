#!/usr/bin/perl
# bench/bench.pl: hoplock's benchmarks, run by bench/run (make bench,
# make bench-quick) against a scratch server it was given (PGHOST, PGPORT).
#
# Every comparison is measured side by side in the same run.  Cost per call
# is the backend's own CPU time (/proc/self/schedstat, read by the server),
# net of an empty loop, so other processes' load does not inflate it; each
# figure is repeated and reported as min / median / max.
#
#   bench.pl [--quick] --out DIR
use strict;
use warnings;
use DBI;
use IO::Select;
use JSON::PP;
use Time::HiRes qw(time usleep);
use Time::Local qw(timegm);
use Getopt::Long;
use File::Basename qw(dirname);

my $quick = 0;
my $out = dirname($0);
GetOptions('quick' => \$quick, 'out=s' => \$out) or die "usage: $0 [--quick] [--out DIR]\n";
my $here = dirname($0);

# Sizes: full run, quick run
my %size = $quick
  ? (reps => 3, n => 2000, nsetup => 1000, nsync => 100, pgbench_s => 1, pgbench_rounds => 1, pairs => 3, pair_s => 1,
	clients => [ 1, 8 ], lat_rounds => 30, lat_expiries => 40,
	many => 100_000, renews => 100_000, idle_s => 3)
  : (reps => 5, n => 20_000, nsetup => 10_000, nsync => 1000, pgbench_s => 3, pgbench_rounds => 3, pairs => 20, pair_s => 2,
	clients => [ 1, 8, 32 ], lat_rounds => 200, lat_expiries => 200,
	many => 1_000_000, renews => 1_000_000, idle_s => 20);

my $dsn = sprintf('dbi:Pg:host=%s;port=%s;dbname=postgres', $ENV{PGHOST}, $ENV{PGPORT});
sub connect_db
{
	return DBI->connect($dsn, 'postgres', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0, pg_server_prepare => 0 });
}
my $db = connect_db();
sub one { return ($db->selectrow_array($_[0]))[0]; }

my @report;
sub say { print "@_\n"; push @report, "@_"; }
sub note { print "  $_[0]\n"; }

# min, median (the mean of the middle two for an even count), max, and the
# nearest-rank p50 and p99
sub stats
{
	my @v = sort { $a <=> $b } @_;
	die "bench: no samples\n" unless @v;
	return (min => $v[0], median => ($v[ int($#v / 2) ] + $v[ int(($#v + 1) / 2) ]) / 2, max => $v[-1],
		p99 => $v[ int(0.99 * $#v + 0.5) ], p50 => $v[ int(0.5 * $#v + 0.5) ]);
}
sub fmt3 { my %s = stats(@_); return sprintf('%.2f / %.2f / %.2f', @s{qw(min median max)}); }

# A row of RESULTS.md's targets table (bench/target.sh): key, what,
# measured, target, verdict, where
sub target
{
	return unless $ENV{HOPLOCK_BENCH_TARGETS};
	open my $fh, '>>', $ENV{HOPLOCK_BENCH_TARGETS} or die "bench: $ENV{HOPLOCK_BENCH_TARGETS}: $!\n";
	print $fh join("\t", @_), "\n";
	close $fh;
}
sub verdict { my ($ok) = @_; return $ok ? 'met' : 'MISSED'; }
sub median { my %s = stats(@_); return $s{median}; }

# The fields of /proc/PID/stat after the command name: [0] is the state,
# [11] and [12] user and system time, [13] and [14] those of reaped children
sub proc_stat
{
	my ($pid) = @_;
	open my $fh, '<', "/proc/$pid/stat" or die "bench: process $pid: $!\n";
	my $line = <$fh>;
	return split ' ', ($line =~ s/^.*\) //sr);
}

sub set_config
{
	my ($name, $value) = @_;
	$db->do("ALTER SYSTEM SET $name = '$value'");
	$db->do('SELECT pg_reload_conf()');
	usleep(300_000);
}

# ---------------------------------------------------------------------------
# Setup
# ---------------------------------------------------------------------------
$db->do('CREATE EXTENSION IF NOT EXISTS hoplock');
for my $f ("$here/plpgsql_lease.sql", "$here/plpgsql_lease_logged.sql", "$here/cost.sql")
{
	open my $fh, '<', $f or die "$f: $!";
	local $/;
	$db->do(<$fh>);
}
$db->do('INSERT INTO bench_bare SELECT i, now() FROM generate_series(1, 1000) AS i');
$db->do(q{INSERT INTO bench_bare_text SELECT 'lease-' || i, now() FROM generate_series(1, 1000) AS i});

my $machine = `uname -srm`;
chomp $machine;
my ($cpu_model) = `grep -m1 'model name' /proc/cpuinfo` =~ /:\s*(.*)/;
my $ncpu = `nproc`;
chomp $ncpu;
my %results;    # for the summary and the plot

# ---------------------------------------------------------------------------
# 1. Cost per call
# ---------------------------------------------------------------------------
sub reset_state
{
	$db->do('TRUNCATE hoplock_internal.lease, plpg.lease, plpg_log.lease, plpg_log.history');
	$db->do("CALL setup_hoplock($size{nsetup})");
	$db->do("CALL setup_plpg($size{nsetup})");
	$db->do("CALL setup_plpg_log($size{nsetup})");
	usleep(20_000);    # let the 1 ms terms lapse
}

# CPU nanoseconds and WAL bytes of "CALL proc(n)", per call
sub measure
{
	my ($proc, $n) = @_;
	my $row = $db->selectrow_arrayref(q{SELECT bench_cpu_ns(), pg_current_wal_insert_lsn()});
	my $t0 = time();
	$db->do("CALL $proc($n)");
	my $wall = time() - $t0;
	my ($cpu1, $wal) = $db->selectrow_array(
		q{SELECT bench_cpu_ns(), pg_wal_lsn_diff(pg_current_wal_insert_lsn(), ?)}, undef, $row->[1]);
	return (($cpu1 - $row->[0]) / $n, $wal / $n, $wall / $n);
}

sub cost_section
{
	my ($n, $nterms, @ops) = @_;
	my %cpu;
	my %wal;
	my %wall;
	for my $rep (1 .. $size{reps})
	{
		reset_state();
		my ($base) = measure('cost_empty', $n);
		for my $op (@ops)
		{
			my ($c, $w, $t) = measure("cost_$op", $op =~ /acquire|release/ ? $nterms : $n);
			push @{ $cpu{$op} }, ($c - $base) / 1000.0;
			push @{ $wal{$op} }, $w;
			push @{ $wall{$op} }, $t * 1e6;
		}
		# a fence, net of the UPDATE its transaction makes (cost.sql)
		for my $op (grep { /fence/ } @ops)
		{
			next unless $cpu{update};
			$cpu{$op}[-1] -= $cpu{update}[-1];
			$wal{$op}[-1] -= $wal{update}[-1];
			$wall{$op}[-1] -= $wall{update}[-1];
		}
	}
	return (\%cpu, \%wal, \%wall);
}

say('## 1. Cost per call');
say('');
say('Inside the server: a PL/pgSQL loop, one call and one COMMIT per iteration. CPU is the backend\'s own');
say('(schedstat), net of an empty loop of COMMITs; WAL is bytes inserted per call. min / median / max of '
	  . "$size{reps} runs of $size{n} calls ($size{nsetup} for acquire and release, on distinct leases). "
	  . 'fsync = off: the CPU a call costs, not the disk\'s.');
say('');
set_config('hoplock.databases', 'no_database_here');    # keep the worker out of the lapsed terms
my @ops = qw(hoplock_acquire plpg_acquire plpg_log_acquire hoplock_renew plpg_renew hoplock_release
  plpg_release plpg_log_release hoplock_fence plpg_fence hoplock_holder plpg_holder update advisory);
my ($cpu, $wal) = cost_section($size{n}, $size{nsetup}, @ops);
my %label = (
	hoplock_acquire => 'hoplock_acquire (new term over a lapsed one, with its events)',
	plpg_acquire => 'PL/pgSQL acquire (same)',
	plpg_log_acquire => 'PL/pgSQL acquire, its events and the ended term written as rows (the writes of 1.2\'s acquire)',
	plpg_log_release => 'PL/pgSQL release, its event and the ended term written as rows (the same)',
	hoplock_renew => 'hoplock_renew',
	plpg_renew => 'PL/pgSQL renew',
	hoplock_release => 'hoplock_release (with its event)',
	plpg_release => 'PL/pgSQL release (same)',
	hoplock_fence => 'hoplock_fence (net of the one-row UPDATE of its transaction)',
	plpg_fence => 'PL/pgSQL fence (same)',
	hoplock_holder => 'hoplock_holder',
	plpg_holder => 'PL/pgSQL holder',
	update => 'bare UPDATE of one row by primary key',
	advisory => 'pg_try_advisory_xact_lock');
say('| call | CPU µs per call (min / median / max) | WAL bytes per call (median) |');
say('| --- | --- | --- |');
for my $op (@ops)
{
	say(sprintf('| %s | %s | %.0f |', $label{$op}, fmt3(@{ $cpu->{$op} }), median(@{ $wal->{$op} })));
}
say('');
my %ratio = (
	'renew vs PL/pgSQL renew' => [ 'hoplock_renew', 'plpg_renew', 0.5, 'a10' ],
	'renew vs bare UPDATE' => [ 'hoplock_renew', 'update', 1.0, 'a11' ],
	'acquire vs PL/pgSQL acquire' => [ 'hoplock_acquire', 'plpg_acquire', 0.5, 'a12' ],
	'release vs PL/pgSQL release' => [ 'hoplock_release', 'plpg_release', undef ],
	'acquire vs PL/pgSQL acquire writing rows as 1.2 does' => [ 'hoplock_acquire', 'plpg_log_acquire', undef ],
	'release vs PL/pgSQL release writing rows as 1.2 does' => [ 'hoplock_release', 'plpg_log_release', undef ],
	'fence vs PL/pgSQL fence' => [ 'hoplock_fence', 'plpg_fence', undef ],
	'holder vs PL/pgSQL holder' => [ 'hoplock_holder', 'plpg_holder', undef ]);
say('| ratio of medians | measured | target |');
say('| --- | --- | --- |');
for my $r (sort keys %ratio)
{
	my ($a, $b, $target, $key) = @{ $ratio{$r} };
	my $v = median(@{ $cpu->{$a} }) / median(@{ $cpu->{$b} });
	$results{"ratio $r"} = $v;
	target($key, "$r, CPU per call (medians)", sprintf('%.2f× (%.2f against %.2f µs)', $v,
		median(@{ $cpu->{$a} }), median(@{ $cpu->{$b} })), sprintf('≤ %.1f×', $target),
		verdict($v <= $target), '§1') if $key;
	say(sprintf('| %s | %.2f× | %s |', $r, $v,
		defined $target ? sprintf('≤ %.1f× %s', $target, $v <= $target ? '(met)' : '(MISSED)') : '—'));
}
say('');

# the real-world figure: fsync on, wall clock per call
set_config('fsync', 'on');
my ($cpu_on, $wal_on, $wall_on) = cost_section($size{nsync}, $size{nsync},
	qw(hoplock_acquire plpg_acquire hoplock_renew plpg_renew update));
set_config('fsync', 'off');
say("With fsync = on (the real-world figure), wall-clock µs per call, $size{nsync} calls, min / median / max:");
say('');
say('| call | wall µs per call | CPU µs per call |');
say('| --- | --- | --- |');
for my $op (qw(hoplock_acquire plpg_acquire hoplock_renew plpg_renew update))
{
	say(sprintf('| %s | %s | %s |', $label{$op}, fmt3(@{ $wall_on->{$op} }), fmt3(@{ $cpu_on->{$op} })));
}
say('');
$results{cpu} = $cpu;

# ---------------------------------------------------------------------------
# 2. Throughput
# ---------------------------------------------------------------------------
say('## 2. Throughput');
say('');
say("pgbench -M prepared on 1,000 leases (or rows), -j 2; transactions per second. Each client picks at random "
	  . 'among its own 31 of them (those whose number is its own modulo 32), so that no two clients call on '
	  . 'one lease at once: a renewal of a lease whose row another transaction locks is refused (55P03), not '
	  . 'made to wait. '
	  . "Workloads take turns: $size{pgbench_rounds} round(s) of every workload, $size{pgbench_s} s each, "
	  . 'so that the machine\'s noise falls on all of them alike; min / median / max over the rounds. '
	  . 'Each renewal returns the whole lease row to the client. "bare UPDATE" is keyed like the lease '
	  . 'table, by a text name built the same way (\'lease-\' || :id); the int-keyed one is shown too.');
say('');
$db->do('TRUNCATE hoplock_internal.lease, plpg.lease');
$db->do(q{SELECT hoplock_acquire('lease-' || i, 'o', '1 day') FROM generate_series(1, 1000) AS i});
$db->do(q{SELECT plpg.acquire('lease-' || i, 'o', '1 day') FROM generate_series(1, 1000) AS i});
my %scripts = (
	'hoplock renew' => "\\set id 1 + :client_id + 32 * random(0, 30)\nSELECT hoplock_renew('lease-' || :id, 'o', '1 day');\n",
	'PL/pgSQL renew' => "\\set id 1 + :client_id + 32 * random(0, 30)\nSELECT plpg.renew('lease-' || :id, 'o', '1 day');\n",
	'bare UPDATE' => "\\set id 1 + :client_id + 32 * random(0, 30)\nUPDATE bench_bare_text SET v = clock_timestamp() WHERE name = 'lease-' || :id;\n",
	'bare UPDATE, int key' => "\\set id 1 + :client_id + 32 * random(0, 30)\nUPDATE bench_bare SET v = clock_timestamp() WHERE id = :id;\n",
	'UPDATE ... RETURNING *' => "\\set id 1 + :client_id + 32 * random(0, 30)\nUPDATE bench_bare_text SET v = clock_timestamp() WHERE name = 'lease-' || :id RETURNING *;\n",
	'hoplock acquire + release' => "\\set id 1 + :client_id + 32 * random(0, 30)\nSELECT hoplock_acquire('cycle-' || :id, 'c' || :client_id, '1 h');\nSELECT hoplock_release('cycle-' || :id, 'c' || :client_id);\n",
	'PL/pgSQL acquire + release' => "\\set id 1 + :client_id + 32 * random(0, 30)\nSELECT plpg.acquire('cycle-' || :id, 'c' || :client_id, '1 h');\nSELECT plpg.release('cycle-' || :id, 'c' || :client_id);\n",
	'advisory lock + unlock' => "\\set id 1 + :client_id + 32 * random(0, 30)\nSELECT pg_try_advisory_lock(:id);\nSELECT pg_advisory_unlock(:id);\n");
my @order = ('hoplock renew', 'PL/pgSQL renew', 'bare UPDATE', 'bare UPDATE, int key', 'UPDATE ... RETURNING *', 'hoplock acquire + release',
	'PL/pgSQL acquire + release', 'advisory lock + unlock');
my %tps;
my $pgbench = $ENV{PGBENCH} // 'pgbench';
sub script_file { my $f = lc $_[0]; $f =~ s/[^a-z]+/-/g; return "$out/$f.pgbench"; }

# One pgbench run: its tps and transaction count, once its backends are gone
sub pgbench
{
	my ($name, $clients, $seconds) = @_;
	my $j = $clients < 2 ? 1 : 2;
	my $res = `$pgbench -n -M prepared -c $clients -j $j -T $seconds -f "@{[ script_file($name) ]}" -h $ENV{PGHOST} -p $ENV{PGPORT} -U postgres postgres 2>&1`;
	my ($tps) = $res =~ /tps = ([\d.]+)/;
	my ($xacts) = $res =~ /transactions actually processed: (\d+)/;
	die "bench: pgbench $name, $clients clients, failed:\n$res" unless $tps && $xacts && $? == 0;
	for (1 .. 1000)
	{
		last unless one(q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'});
		usleep(10_000);
	}
	return ($tps, $xacts);
}

# autovacuum stays out of the runs and of the CPU counted for them
set_config('autovacuum', 'off');
for my $name (@order)
{
	open my $fh, '>', script_file($name) or die;
	print $fh $scripts{$name};
	close $fh;
}
for my $c (@{ $size{clients} })
{
	for my $round (1 .. $size{pgbench_rounds})
	{
		for my $name (@order)
		{
			my ($t) = pgbench($name, $c, $size{pgbench_s});
			push @{ $tps{$name}{$c} }, $t;
			note("$name, $c clients, round $round: $t");
		}
	}
}
say('| workload | ' . join(' | ', map { "$_ client" . ($_ > 1 ? 's' : '') } @{ $size{clients} }) . ' |');
say('| --- |' . join('', map { ' --- |' } @{ $size{clients} }));
for my $name (@order)
{
	say("| $name | " . join(' | ', map {
		my %st = stats(@{ $tps{$name}{$_} });
		sprintf('%.0f / **%.0f** / %.0f', @st{qw(min median max)})
	} @{ $size{clients} }) . ' |');
}
say('');
for my $c (@{ $size{clients} })
{
	my $r = median(@{ $tps{'hoplock renew'}{$c} }) / median(@{ $tps{'bare UPDATE'}{$c} });
	$results{"renew tps at $c vs UPDATE"} = $r;
	say(sprintf('hoplock renew throughput at %d client%s: %.2f× the bare UPDATE\'s (ratio of medians).',
		$c, $c > 1 ? 's' : '', $r));
}
say('');

# The target comparison, renew against UPDATE at 8 clients, in pairs run
# back to back, so that each ratio compares like with like.  Each run also
# yields the CPU it cost per transaction, which the machine's other load
# hardly inflates: the backends' (reaped by the postmaster, whose children's
# time then holds theirs, once they are gone) and pgbench's own (this
# script's children's time).
my $postmaster = (proc_stat(one('SELECT pg_backend_pid()')))[1];
sub reaped_ticks { my @f = proc_stat($_[0]); return $f[13] + $f[14]; }
my $clk_tck = `getconf CLK_TCK`;
chomp $clk_tck;
my (@pair_ratios, %server_us, %client_us);
for my $pair (1 .. $size{pairs})
{
	my %t;
	for my $name ($pair % 2 ? ('hoplock renew', 'bare UPDATE') : ('bare UPDATE', 'hoplock renew'))
	{
		my $s0 = reaped_ticks($postmaster);
		my (undef, undef, $cu0, $cs0) = times;
		($t{$name}, my $xacts) = pgbench($name, 8, $size{pair_s});
		my (undef, undef, $cu1, $cs1) = times;
		usleep(100_000);    # the postmaster reaps them
		my $s1 = reaped_ticks($postmaster);
		push @{ $server_us{$name} }, 1e6 * ($s1 - $s0) / $clk_tck / $xacts;
		push @{ $client_us{$name} }, 1e6 * ($cu1 + $cs1 - $cu0 - $cs0) / $xacts;
	}
	push @pair_ratios, $t{'hoplock renew'} / $t{'bare UPDATE'};
	note(sprintf('pair %d: renew %.0f, UPDATE %.0f, ratio %.2f', $pair, $t{'hoplock renew'}, $t{'bare UPDATE'}, $pair_ratios[-1]));
}
my $pair_median = median(@pair_ratios);
$results{'renew tps pairs'} = $pair_median;
target('b10', 'renew throughput against a bare UPDATE, pgbench, 8 clients (median of back-to-back pairs)',
	sprintf('%.2f× (pairs %s)', $pair_median, fmt3(@pair_ratios)), '≥ 1.0×', verdict($pair_median >= 1.0), '§2');
say(sprintf('Renew against the bare UPDATE at 8 clients, %d back-to-back pairs of %d s runs (order alternating): '
	  . 'ratio per pair min / median / max %s (target ≥ 1.0×: %s).',
	$size{pairs}, $size{pair_s}, fmt3(@pair_ratios), $pair_median >= 1.0 ? 'met' : 'MISSED'));
say('');
say('CPU per transaction in those runs, µs, min / median / max: the backends\' (user and system, as the '
	  . 'postmaster reaps them) and pgbench\'s own, which shares the 2 cores with them:');
say('');
say('| workload | backends | pgbench |');
say('| --- | --- | --- |');
for my $name ('hoplock renew', 'bare UPDATE')
{
	say("| $name | " . fmt3(@{ $server_us{$name} }) . ' | ' . fmt3(@{ $client_us{$name} }) . ' |');
}
$results{'renew server cpu vs UPDATE'} = median(@{ $server_us{'hoplock renew'} }) / median(@{ $server_us{'bare UPDATE'} });
say('');
say(sprintf('Backend CPU per renewal: %.2f× the bare UPDATE\'s (ratio of medians).', $results{'renew server cpu vs UPDATE'}));
say('');
say('A renewal sends the lease row back (six columns: a RowDescription and a DataRow per execution, two '
	  . 'timestamps formatted); the bare UPDATE sends only its command tag. UPDATE ... RETURNING *, which sends '
	  . 'a row too, is the like-for-like comparison. Inside the server a renewal costs fewer instructions than '
	  . 'the UPDATE, its row\'s formatting included (section 1).');
say('');
set_config('autovacuum', 'on');

# ---------------------------------------------------------------------------
# 3. Latency
# ---------------------------------------------------------------------------
say('## 3. Latency');
say('');
set_config('hoplock.databases', '');
$db->do('TRUNCATE hoplock_internal.lease');
$db->do('SELECT pg_sleep(1)');

sub epoch_of
{
	my ($ts) = @_;
	my ($y, $mo, $d, $h, $mi, $s, $frac) =
	  $ts =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)(\.\d+)?\+00:00$/ or die "timestamp $ts";
	return timegm($s, $mi, $h, $d, $mo - 1, $y) + ($frac // 0);
}

# Wait until the worker has read a freshly filled table and sleeps: the
# figures are for leases held, not for leases being created.
sub worker_settled
{
	my ($held) = @_;
	my $old = one(q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'}) // 0;
	$db->do('SELECT pg_terminate_backend(pid) FROM hoplock_workers');
	my $want = $held < 100_000 ? $held : 100_000;
	for (1 .. 600)
	{
		# the restarted worker, not the one on its way out
		my ($pid, $state, $tracked) = $db->selectrow_array(
			q{SELECT pid, state, leases_tracked FROM hoplock_workers WHERE datname = 'postgres' AND pid IS NOT NULL});
		return $pid if defined $pid && $pid != $old && $state eq 'sleeping' && $tracked >= $want;
		usleep(100_000);
	}
	die "bench: the worker did not settle\n";
}

# "expired" latency: from expires_at to arrival at a LISTENing client
sub expired_latency
{
	my ($held) = @_;
	$db->do('TRUNCATE hoplock_internal.lease');
	$db->do("CALL fill_hoplock($held, '1 day')");
	worker_settled($held);
	my $listener = connect_db();
	$listener->do('LISTEN hoplock');
	my $n = $size{lat_expiries};
	# lapses 25 ms apart, starting half a second from now
	$db->do(qq{SELECT hoplock_acquire('lat-' || i, 'o', (500 + 25 * i || ' ms')::interval) FROM generate_series(1, $n) AS i});
	my @lags;
	my $json = JSON::PP->new;
	my $select = IO::Select->new($listener->{pg_socket});
	my $deadline = time() + 10 + $n * 0.025;
	while (@lags < $n && time() < $deadline)
	{
		$select->can_read(0.2);
		while (my $note = $listener->pg_notifies)
		{
			my $e = $json->decode($note->[2]);
			next unless $e->{event} eq 'expired';
			push @lags, (time() - epoch_of($e->{expires_at})) * 1000;
		}
	}
	$listener->disconnect;
	die "bench: only " . scalar(@lags) . " of $n expiries arrived\n" if @lags < $n;
	return @lags;
}

my @lag1k = expired_latency(1000);
my @lag_many = expired_latency($quick ? 100_000 : 100_000);
$results{lag1k} = \@lag1k;
$results{lag_many} = \@lag_many;

# hoplock_wait wake-up after a release, next to pg_advisory_lock's after unlock
sub wakeup_latency
{
	my ($kind) = @_;
	my $holder = connect_db();
	my $waiter = connect_db();
	my @lags;
	for my $i (1 .. $size{lat_rounds})
	{
		if ($kind eq 'hoplock')
		{
			$holder->do(q{SELECT hoplock_acquire('wake', 'holder', '1 h')});
			$waiter->do(q{SELECT hoplock_wait('wake', 'waiter', '1 h', '30 s')}, { pg_async => 1 });
		}
		else
		{
			$holder->do('SELECT pg_advisory_lock(7)');
			$waiter->do('SELECT pg_advisory_lock(7)', { pg_async => 1 });
		}
		my $waiter_pid = $waiter->{pg_pid};
		for (1 .. 1000)
		{
			last if one("SELECT wait_event IS NOT NULL AND wait_event <> 'ClientRead' FROM pg_stat_activity WHERE pid = $waiter_pid");
			usleep(1_000);
		}
		usleep(5_000);
		my $t0 = time();
		if ($kind eq 'hoplock')
		{
			$holder->do(q{SELECT hoplock_release('wake', 'holder')});
		}
		else
		{
			$holder->do('SELECT pg_advisory_unlock(7)');
		}
		$waiter->pg_result;
		push @lags, (time() - $t0) * 1000;
		if ($kind eq 'hoplock')
		{
			$waiter->do(q{SELECT hoplock_release('wake', 'waiter')});
		}
		else
		{
			$waiter->do('SELECT pg_advisory_unlock(7)');
		}
	}
	$holder->disconnect;
	$waiter->disconnect;
	return @lags;
}
my @wake = wakeup_latency('hoplock');
my @wake_adv = wakeup_latency('advisory');
$results{wake} = \@wake;
$results{wake_adv} = \@wake_adv;

say('Milliseconds. "expired": from the term\'s expires_at to its arrival at a LISTENing client (DBD::Pg), '
	  . "$size{lat_expiries} expiries 25 ms apart among many held leases. Wake-up: from just before the "
	  . "releasing call to the waiter's result, $size{lat_rounds} rounds; the client's round trip for the "
	  . 'release is included in both.');
say('');
say('| measurement | p50 | p99 | max | target |');
say('| --- | --- | --- | --- | --- |');
for my $m (
	[ '"expired", 1,000 leases held', \@lag1k, 1 ],
	[ '"expired", 100,000 leases held', \@lag_many, undef ],
	[ 'hoplock_wait wake-up after hoplock_release', \@wake, 2 ],
	[ 'pg_advisory_lock wake-up after pg_advisory_unlock (the floor)', \@wake_adv, undef ])
{
	my ($name, $v, $target) = @$m;
	my %s = stats(@$v);
	target('a20', '"expired" after expires_at, 1,000 leases held, p99 (a listener, fsync off)',
		sprintf('%.2f ms (p50 %.2f)', $s{p99}, $s{p50}), '≤ 1 ms', verdict($s{p99} <= 1), '§3') if $v == \@lag1k;
	target('b20', 'hoplock_wait wake-up after hoplock_release, p99',
		sprintf('%.2f ms (pg_advisory_lock: %.2f)', $s{p99}, +{ stats(@wake_adv) }->{p99}), '≤ 2 ms',
		verdict($s{p99} <= 2), '§3') if $v == \@wake;
	say(sprintf('| %s | %.2f | %.2f | %.2f | %s |', $name, $s{p50}, $s{p99}, $s{max},
		defined $target ? sprintf('p99 ≤ %d %s', $target, $s{p99} <= $target ? '(met)' : '(MISSED)') : '—'));
}
say('');

# ---------------------------------------------------------------------------
# 4. Scale
# ---------------------------------------------------------------------------
say('## 4. Scale');
say('');
set_config('hoplock.databases', 'no_database_here');
# A fill writes a row per term into the lease table, the history and the
# event log (1,000,000 leases: 3,000,000 rows), and every table of the
# earlier sections has changed.  Vacuumed and analyzed here, so that
# autovacuum does not do it during the measurements: its ANALYZE of a
# large table holds a snapshot for a second or more, which keeps pruning
# from making room for the renewals (they then go to other pages, and
# chains of dead versions lengthen every read of a hot row).
sub settle_tables { $db->do('VACUUM ANALYZE'); }
my %scale;
for my $rows (1000, $size{many})
{
	$db->do('TRUNCATE hoplock_internal.lease');
	$db->do("CALL fill_hoplock($rows, '1 day')") if $rows > 0;
	settle_tables();
	for my $rep (1 .. $size{reps})
	{
		$db->do("CALL setup_hoplock($size{nsetup})");
		usleep(20_000);
		my ($base) = measure('cost_empty', $size{n});
		my ($renew) = measure('cost_hoplock_renew', $size{n});
		my ($acq) = measure('cost_hoplock_acquire', $size{nsetup});
		push @{ $scale{$rows}{renew} }, ($renew - $base) / 1000;
		push @{ $scale{$rows}{acquire} }, ($acq - $base) / 1000;
	}
}
my $many_label = $size{many} == 1_000_000 ? '1,000,000' : '100,000';
say("CPU µs per call with 1,000 and with $many_label other leases in the table (min / median / max):");
say('');
say("| call | 1,000 leases | $many_label leases | ratio of medians | target |");
say('| --- | --- | --- | --- | --- |');
for my $op (qw(renew acquire))
{
	my $r = median(@{ $scale{ $size{many} }{$op} }) / median(@{ $scale{1000}{$op} });
	$results{"scale $op"} = $r;
	target($op eq 'renew' ? 'a50' : 'a51', "$op, CPU per call with $many_label leases against 1,000",
		sprintf('%.2f×', $r), '≤ 1.2×', verdict($r <= 1.2), '§4');
	say(sprintf('| %s | %s | %s | %.2f× | ≤ 1.2× %s |', $op, fmt3(@{ $scale{1000}{$op} }),
		fmt3(@{ $scale{ $size{many} }{$op} }), $r, $r <= 1.2 ? '(met)' : '(MISSED)'));
}
say('');

# table size after many renewals of 1,000 leases
$db->do('TRUNCATE hoplock_internal.lease');
$db->do(q{CALL fill_hoplock(1000, '1 day')});
settle_tables();
# this session's counts so far reach the shared counters before the reset
# (the statement after the call flushes them), so that only these count
$db->do('SELECT pg_stat_force_next_flush()');
$db->do('SELECT pg_stat_reset_single_table_counters(\'hoplock_internal.lease\'::regclass)');
$db->do('CALL renew_spread(1000, 1000)');
my ($heap1, $index1) = $db->selectrow_array(
	q{SELECT pg_relation_size('hoplock_internal.lease'), pg_relation_size('hoplock_internal.lease_pkey')});
my $t0 = time();
$db->do("CALL renew_spread($size{renews}, 1000)");
my $renew_s = time() - $t0;
$db->do('SELECT pg_stat_force_next_flush()');
usleep(500_000);
my ($heap2, $index2, $upd, $hot) = $db->selectrow_array(
	q{SELECT pg_relation_size('hoplock_internal.lease'), pg_relation_size('hoplock_internal.lease_pkey'),
	         n_tup_upd, n_tup_hot_upd
	    FROM pg_stat_user_tables WHERE relid = 'hoplock_internal.lease'::regclass});
die "bench: the statistics count $upd updates of the lease table, not " . (1000 + $size{renews}) . "\n"
  unless $upd == 1000 + $size{renews};
my $growth = ($heap2 + $index2) / ($heap1 + $index1);
$results{'table growth'} = $growth;
my $renews_label = $size{renews} == 1_000_000 ? '1,000,000' : '100,000';
say("Table and index after renewals of 1,000 leases, one per transaction ($renews_label in "
	  . sprintf('%.0f s', $renew_s) . '):');
say('');
say('| | heap | index | total |');
say('| --- | --- | --- | --- |');
say(sprintf('| after the first 1,000 renewals | %d kB | %d kB | %d kB |', $heap1 / 1024, $index1 / 1024, ($heap1 + $index1) / 1024));
say(sprintf("| after %s renewals | %d kB | %d kB | %d kB |", $renews_label, $heap2 / 1024, $index2 / 1024, ($heap2 + $index2) / 1024));
say('');
target('a52', "renewals of 1,000 leases ($renews_label) that were HOT updates",
	sprintf('%.2f%% (%d of %d)', $upd ? 100.0 * $hot / $upd : 0, $hot, $upd), '100%', verdict($upd && $hot == $upd), '§4');
target('a53', "table and index after $renews_label renewals of 1,000 leases against after 1,000",
	sprintf('%.2f× (%d kB)', $growth, ($heap2 + $index2) / 1024), '≤ 2×', verdict($growth <= 2), '§4');
say(sprintf('Growth %.2f× (target ≤ 2×: %s); %d of %d updates were HOT (%.2f%%).', $growth,
	$growth <= 2 ? 'met' : 'MISSED', $hot, $upd, $upd ? 100.0 * $hot / $upd : 0));
say('');

# the worker's CPU while many leases are held and none is due
set_config('hoplock.databases', '');
$db->do('TRUNCATE hoplock_internal.lease');
$db->do("CALL fill_hoplock($size{many}, '1 day')");
my $wpid = worker_settled($size{many});
sub ticks { my @f = proc_stat($_[0]); return $f[11] + $f[12]; }
my $tk0 = ticks($wpid);
sleep $size{idle_s};
my $tk = ticks($wpid) - $tk0;
die "bench: the worker restarted while measured\n"
  unless one(q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'}) == $wpid;
my $hz = `getconf CLK_TCK`;
chomp $hz;
my $tracked = one(q{SELECT leases_tracked FROM hoplock_workers WHERE datname = 'postgres'});
$results{'idle cpu'} = 100.0 * $tk / $hz / $size{idle_s};
target('a55', "expiry worker's CPU, $many_label leases held, none due", sprintf('%d ticks in %d s', $tk, $size{idle_s}),
	'≈ 0', verdict($results{'idle cpu'} < 1), '§4');
say(sprintf('Expiry worker with %s leases held and none due: %d clock ticks of CPU in %d s (%.2f%% of a core); it tracks %d of them.',
	$many_label, $tk, $size{idle_s}, $results{'idle cpu'}, $tracked));
say('');

# ---------------------------------------------------------------------------
# 5. Memory
# ---------------------------------------------------------------------------
say('## 5. Memory');
say('');
my ($shmem) = one(q{SELECT size FROM pg_shmem_allocations WHERE name = 'hoplock'});
my %settings = map { $_->[0] => $_->[1] } @{ $db->selectall_arrayref(
	q{SELECT name, setting FROM pg_settings WHERE name IN ('hoplock.max_databases', 'hoplock.queue_size', 'max_connections')}) };
say(sprintf('Shared memory at default settings (hoplock.max_databases = %s, hoplock.queue_size = %s, max_connections = %s): %d kB.',
	$settings{'hoplock.max_databases'}, $settings{'hoplock.queue_size'}, $settings{max_connections}, $shmem / 1024));

# the worker's schedule: memory per tracked lease, from its memory contexts
sub schedule_bytes
{
	my $logfile = $ENV{HOPLOCK_BENCH_LOG};
	my $pid = one(q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'});
	my $before = -s $logfile;
	$db->do("SELECT pg_log_backend_memory_contexts($pid)");
	# the worker logs its contexts when it next checks for interrupts
	for (1 .. 50)
	{
		usleep(100_000);
		open my $fh, '<', $logfile or die;
		seek $fh, $before, 0;
		local $/;
		my $log = <$fh>;
		close $fh;
		# the schedule's context, and its hash table's (a child)
		my ($tree) = $log =~ /hoplock schedule: (\d+) total in/;
		my ($hash) = $log =~ /hoplock schedule by name: (\d+) total in/;
		return $tree + $hash if defined $tree && defined $hash;
	}
	warn "the worker did not log its schedule's memory\n";
	return 0;
}
$db->do('TRUNCATE hoplock_internal.lease');
$db->do(q{CALL fill_hoplock(1000, '1 day')});
worker_settled(1000);
my $sched_small = schedule_bytes();
$db->do("CALL fill_hoplock(100000, '1 day')");
worker_settled(100_000);
my $sched_big = schedule_bytes();
my $tracked_big = one(q{SELECT leases_tracked FROM hoplock_workers WHERE datname = 'postgres'});
if ($sched_big > 0 && $tracked_big > 1000)
{
	say(sprintf('The worker\'s schedule: %d kB for 1,000 tracked leases, %d kB for %d (%.0f bytes per tracked lease, names like "filler-12345").',
		$sched_small / 1024, $sched_big / 1024, $tracked_big, ($sched_big - $sched_small) / ($tracked_big - 1000)));
}

# a backend's memory across many calls
my $session = connect_db();
my $mem = sub { ($session->selectrow_array(q{SELECT sum(total_bytes) FROM pg_backend_memory_contexts}))[0] };
$session->do(q{SELECT hoplock_acquire('held', 'holder', '1 day')});
$session->do('CALL cost_hoplock_renew(1000)');
my $m0 = $mem->();
$session->do("CALL cost_hoplock_renew($size{renews})");
my $m1 = $mem->();
$results{'backend growth'} = $m1 - $m0;
target('a56', "a backend's memory after $renews_label more renewals", sprintf('%+d bytes', $m1 - $m0),
	'no growth', verdict($m1 - $m0 <= 0), '§5');
say(sprintf('A backend\'s memory (all its contexts) before and after %s more renewals in one session: %d kB and %d kB (%+d bytes).',
	$renews_label, $m0 / 1024, $m1 / 1024, $m1 - $m0));
$session->disconnect;
say('');

# ---------------------------------------------------------------------------
# Write the latency data for the plot
# ---------------------------------------------------------------------------
for my $series ([ 'lag1k', \@lag1k ], [ 'lag_many', \@lag_many ], [ 'wake', \@wake ], [ 'wake_adv', \@wake_adv ])
{
	my ($name, $v) = @$series;
	my @s = sort { $a <=> $b } @$v;
	open my $fh, '>', "$out/$name.dat" or die;
	for my $i (0 .. $#s)
	{
		printf $fh "%.4f %.4f\n", $s[$i], ($i + 1) / @s;
	}
	close $fh;
}

open my $fh, '>', "$out/body.md" or die;
print $fh join("\n", @report), "\n";
close $fh;

open $fh, '>', "$out/summary.json" or die;
print $fh JSON::PP->new->canonical->encode({
	machine => $machine, cpu => $cpu_model, ncpu => $ncpu,
	map { ($_ => ref $results{$_} ? undef : $results{$_}) } grep { !ref $results{$_} } keys %results });
close $fh;
