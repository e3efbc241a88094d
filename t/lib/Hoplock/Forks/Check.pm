# Hoplock::Forks::Check: the checker of the fork torture run.  It takes
# the record a run made -- every value any client was told, on which
# branch, at which step -- and returns, for each property of the rule "a
# value a client has seen never stands for anything else, across every
# fork", the list of its violations (empty when it holds).  It reads
# nothing else, so it can be handed made-up records (self_test does).
#
# A chain is one lease history and its forks; values of different chains
# are unrelated.  A branch is one line of that history between forks.
#
# The record, as a hash:
#   branches => { id => { id, ch, parent, kind (root|crash|clone|template|
#                         dump_newdb|dump_cluster|dump_dataonly|
#                         restore_inplace|promote_sync|promote_async),
#                         step, node, db, detail, ended } }
#   grants   => [ { ch, b, step, src (acquire|renew|write|read|history), n, g, o, acq, exp } ]
#   events   => [ { ch, b, step, src (read|notify|final), seq, ev, n, g, o, sl (the
#                   slot, for a lease with slots) } ]
#   handles  => [ { ch, b, step, src, n, h, o, g, acq, exp } ]
#   guards   => [ { ch, b, step, k (fence|trigger|write), n, g, h, mine => { o, g, acq[, exp] },
#                   from_b, ok, e, cur => { o, g, acq, exp } | undef, stale } ]
#   streams  => [ { id, ch, b, step, via, events => [ { seq, ev, n, g, o } ] } ]
#                 (hoplock_events(0) as read, in the snapshot of a resume)
#   resumes  => [ { ch, b, step, via, from_b, after, known (stream id: where
#                   the client saw "after"), full (stream id: hoplock_events(0)
#                   beside it), got => [ events ] | undef, e, em } ]
#   forks    => [ { ch, k, step, from => [ ids ], to => [ ids ], detail } ]
#   ops      => { name => count }
#   crashes  => [ log lines ]
#
# Times (acq, exp) are server clock readings in integer microseconds.
package Hoplock::Forks::Check;

use strict;
use warnings;
use Hoplock::Torture::Check ();

# Hoplock::Torture::Check's event automaton, on this record's events
# (ev, g: the torture history names them event, generation)
sub torture_step
{
	my ($p, $e) = @_;
	return undef unless defined $p;
	return Hoplock::Torture::Check::bad_step({ event => $p->{ev}, generation => $p->{g} },
		{ event => $e->{ev}, generation => $e->{g} });
}

our @CHECKS = (
	[ generation_once => '(a) no (name, generation) was granted to two different terms (owner, acquired_at), across all branches of a chain' ],
	[ event_once => '(b) no event number stood for two different events, across all branches of a chain' ],
	[ handle_once => '(c) no (name, handle) stood for two different states of the lease, across all branches of a chain' ],
	[ stale_refused => '(d) every fence, fenced row and hoplock_write whose term or handle was not the lease\'s current state was refused' ],
	[ events_complete => '(e) hoplock_events(n), from every number a client saw, returned every event of the branch the client had not seen, well formed per name, or raised an error' ],
	[ no_crash => 'no server process crashed (no PANIC, assertion failure, or signal but SIGKILL)' ],
);

sub check_ids { return map { $_->[0] } @CHECKS; }

# The stream an event belongs to: its name's, or its slot's for a lease
# with slots (each slot's events are well formed on their own)
sub stream_key { my ($e) = @_; return defined $e->{sl} ? "$e->{n} slot $e->{sl}" : $e->{n}; }
sub describe { my ($id) = @_; my ($c) = grep { $_->[0] eq $id } @CHECKS; return $c->[1]; }

# ---------------------------------------------------------------------------
# Helpers

