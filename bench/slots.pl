#!/usr/bin/perl
# bench/slots.pl: run by bench/slots.sh against its scratch server (PGHOST,
# PGPORT, PGBENCH).  What a lease with slots costs its acquirers when they
# contend: 8 pgbench clients, each script an acquire then a release (each
# its own transaction), of
#
#   slots    one name with slots => 8 (8 owners: every acquire can win)
#   names    8 names with N = 1, a client each (every acquire wins)
#   one      one name with N = 1 (one client in 8 at most holds it)
#
# The fair comparison is slots against names: the same clients doing the
# same work -- a term begun and ended per script, its events, its history
# -- the one name's slots being the only difference.  "one" is the literal
# N = 1 under 8 contenders: most of its acquires return NULL at once and
# their releases false, so per call it is cheaper and per term it is no
# comparison; shown for scale.  Rounds take turns so that the machine's
# noise falls on all three alike.  CPU: the backends' (user and system, as
# the postmaster reaps them once pgbench's connections end) and the
# expiry worker's (it sends the events), per term begun
# (hoplock_stats.terms_begun).  Prints Markdown; a row of the targets
# table through bench/target.sh's file.
#
#   slots.pl [--quick] [--seconds S] [--rounds N]
use strict;
use warnings;
use DBI;
use Getopt::Long;
use Time::HiRes qw(usleep);

my %opt;
GetOptions(\%opt, 'quick', 'seconds=f', 'rounds=i') or die "usage: $0 [--quick] [--seconds S] [--rounds N]\n";
my $seconds = $opt{seconds} // ($opt{quick} ? 3 : 10);
my $rounds = $opt{rounds} // ($opt{quick} ? 1 : 3);
my $clients = 8;
my $pgbench = $ENV{PGBENCH} // 'pgbench';
my $dir = $ENV{SLOTS_WORK} or die "slots.pl: SLOTS_WORK not set\n";

my $db = DBI->connect("dbi:Pg:host=$ENV{PGHOST};port=$ENV{PGPORT};dbname=postgres", 'postgres', '',
	{ RaiseError => 1, AutoCommit => 1, PrintError => 0 });
sub one { return ($db->selectrow_array(@_))[0]; }

# the names, their number of slots recorded, nothing held
$db->do(q{SELECT hoplock_acquire('jobs', 'setup', '1 h', slots => 8)});
$db->do(q{SELECT hoplock_release('jobs', 'setup')});
$db->do(q{SELECT hoplock_acquire('one', 'setup', '1 h')});
$db->do(q{SELECT hoplock_release('one', 'setup')});

my %script = (
	slots => "SELECT hoplock_acquire('jobs', 'c' || :client_id, '1 h', slots => 8) IS NOT NULL;\n"
	  . "SELECT hoplock_release('jobs', 'c' || :client_id);\n",
	names => "SELECT hoplock_acquire('own-' || :client_id, 'c' || :client_id, '1 h') IS NOT NULL;\n"
	  . "SELECT hoplock_release('own-' || :client_id, 'c' || :client_id);\n",
	one => "SELECT hoplock_acquire('one', 'c' || :client_id, '1 h') IS NOT NULL;\n"
	  . "SELECT hoplock_release('one', 'c' || :client_id);\n");
my @order = qw(slots names one);
for my $w (@order)
{
	open my $fh, '>', "$dir/$w.pgbench" or die;
	print $fh $script{$w};
	close $fh;
}

sub proc_stat
{
	open my $fh, '<', "/proc/$_[0]/stat" or die "slots.pl: process $_[0]: $!\n";
	my $line = <$fh>;
	return split ' ', ($line =~ s/^.*\) //sr);
}
my $postmaster = (proc_stat(one('SELECT pg_backend_pid()')))[1];
sub reaped { my @f = proc_stat($postmaster); return $f[13] + $f[14]; }
sub worker_pid { return one(q{SELECT pid FROM hoplock_workers WHERE datname = current_database()}); }
sub own_ticks { my @f = proc_stat($_[0]); return $f[11] + $f[12]; }
my $hz = `getconf CLK_TCK` + 0;
sub counters { return $db->selectrow_array(q{SELECT terms_begun, contended FROM hoplock_stats WHERE datname = current_database()}); }

