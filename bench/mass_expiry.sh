#!/usr/bin/env bash
# bench/mass_expiry.sh [NAMES] [ROUNDS] [OUT.md]: NAMES terms (default
# 10,000) lapsing at one instant, ROUNDS times (default 3), on a scratch
# server of its own (fsync and synchronous_commit on, the installed build;
# make install first).  A LISTENing client notes each expired event's
# arrival; each event's time after its expires_at is split at the commit of
# the worker's transaction that announced it (track_commit_timestamp): from
# expires_at to that commit, then from that commit to the listener.  The
# worker's CPU over the lapse (/proc/PID/schedstat) gives the cost per
# expiry.  The same server then measures two floors, so that the figures
# compare within one run: NAMES NOTIFYs of the same size sent in one
# transaction (the NOTIFY floor), and the row writes of an expiry done in
# bulk -- NAMES lease-like rows updated, NAMES history-like rows updated,
# NAMES event-like rows inserted, in three statements of one transaction.
# The listener is bench/listen.c, on libpq, which notes each arrival as
# libpq hands it over: the figures are the server's, not a client
# library's (DBD::Pg, reading 10,000 notifications, adds tens of
# milliseconds of its own).  About a minute.
set -eu
n=${1:-10000}
rounds=${2:-3}
out=${3:-/dev/stdout}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"

pgconfig=${PG_CONFIG:-pg_config}
listen_bin=$(mktemp -d)/listen
cc -O2 -o "$listen_bin" "$here/listen.c" -I"$("$pgconfig" --includedir)" \
	-L"$("$pgconfig" --libdir)" -lpq
scratch_start "fsync = on" "synchronous_commit = on" "track_commit_timestamp = on" \
	"shared_buffers = '256MB'" "max_wal_size = '4GB'"
trap scratch_stop EXIT
scratch_psql -q -c 'CREATE EXTENSION hoplock' >/dev/null

perl - "$n" "$rounds" "$listen_bin" >"$SCRATCH_DIR/report.md" <<'PERL'
use strict;
use warnings;
use DBI;
use JSON::PP;
use Time::HiRes qw(time usleep);
use Time::Local qw(timegm);

my ($n, $rounds, $listen_bin) = @ARGV;
my $conninfo = "host=$ENV{PGHOST} port=$ENV{PGPORT} dbname=postgres user=postgres";
my $dsn = "dbi:Pg:host=$ENV{PGHOST};port=$ENV{PGPORT};dbname=postgres";
my $db = DBI->connect($dsn, 'postgres', '', { RaiseError => 1, AutoCommit => 1, PrintError => 0 });

sub epoch_of
{
	my ($ts) = @_;
	my ($y, $mo, $d, $h, $mi, $s, $frac) =
	  $ts =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)(\.\d+)?\+00:00$/ or die "timestamp $ts";
	return timegm($s, $mi, $h, $d, $mo - 1, $y) + ($frac // 0);
}

