#!/usr/bin/perl
# bench/expiry.pl N: run by bench/expiry.sh against its scratch server
# (PGHOST, PGPORT; track_commit_timestamp = on, 1,000 leases held).  Waits
# for the expiry worker to have the held leases in its schedule and sleep,
# then N terms lapse 25 ms apart and a LISTENing client notes each expired
# event's arrival.  Right after each arrival it reads the delivery's
# position, time and commit (hoplock_internal.delivery, one row a delivery
# rewrites), the run-queue waits of the worker, the listener's backend and
# itself since the last arrival (/proc/PID/schedstat: time runnable but not
# running) and the worker's CPU time since then; at the end, the lease row's version (minted when the worker
# decided, the clock in its high bits), the event's number (taken at the
# announcement's pre-commit, likewise) and its row's commit timestamp.
# All on this machine's one clock.  Each event's time from expires_at to
# the listener is split into:
#
#   wake     expires_at -> the worker decided the term had lapsed (it woke,
#            read its mailbox, began, locked, read the row)
#   xact     decided -> the event numbered at the pre-commit (the row
#            written, its history)
#   commit   numbered -> the announcement's commit record (its event row
#            and index entry)
#   deliver  the commit -> the delivery queued the NOTIFY (the commit's WAL
#            flush, the worker's delivery transaction reading the log)
#   dcommit  queued -> the delivery committed (asynchronous commit)
#   listener the delivery's commit -> the client has it (the listener's
#            backend signalled, reading the queue, the socket, DBD::Pg)
#
# and, as the floor of the last part, a bare pg_notify: its commit to the
# same client.  Prints tab-separated lines for bench/expiry.sh:
#   seg KEY p50 p99 max n     runq I p50 p99 max     floor p50 p99 max n
#   slow RANK total wake xact commit deliver dcommit listener runq0 runq1 runq2 cpu
#   (runq I: 0 the worker, 1 the listener's backend, 2 the client, 3 the
#   worker's CPU)
#   note TEXT
use strict;
use warnings;
use DBI;
use IO::Select;
use Time::HiRes qw(time usleep);

my $n = shift // 200;
my $dsn = "dbi:Pg:host=$ENV{PGHOST};port=$ENV{PGPORT};dbname=postgres";
my $db = DBI->connect($dsn, 'postgres', '', { RaiseError => 1, AutoCommit => 1 });
my $l = DBI->connect($dsn, 'postgres', '', { RaiseError => 1, AutoCommit => 1 });
sub one { return ($db->selectrow_array(@_))[0]; }

# steady: the worker has read the held leases and sleeps
my $settled;
for (1 .. 300)
{
	$settled = one(q{SELECT state = 'sleeping' AND leases_tracked >= 1000
	                   FROM hoplock_workers WHERE datname = current_database()});
	last if $settled;
	usleep(100_000);
}
die "expiry.pl: the worker did not settle\n" unless $settled;
sleep 2;    # past any branch margin of the event numbers' clock

my $worker = one(q{SELECT pid FROM hoplock_workers WHERE datname = current_database()});
my $lpid = $l->{pg_pid};
# nanoseconds runnable but waiting for a CPU, so far
sub runq { open my $fh, '<', "/proc/$_[0]/schedstat" or return 0; my @f = split ' ', <$fh>; return $f[1]; }
sub cpu { open my $fh, '<', "/proc/$_[0]/schedstat" or return 0; my @f = split ' ', <$fh>; return $f[0]; }
my @pids = ($worker, $lpid, $$);
$l->do('LISTEN hoplock');
$l->do('LISTEN bench_probe');
my $sel = IO::Select->new($l->{pg_socket});

# the floor: a bare NOTIFY's commit to the client, 50 of them
my (@probe_lag);
for my $i (1 .. 50)
{
	$db->begin_work;
	my $xid = one(q{SELECT pg_current_xact_id()::text FROM pg_notify('bench_probe', ?)}, undef, $i);
	$db->commit;
	my $got;
	while (!defined $got && $sel->can_read(1))
	{
		my $t = time();
		while (my $note = $l->pg_notifies)
		{
			$got = $t if $note->[0] eq 'bench_probe' && $note->[2] eq $i;
		}
	}
	die "expiry.pl: probe $i not received\n" unless defined $got;
	my $c = one(q{SELECT extract(epoch FROM pg_xact_commit_timestamp(?::xid))}, undef, $xid);
	push @probe_lag, 1000 * ($got - $c);
	usleep(10_000);
}