my %m;    # workload => measure => [per round]
for my $round (1 .. $rounds)
{
	my @turn = @order[ map { ($_ + $round - 1) % @order } 0 .. $#order ];
	for my $w (@turn)
	{
		my $wpid = worker_pid();
		my ($terms0, $cont0) = counters();
		my ($r0, $k0) = (reaped(), own_ticks($wpid));
		my $res = `$pgbench -n -M prepared -r -c $clients -j 2 -T $seconds -f "$dir/$w.pgbench" -h $ENV{PGHOST} -p $ENV{PGPORT} -U postgres postgres 2>&1`;
		my ($xacts) = $res =~ /transactions actually processed: (\d+)/;
		die "slots.pl: pgbench $w failed:\n$res" unless $xacts && $? == 0;
		my @lat = $res =~ /^\s+([\d.]+)\s+(?:\d+\s+)*SELECT hoplock_(?:acquire|release)/mg;
		for (1 .. 500)
		{
			last unless one(q{SELECT count(*) FROM pg_stat_activity WHERE application_name = 'pgbench'});
			usleep(10_000);
		}
		usleep(100_000);    # the postmaster reaps them
		my ($terms1, $cont1) = counters();
		die "slots.pl: the worker restarted during $w\n" unless worker_pid() == $wpid;
		my $terms = $terms1 - $terms0;
		my $backend_us = 1e6 * (reaped() - $r0) / $hz;
		my $worker_us = 1e6 * (own_ticks($wpid) - $k0) / $hz;
		push @{ $m{$w}{terms_s} }, $terms / $seconds;
		push @{ $m{$w}{calls_s} }, $xacts / $seconds;
		push @{ $m{$w}{won} }, 100 * $terms / $xacts;
		push @{ $m{$w}{cpu_term} }, $terms ? ($backend_us + $worker_us) / $terms : 0;
		push @{ $m{$w}{backend_term} }, $terms ? $backend_us / $terms : 0;
		push @{ $m{$w}{worker_term} }, $terms ? $worker_us / $terms : 0;
		push @{ $m{$w}{cpu_call} }, ($backend_us + $worker_us) / $xacts;
		push @{ $m{$w}{acq_ms} }, $lat[0] // 0;
		push @{ $m{$w}{rel_ms} }, $lat[1] // 0;
		printf STDERR "slots: round %d, %s: %.0f terms/s, %.0f scripts/s, %.1f µs CPU per term\n",
			$round, $w, $terms / $seconds, $xacts / $seconds, $m{$w}{cpu_term}[-1];
	}
}

sub median { my @v = sort { $a <=> $b } @_; return ($v[ int($#v / 2) ] + $v[ int(($#v + 1) / 2) ]) / 2; }
sub med { return median(@{ $m{ $_[0] }{ $_[1] } }); }
sub commas { my $n = sprintf('%.0f', $_[0]); 1 while $n =~ s/^(-?\d+)(\d{3})/$1,$2/; return $n; }
my %label = (
	slots => 'one name, `slots => 8`',
	names => '8 names, N = 1, a client each',
	one => 'one name, N = 1');
print "$clients pgbench clients (-M prepared, -j 2), each script `hoplock_acquire` then `hoplock_release` of the\n"
  . "client's own owner, each its own transaction; $rounds round(s) of $seconds s of each workload, taking turns;\n"
  . "medians over the rounds. CPU: the backends' (as the postmaster reaps them) and the expiry worker's\n"
  . "(it sends the events), per term begun (hoplock_stats). Acquire and release: pgbench's latency per\n"
  . "statement, ms.\n\n";
print "| workload | terms/s | scripts/s | acquires that won | CPU µs per term (backends + worker) | CPU µs per script | acquire ms | release ms |\n";
print "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n";
for my $w (@order)
{
	printf "| %s | %s | %s | %.1f%% | %.1f (%.1f + %.1f) | %.1f | %.3f | %.3f |\n", $label{$w}, commas(med($w, 'terms_s')),
		commas(med($w, 'calls_s')), med($w, 'won'), med($w, 'cpu_term'), med($w, 'backend_term'),
		med($w, 'worker_term'), med($w, 'cpu_call'), med($w, 'acq_ms'), med($w, 'rel_ms');
}
my $cpu_ratio = med('slots', 'cpu_term') / med('names', 'cpu_term');
my $tps_ratio = med('names', 'terms_s') / med('slots', 'terms_s');
my $acq_ratio = med('names', 'acq_ms') > 0 ? med('slots', 'acq_ms') / med('names', 'acq_ms') : 0;
my $met = $cpu_ratio <= 1.2 ? 'met' : 'MISSED';
printf "\nThe comparison: `slots => 8` over one name against 8 names with N = 1 -- the same 8 clients, each\n"
  . "script a term begun and ended, the one name's slots the only difference. CPU per term %.2f× (target\n"
  . "≤ 1.2×: %s); time per term (the inverse of terms/s) %.2f×; the acquire's latency %.2f×. One name with\n"
  . "N = 1 is not the same work: at most one client in 8 holds it, the other acquires return NULL at once\n"
  . "(%.1f%% won), so its calls are the cheapest and its terms the rarest; for scale only.\n\n",
	$cpu_ratio, $met, $tps_ratio, $acq_ratio, med('one', 'won');

if (my $f = $ENV{HOPLOCK_BENCH_TARGETS})
{
	open my $fh, '>>', $f or die "slots.pl: $f: $!\n";
	printf $fh "%s\t%s\t%s\t%s\t%s\t%s\n", 'a40',
		'acquire + release with `slots => 8`, 8 clients over one name, against N = 1, 8 clients over a name each: CPU per term',
		sprintf('%.2f× (%.1f against %.1f µs; time per term %.2f×, acquire latency %.2f×)', $cpu_ratio,
			med('slots', 'cpu_term'), med('names', 'cpu_term'), $tps_ratio, $acq_ratio),
		'≤ 1.2×', $met, 'bench/slots.sh';
	close $fh;
}