# The kinds of the forks between branches $x and $y (from their last
# common ancestor), e.g. "promote_async" or "crash+restore_inplace";
# "same branch" when equal.
sub forks_between
{
	my ($h, $x, $y) = @_;
	return 'same branch' if !defined $x || !defined $y || $x eq $y;
	my $br = $h->{branches} // {};
	my @ax;
	for (my $b = $x; defined $b; $b = $br->{$b} ? $br->{$b}{parent} : undef) { push @ax, $b; }
	my %inx = map { $ax[$_] => $_ } 0 .. $#ax;
	my (@py, $lca);
	for (my $b = $y; defined $b; $b = $br->{$b} ? $br->{$b}{parent} : undef)
	{
		if (exists $inx{$b}) { $lca = $b; last; }
		push @py, $b;
	}
	my @px = defined $lca ? @ax[ 0 .. $inx{$lca} - 1 ] : @ax;
	my %k;
	$k{ $br->{$_}{kind} // '?' } = 1 for @px, @py;
	delete $k{root};
	return join('+', sort keys %k) || 'same branch';
}

# How far apart branches $x and $y are: the number of branches on the path
# between them (0: the same; a large number: unrelated)
sub distance
{
	my ($h, $x, $y) = @_;
	return 0 if $x eq $y;
	my $br = $h->{branches} // {};
	my %dx;
	my $i = 0;
	for (my $b = $x; defined $b; $b = $br->{$b} ? $br->{$b}{parent} : undef) { $dx{$b} //= $i++; }
	$i = 0;
	for (my $b = $y; defined $b; $b = $br->{$b} ? $br->{$b}{parent} : undef, $i++)
	{
		return $dx{$b} + $i if exists $dx{$b};
	}
	return 1_000_000;
}

# Of the records @$earlier, the one nearest to $r's branch
sub nearest
{
	my ($h, $r, $earlier) = @_;
	my ($best, $bd);
	for my $e (@$earlier)
	{
		my $d = distance($h, $e->{b}, $r->{b});
		($best, $bd) = ($e, $d) if !defined $bd || $d < $bd;
	}
	return $best;
}

sub fmt_term
{
	my ($t) = @_;
	return 'none' unless $t;
	return sprintf('(owner %s, g=%s, acquired %s%s)', $t->{o} // '?', $t->{g} // '?', $t->{acq} // '?',
		defined $t->{exp} ? ", expires $t->{exp}" : '');
}

sub fmt_ev
{
	my ($e) = @_;
	return sprintf('seq %s %s(%s, g=%s, %s)', $e->{seq}, $e->{ev}, $e->{n}, $e->{g}, $e->{o} // '?');
}

sub where
{
	my ($r) = @_;
	return "branch $r->{b}" . ($r->{via} ? " ($r->{via})" : '') . " step $r->{step} ($r->{src})";
}

sub ev_key { my ($e) = @_; return join("\0", $e->{ev}, $e->{n}, $e->{g}, $e->{o} // ''); }

# Per check: the violations (text), and by fork kinds (for the summary)
sub add
{
	my ($v, $id, $forks, $msg) = @_;
	push @{ $v->{$id} }, "[$forks] $msg";
}

# ---------------------------------------------------------------------------
# The checks

sub check
{
	my ($h) = @_;
	my %v = map { $_ => [] } check_ids();

	# --- (a) generation_once ---------------------------------------------------
	# each (name, generation) of a chain: the terms it was told as, by
	# (owner, acquired_at); an acquired event gives the owner only
	my %gen;
	my @told = sort { $a->{step} <=> $b->{step} } @{ $h->{grants} // [] };
	push @told, map { { %$_, src => "event $_->{src}" } } grep { $_->{ev} eq 'acquired' } @{ $h->{events} // [] };
	for my $r (@told)
	{
		my $terms = $gen{"$r->{ch}\0$r->{n}\0$r->{g}"} //= [];
		my ($same) = grep {
			$_->{o} eq $r->{o} && (!defined $_->{acq} || !defined $r->{acq} || $_->{acq} == $r->{acq})
		} @$terms;
		if (!$same)
		{
			push @$terms, $r;
		}
		elsif (!defined $same->{acq} && defined $r->{acq})
		{
			# what is known of the term: its acquired_at too
			@$terms = map { $_ == $same ? { %$r } : $_ } @$terms;
		}
	}
	for my $key (sort keys %gen)
	{
		my $terms = $gen{$key};
		next if @$terms < 2;
		my ($ch, $n, $g) = split /\0/, $key;
		for my $i (1 .. $#$terms)
		{
			my $r = $terms->[$i];
			my $first = nearest($h, $r, [ @$terms[ 0 .. $i - 1 ] ]);
			add(\%v, 'generation_once', forks_between($h, $first->{b}, $r->{b}),
				"generation $g of $n (chain $ch) stands for two terms: " . fmt_term($first) . ' at ' . where($first)
				  . ' / ' . fmt_term($r) . ' at ' . where($r));
		}
	}

	# --- (b) event_once ----------------------------------------------------------
	my %seq;
	for my $e (sort { $a->{step} <=> $b->{step} } @{ $h->{events} // [] })
	{
		$seq{"$e->{ch}\0$e->{seq}"}{ ev_key($e) } //= $e;
	}
	for my $key (sort keys %seq)
	{
		my @e = sort { $a->{step} <=> $b->{step} } values %{ $seq{$key} };
		next if @e < 2;
		my ($ch, $s) = split /\0/, $key;
		for my $i (1 .. $#e)
		{
			my $e = $e[$i];
			my $f = nearest($h, $e, [ @e[ 0 .. $i - 1 ] ]);
			add(\%v, 'event_once', forks_between($h, $f->{b}, $e->{b}),
				"event number $s (chain $ch) stands for two events: " . fmt_ev($f) . ' at ' . where($f)
				  . ' / ' . fmt_ev($e) . ' at ' . where($e));
		}
	}

	# --- (c) handle_once ----------------------------------------------------------
	my %hd;
	for my $r (sort { $a->{step} <=> $b->{step} } @{ $h->{handles} // [] })
	{
		$hd{"$r->{ch}\0$r->{n}\0$r->{h}"}{ join("\0", $r->{o}, $r->{g}, $r->{acq}, $r->{exp}) } //= $r;
	}
	for my $key (sort keys %hd)
	{
		my @r = sort { $a->{step} <=> $b->{step} } values %{ $hd{$key} };
		next if @r < 2;
		my ($ch, $n, $handle) = split /\0/, $key;
		for my $i (1 .. $#r)
		{
			my $r = $r[$i];
			my $f = nearest($h, $r, [ @r[ 0 .. $i - 1 ] ]);
			add(\%v, 'handle_once', forks_between($h, $f->{b}, $r->{b}),
				"handle $handle of $n (chain $ch) stands for two states: " . fmt_term($f) . ' at ' . where($f)
				  . ' / ' . fmt_term($r) . ' at ' . where($r));
		}
	}

	# --- (d) stale_refused --------------------------------------------------------
	for my $gd (sort { $a->{step} <=> $b->{step} } @{ $h->{guards} // [] })
	{
		next unless $gd->{ok};
		my ($m, $c) = ($gd->{mine}, $gd->{cur});
		my $same = $c && $m->{o} eq $c->{o} && $m->{g} == $c->{g} && $m->{acq} == $c->{acq}
		  && ($gd->{k} ne 'write' || $m->{exp} == $c->{exp});
		next if $same;
		my $what = $gd->{k} eq 'write'
		  ? "hoplock_write($gd->{n}, '$gd->{h}') with a handle told on branch $gd->{from_b} for state " . fmt_term($m)
		  : ($gd->{k} eq 'fence' ? 'hoplock_fence' : 'a hoplock_fenced row')
		  . "($gd->{n}, g=$gd->{g}) of the term " . fmt_term($m) . " granted on branch $gd->{from_b}";
		add(\%v, 'stale_refused', forks_between($h, $gd->{from_b}, $gd->{b}),
			"$what passed on branch $gd->{b} step $gd->{step} while the lease was " . fmt_term($c));
	}

	# --- (e) events_complete ------------------------------------------------------
	my %stream = map { $_->{id} => $_ } @{ $h->{streams} // [] };
	my (%said, %bad_pair);
	for my $s (@{ $h->{streams} // [] })
	{
		# the stream from 0 itself: well formed per name (a fault in it is
		# put down to the forks the branch descends from)
		my %prev;
		for my $e (@{ $s->{events} })
		{
			my $p = $prev{ stream_key($e) };
			my $why = !$p && $e->{ev} ne 'acquired' ? "the first event of $e->{n} is $e->{ev}" : torture_step($p, $e);
			$prev{ stream_key($e) } = $e;
			next unless $why;
			$bad_pair{ $s->{id} }{ ($p ? "$p->{seq}\0" . ev_key($p) : '') . "\0$e->{seq}\0" . ev_key($e) } = 1;
			my $msg = "hoplock_events(0) is not well formed: $why: " . ($p ? fmt_ev($p) . ' then ' : '') . fmt_ev($e);
			next if $said{"$s->{ch}\0$msg"}++;
			add(\%v, 'events_complete', forks_between($h, "$s->{ch}.1", $s->{b}),
				"$msg, on branch $s->{b}" . ($s->{via} ? " ($s->{via})" : '') . " step $s->{step}");
		}
	}
	for my $r (sort { $a->{step} <=> $b->{step} } @{ $h->{resumes} // [] })
	{
		next if defined $r->{e};    # an error is an answer
		my $known = $stream{ $r->{known} } or next;
		my $full  = $stream{ $r->{full} } or next;
		my $forks = forks_between($h, $r->{from_b}, $r->{b});
		my $at = "hoplock_events($r->{after}) (a number seen on branch $r->{from_b}) on branch $r->{b}"
		  . ($r->{via} ? " ($r->{via})" : '') . " step $r->{step}";
		my %k = map { ev_key($_) => $_ } grep { $_->{seq} <= $r->{after} } @{ $known->{events} };
		my %got = map { ("$_->{seq}\0" . ev_key($_)) => 1 } @{ $r->{got} };
		my (@below, @above);
		for my $e (@{ $full->{events} })
		{
			next if $k{ ev_key($e) } || $got{ "$e->{seq}\0" . ev_key($e) };
			if ($e->{seq} <= $r->{after}) { push @below, $e } else { push @above, $e }
		}
		add(\%v, 'events_complete', $forks,
			"$at silently left out " . scalar(@below) . ' event(s) the client never saw, numbered at or below '
			  . "$r->{after}: " . join(' / ', map { fmt_ev($_) } @below[ 0 .. ($#below < 4 ? $#below : 4) ]))
		  if @below;
		add(\%v, 'events_complete', $forks,
			"$at did not return " . scalar(@above) . ' event(s) of the branch numbered above it: '
			  . join(' / ', map { fmt_ev($_) } @above[ 0 .. ($#above < 4 ? $#above : 4) ]))
		  if @above;
		# well formed per name, continuing what the client knew
		my %prev;
		for my $e (sort { $a->{seq} <=> $b->{seq} } grep { $_->{seq} <= $r->{after} } @{ $known->{events} })
		{
			$prev{ stream_key($e) } = $e;
		}
		my $last;
		for my $e (@{ $r->{got} })
		{
			if ($e->{seq} <= $r->{after} || ($last && $e->{seq} <= $last->{seq}))
			{
				add(\%v, 'events_complete', $forks, "$at returned " . fmt_ev($e) . ' out of order');
			}
			$last = $e;
			my $p = $prev{ stream_key($e) };
			my $why = $p ? torture_step($p, $e) : $e->{ev} ne 'acquired' ? "the first event of $e->{n} is $e->{ev}" : undef;
			# (what the stream from 0 shows already was reported with it)
			$why = undef if $why && $bad_pair{ $r->{full} }{ ($p ? "$p->{seq}\0" . ev_key($p) : '') . "\0$e->{seq}\0" . ev_key($e) };
			add(\%v, 'events_complete', $forks, "$at is not well formed after what the client knew: $why: "
				  . ($p ? fmt_ev($p) . ' then ' : '') . fmt_ev($e))
			  if $why;
			$prev{ stream_key($e) } = $e;
		}
	}

	# --- no_crash -----------------------------------------------------------------
	add(\%v, 'no_crash', 'server log', $_) for @{ $h->{crashes} // [] };

	return \%v;
}

# Violations per check and fork kind: { check => { kinds => count } }
sub by_fork
{
	my ($v) = @_;
	my %s;
	for my $id (keys %$v)
	{
		for my $m (@{ $v->{$id} })
		{
			my ($k) = $m =~ /^\[([^\]]*)\]/;
			$s{$id}{ $k // '?' }++;
		}
	}
	return \%s;
}

# ---------------------------------------------------------------------------
# Counts, for the report

sub counts
{
	my ($h) = @_;
	my %n;
	my %chains = map { $_->{ch} => 1 } values %{ $h->{branches} // {} };
	$n{chains} = keys %chains;
	$n{branches} = keys %{ $h->{branches} // {} };
	$n{"fork_$_->{k}"}++ for @{ $h->{forks} // [] };
	$n{forks} = @{ $h->{forks} // [] };
	$n{$_} = $h->{ops}{$_} for keys %{ $h->{ops} // {} };
	my %terms = map { ("$_->{ch}\0$_->{n}\0$_->{g}\0$_->{o}\0$_->{acq}" => 1) } @{ $h->{grants} // [] };
	$n{terms} = keys %terms;
	$n{grants_told} = @{ $h->{grants} // [] };
	my %seqs = map { ("$_->{ch}\0$_->{seq}" => 1) } @{ $h->{events} // [] };
	$n{event_numbers} = keys %seqs;
	$n{events_told} = @{ $h->{events} // [] };
	$n{notified} = grep { $_->{src} eq 'notify' } @{ $h->{events} // [] };
	my %hd = map { ("$_->{ch}\0$_->{n}\0$_->{h}" => 1) } @{ $h->{handles} // [] };
	$n{handles} = keys %hd;
	$n{handles_told} = @{ $h->{handles} // [] };
	my @g = @{ $h->{guards} // [] };
	for my $k (qw(fence trigger write))
	{
		my @x = grep { $_->{k} eq $k } @g;
		$n{"guard_$k"} = @x;
		$n{"guard_${k}_stale"} = grep { $_->{stale} } @x;
		$n{"guard_${k}_passed"} = grep { $_->{ok} } @x;
		$n{"guard_${k}_other_branch"} = grep { $_->{from_b} ne $_->{b} } @x;
	}
	my @r = @{ $h->{resumes} // [] };
	$n{resumes} = @r;
	$n{resumes_error} = grep { defined $_->{e} } @r;
	$n{resumes_other_branch} = grep { $_->{from_b} ne $_->{b} } @r;
	$n{resumes_standby} = grep { ($_->{via} // '') eq 'standby' } @r;
	$n{streams} = @{ $h->{streams} // [] };
	# what each check compared
	$n{check_generation_once} = keys %{ { map { ("$_->{ch}\0$_->{n}\0$_->{g}" => 1) } @{ $h->{grants} // [] } } };
	$n{check_event_once} = $n{event_numbers};
	$n{check_handle_once} = $n{handles};
	$n{check_stale_refused} = grep { $_->{ok} } @g;
	$n{check_events_complete} = $n{resumes} - $n{resumes_error} + $n{streams};
	return \%n;
}

# ---------------------------------------------------------------------------
# The checker's own test: a small record that passes every check, and
# changes to it, one or more per check, that the check must report.

sub sample
{
	my $s = 1_800_000_000_000_000;
	my %b1 = (ch => 1, b => '1.1');
	my %b2 = (ch => 1, b => '1.2');
	my @ev1 = (
		{ seq => 1, ev => 'acquired', n => 'a', g => 1, o => 'o1' },
		{ seq => 2, ev => 'released', n => 'a', g => 1, o => 'o1' },
	);
	my @ev2 = (@ev1, { seq => 40, ev => 'acquired', n => 'a', g => 2, o => 'o2' });
	my %t1 = (o => 'o1', g => 1, acq => $s);
	my %t2 = (o => 'o2', g => 2, acq => $s + 500_000);
	return {
		branches => {
			'1.1' => { id => '1.1', ch => 1, parent => undef, kind => 'root', step => 0 },
			'1.2' => { id => '1.2', ch => 1, parent => '1.1', kind => 'crash', step => 10 },
			'1.3' => { id => '1.3', ch => 1, parent => '1.1', kind => 'restore_inplace', step => 20 },
		},
		grants => [
			{ %b1, step => 1, src => 'acquire', n => 'a', %t1, exp => $s + 300_000 },
			{ %b1, step => 2, src => 'renew', n => 'a', %t1, exp => $s + 400_000 },
			{ %b2, step => 11, src => 'history', n => 'a', %t1 },
			{ %b2, step => 12, src => 'acquire', n => 'a', %t2, exp => $s + 900_000 },
		],
		events => [
			(map { { %b1, step => 5, src => 'read', %$_ } } @ev1),
			(map { { %b2, step => 13, src => 'read', %$_ } } @ev2),
			{ %b2, step => 12, src => 'notify', %{ $ev2[2] } },
		],
		handles => [
			{ %b1, step => 1, src => 'acquire', n => 'a', h => '1:700', %t1, exp => $s + 300_000 },
			{ %b1, step => 2, src => 'renew', n => 'a', h => '1:701', %t1, exp => $s + 400_000 },
			{ %b2, step => 12, src => 'acquire', n => 'a', h => '2:705', %t2, exp => $s + 900_000 },
			{ %b2, step => 14, src => 'read', n => 'a', h => '2:705', %t2, exp => $s + 900_000 },
		],
		guards => [
			{ %b1, step => 3, k => 'fence', n => 'a', g => 1, mine => {%t1}, from_b => '1.1', ok => 1,
				cur => { %t1, exp => $s + 400_000 } },
			{ %b2, step => 15, k => 'trigger', n => 'a', g => 1, mine => {%t1}, from_b => '1.1', ok => 0, e => '55P03',
				cur => undef, stale => 1 },
			{ %b2, step => 16, k => 'write', n => 'a', h => '2:705', mine => { %t2, exp => $s + 900_000 }, from_b => '1.2',
				ok => 1, cur => { %t2, exp => $s + 900_000 } },
			{ %b2, step => 17, k => 'write', n => 'a', h => '1:701', mine => { %t1, exp => $s + 400_000 }, from_b => '1.1',
				ok => 0, cur => { %t2, exp => $s + 950_000 }, stale => 1 },
		],
		streams => [
			{ id => 1, %b1, step => 5, events => [ map { {%$_} } @ev1 ] },
			{ id => 2, %b2, step => 13, events => [ map { {%$_} } @ev2 ] },
			# a lease with two slots: its terms overlap, each slot's stream
			# well formed
			{ id => 3, %b2, step => 14, events => [
				{ seq => 50, ev => 'acquired', n => 'j', sl => 1, g => 1, o => 'o1' },
				{ seq => 51, ev => 'acquired', n => 'j', sl => 2, g => 2, o => 'o2' },
				{ seq => 52, ev => 'released', n => 'j', sl => 1, g => 1, o => 'o1' },
				{ seq => 53, ev => 'released', n => 'j', sl => 2, g => 2, o => 'o2' } ] },
		],
		resumes => [
			{ %b2, step => 13, from_b => '1.1', after => 2, known => 1, full => 2, got => [ { %{ $ev2[2] } } ] },
			{ %b2, step => 13, from_b => '1.1', after => 1, known => 1, full => 2, got => [ map { {%$_} } @ev2[ 1, 2 ] ] },
		],
		forks => [ { ch => 1, k => 'crash', step => 10, from => ['1.1'], to => ['1.2'] } ],
		ops => {},
		crashes => [],
	};
}

our @MUTATIONS = (
	[ generation_once => 'a generation granted again, to another owner, after an in-place restore', sub {
		push @{ $_[0]{grants} }, { ch => 1, b => '1.3', step => 21, src => 'acquire', n => 'a', o => 'o3', g => 2,
			acq => $_[0]{grants}[3]{acq} + 1, exp => 0 } } ],
	[ generation_once => 'a generation granted again at another instant, to the same owner', sub {
		push @{ $_[0]{grants} }, { %{ $_[0]{grants}[3] }, b => '1.3', step => 21, acq => $_[0]{grants}[3]{acq} + 7 } } ],
	[ event_once => 'an event number used again for another event', sub {
		push @{ $_[0]{events} }, { ch => 1, b => '1.3', step => 22, src => 'notify', seq => 40, ev => 'acquired',
			n => 'b', g => 1, o => 'o4' } } ],
	[ handle_once => 'a handle standing for another state (a renewal at a reused xid)', sub {
		push @{ $_[0]{handles} }, { %{ $_[0]{handles}[1] }, b => '1.3', step => 23, exp => $_[0]{handles}[1]{exp} + 1 } } ],
	[ stale_refused => 'a stale fenced row that passed', sub {
		$_[0]{guards}[1]{ok} = 1;
		$_[0]{guards}[1]{cur} = { o => 'o2', g => 1, acq => 5, exp => 6 } } ],
	[ stale_refused => 'a stale-handle write that passed', sub { $_[0]{guards}[3]{ok} = 1 } ],
	[ events_complete => 'hoplock_events(n) returning less than the branch holds', sub { $_[0]{resumes}[0]{got} = [] } ],
	[ events_complete => 'an event the client never saw numbered below its n (renumbered)', sub {
		$_[0]{streams}[1]{events}[2]{seq} = 2;
		$_[0]{resumes}[0]{got} = [] } ],
	[ events_complete => 'hoplock_events(n) not well formed after what the client knew', sub {
		$_[0]{resumes}[1]{got} = [ { %{ $_[0]{resumes}[1]{got}[1] } } ] } ],
	[ events_complete => 'hoplock_events(0) not well formed', sub {
		push @{ $_[0]{streams}[1]{events} }, { seq => 41, ev => 'acquired', n => 'a', g => 3, o => 'o5' } } ],
	[ events_complete => 'hoplock_events(0) not well formed in one slot of a lease with slots', sub {
		$_[0]{streams}[2]{events}[2] = { seq => 52, ev => 'acquired', n => 'j', sl => 1, g => 3, o => 'o5' } } ],
	[ no_crash => 'a server process crashed', sub {
		push @{ $_[0]{crashes} }, 'forks1: LOG:  server process (PID 1) was terminated by signal 11' } ],
);

# Returns the violations of the unchanged sample, and [ check, what,
# detected (bool), messages ] for each change.
sub self_test
{
	my $clean = check(sample());
	my @out;
	for my $m (@MUTATIONS)
	{
		my ($id, $what, $change) = @$m;
		my $h = sample();
		$change->($h);
		my $v = check($h);
		push @out, [ $id, $what, scalar(@{ $v->{$id} }) > 0, $v->{$id} ];
	}
	return ($clean, \@out);
}

1;
