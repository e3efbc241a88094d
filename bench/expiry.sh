#!/usr/bin/env bash
# bench/expiry.sh [EXPIRIES] [OUT.md]: where the time of an "expired" goes,
# with 1,000 leases held.  EXPIRIES terms (default 200) lapse 25 ms apart;
# a LISTENing client notes each expired event's arrival.  Each event's
# time is split at the commit of the worker's announcement (its row's
# commit timestamp, track_commit_timestamp = on): from expires_at to that
# commit (the worker waking at the deadline, its transaction, the
# commit), then from that commit to the listener (the delivery's
# transaction, NOTIFY, the listener's backend and client).  With fsync off
# (the cost of the work, as section 3 of bench/RESULTS.md) and on.  Part
# of make bench.
set -eu
n=${1:-200}
out=${2:-/dev/stdout}
here=$(cd "$(dirname "$0")" && pwd)
. "$here/../scripts/scratch.sh"

run() {
	scratch_start "fsync = $1" "track_commit_timestamp = on" "shared_buffers = '256MB'"
	scratch_psql -q -c 'CREATE EXTENSION hoplock' \
		-c "SELECT count(hoplock_acquire('held-' || i, 'o', '1 day')) FROM generate_series(1, 1000) AS i" >/dev/null
	perl - "$n" "$1" <<'PERL'
use strict;
use warnings;
use DBI;
use IO::Select;
use Time::HiRes qw(time);
my ($n, $fsync) = @ARGV;
my $dsn = "dbi:Pg:host=$ENV{PGHOST};port=$ENV{PGPORT};dbname=postgres";
my $db = DBI->connect($dsn, 'postgres', '', { RaiseError => 1, AutoCommit => 1 });
my $l = DBI->connect($dsn, 'postgres', '', { RaiseError => 1, AutoCommit => 1 });
$l->do('LISTEN hoplock');
$db->do("SELECT hoplock_acquire('lat-' || i, 'o', (500 + 25 * i || ' ms')::interval) FROM generate_series(1, $n) AS i");
my (%got, $t);
my $sel = IO::Select->new($l->{pg_socket});
my $deadline = time() + 10 + $n * 0.025;
while (keys(%got) < $n && time() < $deadline)
{
	next unless $sel->can_read(0.2);
	$t = time();
	while (my $note = $l->pg_notifies)
	{
		next unless $note->[2] =~ /"event": "expired", "name": "(lat-\d+)"/;
		$got{$1} //= $t;
	}
}
die "only " . keys(%got) . " of $n expired events arrived\n" if keys(%got) < $n;
my $rows = $db->selectall_arrayref(q{
	SELECT name, extract(epoch FROM at), extract(epoch FROM pg_xact_commit_timestamp(xmin))
	  FROM hoplock_internal.event WHERE event = 'expired' AND name LIKE 'lat-%'});
my (@total, @announce, @deliver);
for (@$rows)
{
	my ($name, $at, $committed) = @$_;
	push @total, 1000 * ($got{$name} - $at);
	push @announce, 1000 * ($committed - $at);
	push @deliver, 1000 * ($got{$name} - $committed);
}
sub pct { my ($p, @v) = @_; @v = sort { $a <=> $b } @v; return sprintf('%.2f', $v[ int($p * $#v + 0.5) ]); }
for ([ 'expires_at to the listener', \@total ], [ 'expires_at to the announcement\'s commit', \@announce ],
	[ 'the commit to the listener', \@deliver ])
{
	my ($what, $v) = @$_;
	printf "| %s | %s | %s | %s | %s |\n", $fsync, $what, pct(0.5, @$v), pct(0.99, @$v), pct(1, @$v);
}
PERL
	scratch_stop
}

{
	echo "\"expired\" with 1,000 leases held, $n expiries 25 ms apart; milliseconds (p50, p99, max)."
	echo
	echo "| fsync | from ... to ... | p50 | p99 | max |"
	echo "| --- | --- | --- | --- | --- |"
	run off
	run on
} >"$out"