sub pct
{
	my ($p, @v) = @_;
	@v = sort { $a <=> $b } @v;
	return sprintf('%.1f', $v[ int($p / 100 * $#v + 0.5) ]);
}

# Start bench/listen.c on "channel", keeping the notifications whose
# payload has every one of @match; returns its output handle once it
# listens
sub start_listener
{
	my ($channel, $want, @match) = @_;
	open my $fh, '-|', $listen_bin, $conninfo, $channel, $want, 60, @match
	  or die "listen: $!";
	my $ready = <$fh>;
	die "listen did not start\n" unless defined $ready && $ready eq "listening\n";
	return $fh;
}

# Its [arrival, payload] of each notification kept, once it has them all
sub collect_listener
{
	my ($fh) = @_;
	my @got;
	while (my $line = <$fh>)
	{
		chomp $line;
		my ($at, $payload) = split / /, $line, 2;
		push @got, [ $at, $payload ];
	}
	close $fh;
	return @got;
}

sub worker_cpu_ms
{
	my ($pid) = @_;
	open my $f, '<', "/proc/$pid/schedstat" or return undef;
	my ($ns) = split ' ', scalar <$f>;
	return $ns / 1e6;
}

for (1 .. 300)
{
	last if $db->selectrow_array(q{SELECT count(*) FROM hoplock_workers WHERE datname = current_database() AND pid IS NOT NULL});
	usleep(100_000);
}
my ($wpid) = $db->selectrow_array(q{SELECT pid FROM hoplock_workers WHERE datname = current_database()});

my (@rows, @all_total);
for my $r (1 .. $rounds)
{
	my $prefix = "lapse$r";
	my $l = start_listener('hoplock', $n, '"expired"', "\"$prefix-");
	$db->do(qq{SELECT count(hoplock_acquire('$prefix-' || i, 'o', t.at - clock_timestamp()))
	             FROM (SELECT statement_timestamp() + interval '3 s' AS at) AS t, generate_series(1, ?) AS i},
		undef, $n);
	my $cpu0 = worker_cpu_ms($wpid);
	my @got = collect_listener($l);
	my $cpu = worker_cpu_ms($wpid) - $cpu0;
	die "only " . scalar(@got) . " of $n expired events arrived\n" if @got < $n;
	my %arrived;
	my $json = JSON::PP->new;
	for (@got)
	{
		my $e = $json->decode($_->[1]);
		$arrived{ $e->{name} } //= $_->[0];
	}
	# (a mass expiry's events are one row of the log: each event's commit
	# is that of the row numbered at or above it)
	my $committed = $db->selectall_arrayref(qq{
		SELECT e.name, extract(epoch FROM e.at),
		       extract(epoch FROM (SELECT pg_xact_commit_timestamp(r.xmin) FROM hoplock_internal.event AS r
		                            WHERE r.seq >= e.seq ORDER BY r.seq LIMIT 1))
		  FROM hoplock_events(0) AS e WHERE e.event = 'expired' AND e.name LIKE '$prefix-%'});
	my (@total, @announce, @deliver);
	for (@$committed)
	{
		my ($name, $at, $commit) = @$_;
		push @total, 1000 * ($arrived{$name} - $at);
		push @announce, 1000 * ($commit - $at);
		push @deliver, 1000 * ($arrived{$name} - $commit);
	}
	push @all_total, @total;
	push @rows, sprintf('| %d | %s / %s / %s | %s / %s | %s / %s | %.1f |',
		$r, pct(50, @total), pct(99, @total), pct(100, @total), pct(50, @announce), pct(99, @announce),
		pct(50, @deliver), pct(99, @deliver), defined $cpu ? 1000 * $cpu / $n : 0);
	printf STDERR "round %d: p50 %s p99 %s ms\n", $r, pct(50, @total), pct(99, @total);
}

# The NOTIFY floor: $n payloads of the size of an expired event's, one
# transaction, from its start to the listener
my @floor;
for my $r (1 .. $rounds)
{
	my $l = start_listener('floor', $n);
	my $t0 = time();
	$db->do(q{SELECT count(pg_notify('floor', '{"seq": 1740608814822840593, "seq_text": "1740608814822840593", "event": "expired", "name": "lapse-' || i
	          || '", "owner": "o", "generation": 1740608814822840593, "generation_text": "1740608814822840593", "expires_at": "2026-12-06T21:10:57.123456+00:00"}'))
	            FROM generate_series(1, ?) AS i}, undef, $n);
	my @got = collect_listener($l);
	push @floor, map { 1000 * ($_->[0] - $t0) } @got;
}

# The row writes of $n expiries in bulk, one transaction, fsync on
$db->do(q{CREATE TABLE b_lease (LIKE hoplock_internal.lease INCLUDING ALL)});
$db->do(q{CREATE TABLE b_history (LIKE hoplock_internal.history INCLUDING ALL)});
$db->do(q{CREATE TABLE b_event (LIKE hoplock_internal.event INCLUDING ALL)});
# (the last round's: the history keeps the newest hoplock.history_size)
$db->do(qq{INSERT INTO b_lease SELECT * FROM hoplock_internal.lease WHERE name LIKE 'lapse$rounds-%'});
$db->do(qq{INSERT INTO b_history SELECT * FROM hoplock_internal.history WHERE name LIKE 'lapse$rounds-%'});
$db->do(q{UPDATE b_history SET ended_at = NULL, how = NULL});
$db->do(q{VACUUM ANALYZE b_lease, b_history, b_event});
my $t0 = time();
$db->begin_work;
my @written = map { $_ + 0 } (
	$db->do(q{UPDATE b_lease SET state = 'x', version = version + 1}),
	$db->do(q{UPDATE b_history SET ended_at = now(), how = 'expired'}),
	$db->do(qq{INSERT INTO b_event (seq, event, name, owner, generation, expires_at, at)
	           SELECT seq, event, name, owner, generation, at, at
	             FROM hoplock_events(0) WHERE name LIKE 'lapse$rounds-%' AND event = 'expired'}));
$db->commit;
my $bulk = 1000 * (time() - $t0);
die "bulk writes: @written rows, not $n each\n" if grep { $_ != $n } @written;
$db->do(q{DROP TABLE b_lease, b_history, b_event});

my ($load) = split ' ', `cat /proc/loadavg`;
my $v = $db->selectrow_array(q{SELECT extversion FROM pg_extension WHERE extname = 'hoplock'});
print "hoplock $v; scratch server with fsync = on, synchronous_commit = on, track_commit_timestamp = on; "
  . "load average (1 min) at the end: $load.\n\n";
printf "%s names lapsing at one instant (acquired in one statement, each ttl reaching the same instant 3 s later), "
  . "%d rounds; milliseconds after expires_at. The split is at the commit of the worker's transaction that announced "
  . "the term; the worker's CPU is its own (schedstat) over the whole lapse, delivery included.\n\n", $n, $rounds;
print "| round | at the listener: p50 / p99 / max | announcement's commit: p50 / p99 | commit to the listener: p50 / p99 | worker CPU µs per expiry |\n";
print "| --- | --- | --- | --- | --- |\n";
print "$_\n" for @rows;
printf "| all | %s / %s / %s | | | |\n\n", pct(50, @all_total), pct(99, @all_total), pct(100, @all_total);
printf "Floors, same server, same run: %s NOTIFYs of an expired event's size in one transaction reach the "
  . "listener p50 %s, p99 %s ms after the transaction began (%d rounds); the row writes of %s expiries "
  . "in bulk (three statements, one transaction: the lease rows updated, the history rows updated, the "
  . "event rows inserted, and the commit) take %.1f ms.\n",
  $n, pct(50, @floor), pct(99, @floor), $rounds, $n, $bulk;
PERL
cat "$SCRATCH_DIR/report.md" >"$out"