$db->do("SELECT hoplock_acquire('lat-' || i, 'o', (500 + 25 * i || ' ms')::interval) FROM generate_series(1, $n) AS i");
my (%got, %runq, %deliv);
my @rq0 = map { runq($_) } @pids;
my $cpu0 = cpu($worker);
my $deadline = time() + 10 + $n * 0.025;
while (keys(%got) < $n && time() < $deadline)
{
	next unless $sel->can_read(0.2);
	my $t = time();
	my @names;
	while (my $note = $l->pg_notifies)
	{
		next unless $note->[2] =~ /"event": "expired", "name": "(lat-\d+)"/;
		next if $got{$1};
		$got{$1} = $t;
		push @names, $1;
	}
	next unless @names;
	# what the worker did for it, read before the next lapse (25 ms on)
	my @rq = map { runq($_) } @pids;
	my @w = map { ($rq[$_] - $rq0[$_]) / 1e6 } 0 .. $#pids;
	@rq0 = @rq;
	my $cpu1 = cpu($worker);
	push @w, ($cpu1 - $cpu0) / 1e6;
	$cpu0 = $cpu1;
	my @d = $db->selectrow_array(
		q{SELECT delivered::text, extract(epoch FROM delivered_at), extract(epoch FROM pg_xact_commit_timestamp(xmin))
		    FROM hoplock_internal.delivery});
	for (@names)
	{
		$runq{$_} = \@w;
		$deliv{$_} = [@d] if @names == 1;
	}
}
die "expiry.pl: only " . keys(%got) . " of $n expired events arrived\n" if keys(%got) < $n;

my $rows = $db->selectall_arrayref(q{
	SELECT e.name, e.seq::text, extract(epoch FROM e.at),
	       extract(epoch FROM pg_xact_commit_timestamp(e.xmin)),
	       ((e.seq >> 11) / 1e6 + extract(epoch FROM timestamptz '2000-01-01 00:00:00+00')),
	       ((l.version >> 11) / 1e6 + extract(epoch FROM timestamptz '2000-01-01 00:00:00+00'))
	  FROM hoplock_internal.event AS e JOIN hoplock_internal.lease AS l USING (name)
	 WHERE e.event = 'expired' AND e.name LIKE 'lat-%' AND l.state = 'x'});
my @keys = qw(total wake xact commit deliver dcommit listener);
my (%seg, @split, $unsplit);
for (@$rows)
{
	my ($name, $seq, $at, $committed, $numbered, $woke) = @$_;
	my $total = 1000 * ($got{$name} - $at);
	push @{ $seg{total} }, $total;
	my ($dseq, $queued, $dcommitted) = @{ $deliv{$name} // [] };
	# attributable: the delivery read was this event's, and the clocks
	# of the decision, the number and the commits come in their order
	unless (defined $dseq && $dseq eq $seq && defined $woke && defined $dcommitted
		&& $woke <= $numbered && $numbered <= $committed && $committed <= $queued
		&& $queued <= $dcommitted && $dcommitted <= $got{$name} && $woke >= $at)
	{
		printf STDERR "unsplit %s: dseq %s seq %s woke %.6f at %.6f numbered %.6f committed %.6f queued %.6f dcommitted %.6f\n",
			$name, $dseq // '-', $seq, ($woke // 0) - $at, $at - $at, $numbered - $at, $committed - $at, ($queued // 0) - $at,
			($dcommitted // 0) - $at if $ENV{EXPIRY_DEBUG};
		$unsplit++;
		next;
	}
	my %s = (total => $total, wake => 1000 * ($woke - $at), xact => 1000 * ($numbered - $woke),
		commit => 1000 * ($committed - $numbered), deliver => 1000 * ($queued - $committed),
		dcommit => 1000 * ($dcommitted - $queued), listener => 1000 * ($got{$name} - $dcommitted));
	push @{ $seg{$_} }, $s{$_} for grep { $_ ne 'total' } @keys;
	$s{runq} = $runq{$name};
	push @split, \%s;
}
sub pct { my ($p, @v) = @_; @v = sort { $a <=> $b } @v; return $v[ int($p * $#v + 0.5) ]; }
for my $k (@keys)
{
	my @v = @{ $seg{$k} // [] };
	next unless @v;
	printf "seg\t%s\t%.3f\t%.3f\t%.3f\t%d\n", $k, pct(0.5, @v), pct(0.99, @v), pct(1, @v), scalar @v;
}
printf "floor\t%.3f\t%.3f\t%.3f\t%d\n", pct(0.5, @probe_lag), pct(0.99, @probe_lag), pct(1, @probe_lag), scalar @probe_lag;
# the slowest split events: where the tail goes
my @slow = (sort { $b->{total} <=> $a->{total} } @split)[ 0 .. 2 ];
my $rank = 0;
for my $s (grep { defined } @slow)
{
	printf "slow\t%d\t%s\n", ++$rank, join("\t", (map { sprintf('%.3f', $s->{$_}) } @keys), map { sprintf('%.3f', $_) } @{ $s->{runq} });
}
for my $i (0 .. $#pids + 1)
{
	my @v = map { $_->{runq}[$i] } @split;
	printf "runq\t%d\t%.3f\t%.3f\t%.3f\n", $i, pct(0.5, @v), pct(0.99, @v), pct(1, @v) if @v;
}
printf "note\t%d of %d events split (the rest: a delivery of two at once, or clocks out of order)\n",
	scalar @split, $n;
