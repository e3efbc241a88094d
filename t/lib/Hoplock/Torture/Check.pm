# Hoplock::Torture::Check: the checker of the torture run.  It takes the
# history a run recorded -- every client call, every event a listener
# received, the faults, the fate of each server, and what the surviving
# server holds at the end -- and returns, for each property the README
# promises, the list of its violations (empty when it holds).  It reads
# nothing else, so it can be handed made-up histories (self_test does).
#
# Times: called_at / returned_at are the client's CLOCK_MONOTONIC before
# and after a call, received_at the listener's when an event came (all
# processes run on one machine, so they are comparable across processes);
# acquired_at, expires_at, ended_at, server_time and committed_at are
# server clock readings in integer microseconds since the epoch.
#
# The history, as a hash:
#   calls  => [ { client (its number), port, connection (the client's how
#                 manyth), synchronous_commit (on|off),
#                 kind (acquire|wait|renew|release|handoff|fenced|vanish|
#                 renew_all), name, owner, ttl (ms), timeout (ms, wait),
#                 session_bound, slots (acquire, wait: the lease's number),
#                 generation (the term renewed, released, handed off or
#                 fenced),
#                 called_at, returned_at,
#                 result => { generation, owner, acquired_at, expires_at } | undef
#                 (handoff: the candidate's new term),
#                 ok (release: true; fenced: committed), server_time,
#                 sqlstate, message, unknown_outcome (the error left it
#                 unknown whether the call took effect), late (a renewal
#                 after the ttl), fenced: ids (its rows), tag, fence_mode
#                 (fence|trigger|both), isolation, stale, hung, phase (where
#                 it failed); vanish: in_transaction;
#                 renew_all: owner, held ([ "name/generation" ] the client
#                 believed it held), started_at and server_time (the
#                 server's clock before and after it), rows => [ { name,
#                 slot, generation, expires_at } ] (what it renewed) } ]
#   notes  => [ { source (notify|catchup), listener, connection, port, seq,
#                 event, name, owner, generation, received_at } ]
#   nodes  => { port => { name, fate (final|sync|async), stop_t,
#                         standby_stop_t } }
#   final  => { history => [ { name, generation, owner, acquired_at, ended_at, how,
#                              slot (a lease with slots) } ],
#               events  => [ { seq, event, name, owner, generation } ],
#               leases  => [ { name, slot, state, owner, generation, acquired_at, expires_at } ],
#               rows    => [ { id, table (fence|trigger), name, generation, client, tag,
#                              committed_at } ],
#               unannounced => [ text ], amcheck => [ text ], crashes => [ text ] }
#   old    => { port => { history => [ ... ] } }   (replaced primaries)
#   clock_changes => [ [ t_from, t_to ] ]   (restarts that changed the clock)
#   faults => [ { kind, port, started_at, ended_at, detail, ... } ]  (not judged)
#   slots  => { name => N }   (the leases with slots, and their number)
package Hoplock::Torture::Check;

use strict;
use warnings;
use List::Util qw(max min sum0);

# What an asynchronous standby may miss: what its primary did in its last
# moments.  A promoted asynchronous standby is stopped $ASYNC_MARGIN
# seconds' worth of replication lag plus the time it was down before its
# primary; anything acknowledged earlier must survive.
our $ASYNC_MARGIN = 5;
# A commit is visible on the primary (its NOTIFY delivered) before a
# synchronous standby acknowledged it; one the standby never got may be
# missing after promotion, but only from the last moments.
our $SYNC_VISIBLE_MARGIN = 2;

our @CHECKS = (
	[ overlap => 'the terms of a name (of a slot, for a lease with slots) never overlap in server time (final history, and each replaced primary\'s)' ],
	[ slot_count => 'a lease with N slots never runs more than N terms at once, each in a slot numbered 1 to N; a lease without slots has no slot' ],
	[ slot_owner => 'an owner never holds two terms of a name at once (two slots)' ],
	[ slot_generations => 'the generations of a lease with slots are unique across its slots, and of two terms granted one after the other, the greater never began before the smaller' ],
	[ reuse => 'no generation is granted twice: every result and history row of a generation names the same owner and acquired_at (a handoff\'s result too)' ],
	[ order => 'generations only go up: no result carries a generation below one acknowledged before its call began, a new term is above every earlier one (crashes, promotions, asynchronous ones too)' ],
	[ durable => 'no acknowledged grant, renewal, release or handoff is lost (crashes, synchronous promotion; an asynchronous one only its last moments)' ],
	[ renew_null => 'a renewal returns NULL only once its term has ended' ],
	[ fenced_term => 'every committed fenced row belongs to the term that held the lease (its slot) at its commit, and to a term its writer was granted' ],
	[ fenced_order => 'a name\'s (a slot\'s) fenced rows, in id (commit) order, never go back in generation' ],
	[ fenced_durable => 'acknowledged fenced commits survive (synchronous_commit = on); rolled-back ones left no row' ],
	[ events_stream => 'each listener connection saw, per name (per slot, for a lease with slots), acquired(g) (renewed|proclaimed|step_down)(g)* then released(g) [freed(g)] or expired(g), then acquired(g\' > g)' ],
	[ events_once => 'no term is announced as begun or ended twice, across crashes (listeners and hoplock_events(0))' ],
	[ events_history => 'hoplock_events(0) is well formed per name and holds every event the listeners were sent' ],
	[ final_state => 'at the end every lapsed term is announced, the lease table agrees with the history, and amcheck finds nothing' ],
	[ no_crash => 'no server process crashed but the ones killed on purpose (no PANIC, assertion or signal but SIGKILL)' ],
	[ hold => 'a term released (or ended with its session) within its min_hold kept its name from other owners until acquired_at + min_hold (final history)' ],
	[ async_suffix => 'a promotion loses at most the last terms of each name: the replaced primary\'s history, cut at the end' ],
	[ renew_all_ended => 'hoplock_renew_all never renews a term that had ended: not one ended before the call, nor past the expiry its owner was last given, nor once another term began in its slot' ],
	[ renew_all_result => 'what hoplock_renew_all returns is the owner\'s terms (name, slot, generation), with one expiry, and none of its running attached terms left out' ],
	[ keepalive_clock => 'a term of an owner with a keepalive never ends before it began (t/104: after the clock steps back)' ],
	[ renew_all_inflight => 'hoplock_renew_all never renews a term whose end another transaction had in flight: no renewed(g) after released(g) (t/105, t/106)' ],
);

# Checks of known defects: reported, and judged as TODO
our %TODO = ();

sub check_ids { return map { $_->[0] } @CHECKS; }
sub describe { my ($id) = @_; my ($c) = grep { $_->[0] eq $id } @CHECKS; return $c->[1]; }

# ---------------------------------------------------------------------------
# Helpers

# Must what node $port acknowledged at client time $t be in the surviving
# history?
sub kept
{
	my ($h, $port, $t) = @_;
	my $node = $h->{nodes}{$port} // return 1;
	return 1 unless ($node->{fate} // '') eq 'async';
	return $t < $node->{standby_stop_t} - $ASYNC_MARGIN;
}

# Must what node $port merely showed (a NOTIFY received) at $t survive?
sub kept_visible
{
	my ($h, $port, $t) = @_;
	my $node = $h->{nodes}{$port} // return 1;
	my $fate = $node->{fate} // '';
	return $t < $node->{stop_t} - $SYNC_VISIBLE_MARGIN if $fate eq 'sync';
	return kept($h, $port, $t);
}

sub acked_result { my ($c) = @_; return $c->{kind} =~ /^(acquire|wait|renew)$/ && !$c->{sqlstate} && $c->{result}; }

sub fmt_call
{
	my ($c) = @_;
	if ($c->{kind} eq 'renew_all' && !defined $c->{name})
	{
		my @f = ("client c$c->{client}", "renew_all($c->{owner}, $c->{ttl} ms)",
			sprintf('t=%.3f..%.3f', $c->{called_at}, $c->{returned_at} // -1), "port $c->{port}");
		push @f, "held [@{ $c->{held} // [] }]";
		push @f, "clock $c->{started_at}..$c->{server_time}" if defined $c->{started_at};
		push @f, '-> [' . join(', ', map { "$_->{name}" . (defined $_->{slot} ? "/slot $_->{slot}" : '') . " g=$_->{generation} exp=$_->{expires_at}" } @{ $c->{rows} }) . ']'
		  if $c->{rows};
		push @f, "error $c->{sqlstate}" . ($c->{unknown_outcome} ? ' (outcome unknown)' : '') if $c->{sqlstate};
		return join(' ', @f);
	}
	my @f = ("client c$c->{client}", "$c->{kind}($c->{name}" . (defined $c->{generation} ? ", g=$c->{generation}" : '') . ')',
		sprintf('t=%.3f..%.3f', $c->{called_at}, $c->{returned_at} // -1), "port $c->{port}",
		"sc=$c->{synchronous_commit}");
	push @f, 'owner ' . ($c->{owner} // '?');
	push @f, "-> g=$c->{result}{generation} acq=" . ($c->{result}{acquired_at} // '?') . " exp=$c->{result}{expires_at}" if $c->{result};
	push @f, '-> NULL' if $c->{kind} =~ /^(acquire|wait|renew)$/ && !$c->{result} && !$c->{sqlstate};
	push @f, "ok=$c->{ok}" if defined $c->{ok};
	push @f, "st=$c->{server_time}" if defined $c->{server_time};
	push @f, "error $c->{sqlstate}" . ($c->{unknown_outcome} ? ' (outcome unknown)' : '') . ($c->{message} ? " \"$c->{message}\"" : '') if $c->{sqlstate};
	push @f, "tag $c->{tag}" if $c->{tag};
	push @f, "ids=@{$c->{ids}}" if $c->{ids} && @{ $c->{ids} };
	return join(' ', @f);
}

sub fmt_term
{
	my ($t) = @_;
	return sprintf('%s%s g=%s owner %s [%s, %s) %s', $t->{name}, has_slot($t) ? " slot $t->{slot}" : '',
		$t->{generation}, $t->{owner}, $t->{acquired_at}, $t->{ended_at} // 'running', $t->{how} // '');
}

sub fmt_note
{
	my ($e) = @_;
	return sprintf('%s seq=%s %s(%s, g=%s) owner %s via %s%s port %s t=%.3f', $e->{source} // 'final',
		$e->{seq}, $e->{event}, $e->{name}, $e->{generation}, $e->{owner} // '?',
		defined $e->{listener} ? "listener $e->{listener} connection " : '',
		$e->{connection} // '', $e->{port} // '-', $e->{received_at} // 0);
}

# Whether an event, term or row has a slot (a lease with slots)
sub has_slot
{
	my ($e) = @_;
	return defined $e->{slot} && $e->{slot} ne '' && $e->{slot} ne '\\N';
}

# The stream an event (a term) belongs to: its name's, or its slot's for a
# lease with slots (the payload's "slot", hoplock_events' slot column)
sub stream_of
{
	my ($e) = @_;
	return has_slot($e) ? "$e->{name} slot $e->{slot}" : $e->{name};
}

# terms of each stream (name, or name and slot), by generation
sub by_stream
{
	my ($terms) = @_;
	my %t;
	push @{ $t{ stream_of($_) } }, $_ for @$terms;
	@$_ = sort { $a->{generation} <=> $b->{generation} } @$_ for values %t;
	return \%t;
}

# terms of each name, by generation: { name => [ terms ] }
sub by_name
{
	my ($terms) = @_;
	my %t;
	push @{ $t{ $_->{name} } }, $_ for @$terms;
	@$_ = sort { $a->{generation} <=> $b->{generation} } @$_ for values %t;
	return \%t;
}

# Index of the greatest element of the sorted @$keys that is < $x, or -1.
sub below
{
	my ($keys, $x) = @_;
	my ($lo, $hi) = (0, scalar(@$keys));
	while ($lo < $hi)
	{
		my $mid = int(($lo + $hi) / 2);
		if ($keys->[$mid] < $x) { $lo = $mid + 1 } else { $hi = $mid }
	}
	return $lo - 1;
}

# The owners that called hoplock_renew_all (while check runs)
our %KEEPER;

# A renewed(g) of a keeper's term after its released(g): what t/105's
# defect leaves in a stream (judged apart; the stream goes on from the
# released(g))
sub renewed_after_release
{
	my ($p, $e) = @_;
	return $p && $KEEPER{ $p->{owner} // '' } && $p->{event} eq 'released' && $e->{event} eq 'renewed'
	  && $e->{generation} == $p->{generation};
}

# An event automaton: given the previous event of a name and the next one,
# the reason the pair is not well formed, or undef.
sub bad_step
{
	my ($prev, $e) = @_;
	if (!defined $prev)
	{
		return undef;
	}
	if ($prev->{event} =~ /^(acquired|renewed|proclaimed|step_down)$/)
	{
		return undef if $e->{event} =~ /^(renewed|proclaimed|step_down|released|expired)$/ && $e->{generation} == $prev->{generation};
		return "after $prev->{event}(g=$prev->{generation}) came $e->{event}(g=$e->{generation})";
	}
	# the hold of a term released early, over
	return undef if $prev->{event} eq 'released' && $e->{event} eq 'freed' && $e->{generation} == $prev->{generation};
	return undef if $e->{event} eq 'acquired' && $e->{generation} > $prev->{generation};
	return "after $prev->{event}(g=$prev->{generation}) came $e->{event}(g=$e->{generation})";
}

# ---------------------------------------------------------------------------
# The checks

sub check
{
	my ($h) = @_;
	my %v = map { $_ => [] } check_ids();
	my $final = $h->{final};
	my $fterms = by_name($final->{history});
	my $fstreams = by_stream($final->{history});
	my %nslots = %{ $h->{slots} // {} };
	my %fterm;    # name => generation => { term, next (the next in its slot) }
	for my $list (values %$fstreams)
	{
		for my $i (0 .. $#$list)
		{
			$fterm{ $list->[$i]{name} }{ $list->[$i]{generation} } = { term => $list->[$i], next => $list->[ $i + 1 ] };
		}
	}
	my @calls = @{ $h->{calls} };
	my @results = grep { acked_result($_) } @calls;
	# Was call $c made on a steady clock?  The restarts that change the
	# clock come in pairs, onto a clock ahead (by 3 s at most) and back:
	# from the first to 4 s after the second, times read on the clock
	# ahead -- and beginnings held to them -- mix with times read after.
	my @cc = @{ $h->{clock_changes} // [] };
	my @ahead;
	for (my $i = 0; $i < @cc; $i += 2)
	{
		push @ahead, [ $cc[$i][0], $cc[ $i + 1 ] ? $cc[ $i + 1 ][1] + 4 : 9**9**9 ];
	}
	my $steady = sub {
		my ($c) = @_;
		return !grep { $_->[0] < $c->{returned_at} && $_->[1] > $c->{called_at} } @ahead;
	};

	# --- overlap -----------------------------------------------------------
	# (a replaced primary's history shares most terms with the final one:
	# what is wrong in both is reported once)
	my @histories = ([ 'final history', $fstreams ]);
	push @histories, [ "history of replaced primary $_", by_stream($h->{old}{$_}{history}) ]
	  for sort keys %{ $h->{old} // {} };
	# (a term of an owner with a keepalive that ends before it began: its
	# own check, keepalive_clock)
	my %keeper = map { ($_->{owner} => 1) } grep { $_->{kind} eq 'renew_all' } @calls;
	local %KEEPER = %keeper;
	my (%said, @overlap, @kclock);
	for my $hist (@histories)
	{
		my ($what, $terms) = @$hist;
		my @found;
		for my $n (sort keys %$terms)
		{
			my $list = $terms->{$n};
			for my $i (0 .. $#$list)
			{
				my $t = $list->[$i];
				if (defined $t->{ended_at} && $t->{ended_at} < $t->{acquired_at})
				{
					push @{ $keeper{ $t->{owner} } ? \@kclock : \@found }, "$what: term ends before it begins: " . fmt_term($t);
				}
				next if $i == 0;
				my $p = $list->[ $i - 1 ];
				if (!defined $p->{ended_at})
				{
					push @found, "$what: a term began while an earlier one never ended: "
					  . fmt_term($p) . ' / ' . fmt_term($t);
				}
				elsif ($t->{acquired_at} < $p->{acquired_at})
				{
					# (after a term that ended before it began)
					push @{ $keeper{ $p->{owner} } && $p->{ended_at} < $p->{acquired_at} && $t->{acquired_at} >= $p->{ended_at} ? \@kclock : \@found },
					  sprintf('%s: a term began %d us before the previous one began: %s / %s', $what,
						$p->{acquired_at} - $t->{acquired_at}, fmt_term($p), fmt_term($t));
				}
				elsif ($t->{acquired_at} < $p->{ended_at})
				{
					push @found, sprintf('%s: terms overlap by %d us: %s / %s', $what,
						$p->{ended_at} - $t->{acquired_at}, fmt_term($p), fmt_term($t));
				}
			}
		}
		push @overlap, grep { (my $m = $_) =~ s/^[^:]*: //; !$said{$m}++ } @found;
	}
	$v{overlap} = \@overlap;
	$v{keepalive_clock} = [ grep { (my $m = $_) =~ s/^[^:]*: //; !$said{$m}++ } @kclock ];

	# --- reuse ------------------------------------------------------------------
	my %seen;
	for my $c (sort { $a->{called_at} <=> $b->{called_at} } @results)
	{
		my $key = "$c->{name}\0$c->{result}{generation}";
		my $first = $seen{$key} //= $c;
		if ($first->{result}{owner} ne $c->{result}{owner} || $first->{result}{acquired_at} != $c->{result}{acquired_at})
		{
			push @{ $v{reuse} }, "generation $c->{result}{generation} of $c->{name} granted twice: "
			  . fmt_call($first) . ' / ' . fmt_call($c);
		}
	}
	# a handoff's result names the term the candidate's wait returned: the
	# same owner and beginning (kept apart from the grants: the caller was
	# not granted it)
	my %handed;
	for my $c (grep { $_->{kind} eq 'handoff' && !$_->{sqlstate} && $_->{result} } @calls)
	{
		my $key = "$c->{name}\0$c->{result}{generation}";
		$handed{$key} //= $c;
		my $first = $seen{$key} // $handed{$key};
		push @{ $v{reuse} }, "generation $c->{result}{generation} of $c->{name} handed off to one owner and granted to another: "
		  . fmt_call($first) . ' / ' . fmt_call($c)
		  if $first->{result}{owner} ne $c->{result}{owner} || $first->{result}{acquired_at} != $c->{result}{acquired_at};
	}
	for my $hist (@histories)
	{
		my ($what, $terms) = @$hist;
		for my $t (map { @$_ } values %$terms)
		{
			my $c = $seen{"$t->{name}\0$t->{generation}"} // $handed{"$t->{name}\0$t->{generation}"} or next;
			push @{ $v{reuse} }, "$what disagrees with what a client was given: "
			  . fmt_term($t) . ' / ' . fmt_call($c)
			  if $c->{result}{owner} ne $t->{owner} || $c->{result}{acquired_at} != $t->{acquired_at};
		}
	}

	# --- order ------------------------------------------------------------------
	# A new term is above every generation of its name acknowledged
	# before; a result never goes back below one acknowledged before its
	# call (of its slot, for a lease with slots: a slot's term is renewed
	# while later terms run in the others).
	my %slot_of;    # "n\0g" => its slot, from any history
	for my $t (@{ $final->{history} }, map { @{ $_->{history} } } values %{ $h->{old} // {} })
	{
		$slot_of{"$t->{name}\0$t->{generation}"} = $t->{slot} if has_slot($t);
	}
	my (%res_by_name, %res_by_stream);
	for my $c (@results)
	{
		push @{ $res_by_name{ $c->{name} } }, $c;
		next unless $nslots{ $c->{name} };
		my $slot = $slot_of{"$c->{name}\0$c->{result}{generation}"} // next;
		push @{ $res_by_stream{"$c->{name} slot $slot"} }, $c;
	}
	my @groups = map { [ $res_by_name{$_}, !$nslots{$_}, 1 ] } sort keys %res_by_name;
	push @groups, map { [ $res_by_stream{$_}, 1, 0 ] } sort keys %res_by_stream;
	for my $group (@groups)
	{
		my ($list, $back, $new) = @$group;
		my @r = sort { $a->{returned_at} <=> $b->{returned_at} } @$list;
		# prefix maxima over results ordered by end: all; kept; per node
		my (@t_all, @m_all, @t_kept, @m_kept, %t_node, %m_node);
		for my $c (@r)
		{
			# (a result lost with its node in an asynchronous promotion,
			# minted while that node's clock was ahead or within 4 s of its
			# step back, may be above every later term: a branch begun after
			# the fork is above what was minted before it only while the
			# clock did not step back by more than the fork's age --
			# docs/forks-and-events.md, property 2 -- and the steps here are
			# 3 s, the branch margin 1 s)
			if (kept($h, $c->{port}, $c->{returned_at}) || $steady->($c))
			{
				push @t_all, $c->{returned_at};
				push @m_all, (!@m_all || $c->{result}{generation} > $m_all[-1]{result}{generation}) ? $c : $m_all[-1];
			}
			if (kept($h, $c->{port}, $c->{returned_at}))
			{
				push @t_kept, $c->{returned_at};
				push @m_kept, (!@m_kept || $c->{result}{generation} > $m_kept[-1]{result}{generation}) ? $c : $m_kept[-1];
			}
			my ($tn, $mn) = ($t_node{ $c->{port} } //= [], $m_node{ $c->{port} } //= []);
			push @$tn, $c->{returned_at};
			push @$mn, (!@$mn || $c->{result}{generation} > $mn->[-1]{result}{generation}) ? $c : $mn->[-1];
		}
		my %first;
		for my $c (@r)
		{
			my $f = $first{ $c->{result}{generation} };
			$first{ $c->{result}{generation} } = $c if !$f || $c->{called_at} < $f->{called_at};
		}
		for my $c ($back ? @r : ())
		{
			my @before;
			my $i = below(\@t_kept, $c->{called_at});
			push @before, $m_kept[$i] if $i >= 0;
			$i = below($t_node{ $c->{port} }, $c->{called_at});
			push @before, $m_node{ $c->{port} }[$i] if $i >= 0;
			for my $a (@before)
			{
				if ($c->{result}{generation} < $a->{result}{generation})
				{
					push @{ $v{order} }, "a result went back in generation after "
					  . fmt_call($a) . ': ' . fmt_call($c);
					last;
				}
			}
		}
		for my $c ($new ? values %first : ())
		{
			my $i = below(\@t_all, $c->{called_at});
			next if $i < 0;
			my $a = $m_all[$i];
			push @{ $v{order} }, 'a new term is not above a generation acknowledged before it was asked for: '
			  . fmt_call($a) . ' then ' . fmt_call($c)
			  if $c->{result}{generation} <= $a->{result}{generation};
		}
	}

	# --- durable ------------------------------------------------------------------
	# (a term renewed by hoplock_renew_all: one result for each row)
	my @renewed_all;
	for my $c (grep { $_->{kind} eq 'renew_all' && !$_->{sqlstate} && $_->{rows} } @calls)
	{
		push @renewed_all, map { {
			%$c, name => $_->{name}, generation => $_->{generation},
			result => { generation => $_->{generation}, owner => $c->{owner}, expires_at => $_->{expires_at} } } } @{ $c->{rows} };
	}
	my %last_ext;    # "n\0g" => last kept acked result
	for my $c (sort { $a->{called_at} <=> $b->{called_at} } @results, @renewed_all)
	{
		next unless kept($h, $c->{port}, $c->{returned_at});
		push @{ $v{durable} }, 'an acknowledged grant or renewal is missing from the surviving history: ' . fmt_call($c)
		  unless $fterm{ $c->{name} }{ $c->{result}{generation} };
		$last_ext{"$c->{name}\0$c->{result}{generation}"} = $c;
	}
	my %unknown_ext;    # "n\0g" => [ t0 of renewals with unknown outcome ]
	for my $c (@calls)
	{
		push @{ $unknown_ext{"$c->{name}\0$c->{generation}"} }, $c->{called_at}
		  if $c->{kind} eq 'renew' && $c->{unknown_outcome};
		if ($c->{kind} eq 'renew_all' && $c->{unknown_outcome})
		{
			push @{ $unknown_ext{ join("\0", split(m{/}, $_, 2)) } }, $c->{called_at} for @{ $c->{held} // [] };
		}
	}
	for my $key (sort keys %last_ext)
	{
		my $c = $last_ext{$key};
		my $ft = $fterm{ $c->{name} }{ $c->{result}{generation} } or next;
		my $t = $ft->{term};
		next unless defined $t->{how} && $t->{how} =~ /^(expired|taken over)$/;
		next if grep { $_ > $c->{called_at} } @{ $unknown_ext{$key} // [] };
		push @{ $v{durable} }, sprintf('an acknowledged renewal is lost: the term lapsed %d us before the expiry a client was given: %s / %s',
			$c->{result}{expires_at} - $t->{ended_at}, fmt_term($t), fmt_call($c))
		  if $t->{ended_at} < $c->{result}{expires_at};
	}
	for my $c (grep { $_->{kind} eq 'release' && !$_->{sqlstate} && $_->{ok} } @calls)
	{
		next unless kept($h, $c->{port}, $c->{returned_at});
		my $ft = $fterm{ $c->{name} }{ $c->{generation} };
		if (!$ft)
		{
			push @{ $v{durable} }, 'an acknowledged release names a term missing from the history: ' . fmt_call($c);
		}
		elsif (($ft->{term}{how} // '') ne 'released')
		{
			push @{ $v{durable} }, 'an acknowledged release is not what ended the term: '
			  . fmt_call($c) . ' / ' . fmt_term($ft->{term});
		}
	}
	for my $c (grep { $_->{kind} eq 'handoff' && !$_->{sqlstate} && $_->{result} } @calls)
	{
		next unless kept($h, $c->{port}, $c->{returned_at});
		my $ft = $fterm{ $c->{name} }{ $c->{generation} };
		if (!$ft || !$fterm{ $c->{name} }{ $c->{result}{generation} })
		{
			push @{ $v{durable} }, 'an acknowledged handoff is missing from the surviving history: ' . fmt_call($c);
		}
		elsif (($ft->{term}{how} // '') ne 'handed off')
		{
			push @{ $v{durable} }, 'an acknowledged handoff is not what ended the term: '
			  . fmt_call($c) . ' / ' . fmt_term($ft->{term});
		}
	}

	# --- renew_null ---------------------------------------------------------------
	# Judged in server time: the renewal's clock reading against the
	# term's recorded end, when the server's clock did not change since
	# the call that set that end (the client's previous grant or renewal
	# of the term).
	my $same_clock = sub {
		my ($x, $y) = @_;
		my ($lo, $hi) = (min($x->{called_at}, $y->{called_at}), max($x->{returned_at}, $y->{returned_at}));
		return !grep { $_->[0] < $hi && $_->[1] > $lo } @{ $h->{clock_changes} // [] };
	};
	my %by_client;
	push @{ $by_client{ $_->{client} } }, $_ for sort { $a->{called_at} <=> $b->{called_at} } @calls;
	my %prev_ext;    # renewal => the client's call before it that extended its term
	for my $list (values %by_client)
	{
		my %last;
		for my $c (@$list)
		{
			if ($c->{kind} eq 'renew')
			{
				$prev_ext{$c} = $last{"$c->{name}\0$c->{generation}"};
				$last{"$c->{name}\0$c->{generation}"} = $c;
			}
			elsif ($c->{kind} =~ /^(acquire|wait)$/ && $c->{result})
			{
				$last{"$c->{name}\0$c->{result}{generation}"} = $c;
			}
		}
	}
	# (a step-down request of the name in flight is a change of the lease
	# in flight: a renewal meanwhile is contended, NULL -- of a lease with
	# slots, it changes every slot's term)
	my @step_downs = grep { $_->{kind} eq 'step_down' } @calls;
	for my $c (grep { $_->{kind} eq 'renew' && !$_->{sqlstate} && !$_->{result} } @calls)
	{
		next unless kept($h, $c->{port}, $c->{returned_at}) && defined $c->{server_time};
		next if grep { $_->{name} eq $c->{name} && $_->{called_at} < $c->{returned_at} && $_->{returned_at} > $c->{called_at} } @step_downs;
		my $ft = $fterm{ $c->{name} }{ $c->{generation} } or next;
		my $t = $ft->{term};
		next unless defined $t->{how} && $t->{how} =~ /^(expired|taken over)$/;
		my $p = $prev_ext{$c};
		next unless $p && $same_clock->($p, $c);
		push @{ $v{renew_null} }, sprintf('a renewal returned NULL %d us before its term lapsed: %s / %s',
			$t->{ended_at} - $c->{server_time}, fmt_call($c), fmt_term($t))
		  if $c->{server_time} < $t->{ended_at};
	}

	# --- fenced_term, fenced_order ---------------------------------------------------
	# What a fenced row can be checked against.  Its id comes from one
	# sequence shared by all the fenced tables, drawn inside its
	# transaction after its writer was granted the term; a transaction
	# fenced on g holds back every later term until it ends, so every row
	# of g that commits has drawn its id before any row of a later term
	# did: in id order, a name's generations never go back (fenced_order,
	# independent of any clock).  Its commit timestamp (track_commit_timestamp,
	# read before the commit releases the fence) is at or before the
	# acquired_at of the next term (the clock is read after the term lock
	# is taken).  A row of a lapsed term may still commit -- no new term
	# can have begun -- so the end of its own term is no bound.
	#
	# A row's commit timestamp and the next term's acquired_at are compared
	# only when the server's clock did not change between the transaction
	# and that grant (as the client saw them): across a step back, a
	# later instant may read earlier.
	my %granted;    # "c\0n\0g"
	$granted{"$_->{client}\0$_->{name}\0$_->{result}{generation}"} = 1 for @results;
	my %grant;      # "n\0g" => the call that began the term, as far as a client was told
	for my $c (grep { $_->{kind} =~ /^(acquire|wait)$/ } @results)
	{
		my $key = "$c->{name}\0$c->{result}{generation}";
		$grant{$key} = $c if !$grant{$key} || $c->{called_at} < $grant{$key}{called_at};
	}
	my %tag_call = map { $_->{tag} => $_ } grep { $_->{kind} eq 'fenced' && $_->{ok} } @calls;
	my %rows_by_name;
	for my $r (@{ $final->{rows} })
	{
		my $ft = $fterm{ $r->{name} }{ $r->{generation} };
		# (a lease with slots: its rows of each slot)
		push @{ $rows_by_name{ $ft ? stream_of($ft->{term}) : $r->{name} } }, $r;
		my $row = "row $r->{id} ($r->{table}, $r->{name}, g=$r->{generation}, client c$r->{client}, committed at "
		  . ($r->{committed_at} // '?') . ')';
		push @{ $v{fenced_term} }, "$row was written under a generation its writer was never granted"
		  unless $granted{"$r->{client}\0$r->{name}\0$r->{generation}"};
		if (!$ft)
		{
			push @{ $v{fenced_term} }, "$row: no such term in the history";
			next;
		}
		next unless defined $r->{committed_at} && $ft->{next};
		my $fc = $tag_call{ $r->{tag} } or next;
		my $gc = $grant{"$r->{name}\0$ft->{next}{generation}"} or next;
		next unless $same_clock->($fc, $gc);
		push @{ $v{fenced_term} }, sprintf('%s committed %d us after the next term began: %s / %s / %s', $row,
			$r->{committed_at} - $ft->{next}{acquired_at}, fmt_term($ft->{next}), fmt_call($fc), fmt_call($gc))
		  if $r->{committed_at} > $ft->{next}{acquired_at};
	}
	for my $n (sort keys %rows_by_name)
	{
		my @rows = sort { $a->{id} <=> $b->{id} } @{ $rows_by_name{$n} };
		my $hi;
		for my $r (@rows)
		{
			if ($hi && $r->{generation} < $hi->{generation})
			{
				push @{ $v{fenced_order} }, "row $r->{id} of $n (g=$r->{generation}, client c$r->{client}) came after row $hi->{id} (g=$hi->{generation}, client c$hi->{client})";
			}
			$hi = $r if !$hi || $r->{generation} > $hi->{generation};
		}
	}

	# --- fenced_durable -----------------------------------------------------------
	# (by the transactions' tags: an id drawn by a transaction that never
	# became durable is drawn again after a crash)
	my %tagged;
	push @{ $tagged{ $_->{tag} } }, $_ for @{ $final->{rows} };
	for my $c (grep { $_->{kind} eq 'fenced' } @calls)
	{
		my @rows = @{ $tagged{ $c->{tag} // '' } // [] };
		if ($c->{ok})
		{
			next unless $c->{synchronous_commit} eq 'on' && kept($h, $c->{port}, $c->{returned_at});
			push @{ $v{fenced_durable} }, 'an acknowledged fenced commit lost its rows (' . scalar(@rows)
			  . ' of ' . scalar(@{ $c->{ids} }) . ' left): ' . fmt_call($c)
			  if @rows != @{ $c->{ids} };
		}
		elsif ($c->{sqlstate} && !$c->{unknown_outcome})
		{
			push @{ $v{fenced_durable} }, 'a fenced transaction that failed left rows ('
			  . join(', ', map { $_->{id} } @rows) . '): ' . fmt_call($c)
			  if @rows;
		}
	}

	# --- hold --------------------------------------------------------------------
	# the min_hold of each term, from the calls that were granted it (us)
	my %hold;
	$hold{"$_->{name}\0$_->{result}{generation}"} = $_->{min_hold} * 1000
	  for grep { acked_result($_) && $_->{min_hold} } @calls;
	# (a lease with slots: a slot's term kept by the hold of its slot's last)
	for my $n (sort keys %$fstreams)
	{
		my $list = $fstreams->{$n};
		for my $i (0 .. $#$list - 1)
		{
			my ($t, $u) = @$list[ $i, $i + 1 ];
			my $us = $hold{"$t->{name}\0$t->{generation}"} or next;
			next unless defined $t->{how} && $t->{how} =~ /^(released|session ended)$/;
			my $until = $t->{acquired_at} + $us;
			next if $t->{ended_at} >= $until || $u->{owner} eq $t->{owner};
			# (a hold announced over on a clock a step ahead, the next term
			# begun after the step back, where the beginning is held to the
			# last end: judged when it was granted far from a restart that
			# changed the clock)
			my $gu = $grant{"$u->{name}\0$u->{generation}"};
			next if $gu && !$steady->($gu);
			push @{ $v{hold} }, "$n: term g=$u->{generation} of $u->{owner} began at $u->{acquired_at}, within the hold of g=$t->{generation} of $t->{owner} (until $until)"
			  if $u->{acquired_at} < $until;
		}
	}

	# --- events_stream ------------------------------------------------------------
	my %conn;
	push @{ $conn{"$_->{listener}/$_->{connection}"} }, $_ for grep { $_->{source} eq 'notify' } @{ $h->{notes} };
	for my $k (sort keys %conn)
	{
		my %prev;
		for my $e (@{ $conn{$k} })
		{
			my $p = $prev{ stream_of($e) };
			my $why = bad_step($p, $e);
			if (renewed_after_release($p, $e))
			{
				push @{ $v{renew_all_inflight} }, "$why: " . fmt_note($p) . ' then ' . fmt_note($e);
				next;
			}
			push @{ $v{events_stream} }, "$why: " . fmt_note($p) . ' then ' . fmt_note($e) if $why;
			push @{ $v{events_stream} }, 'event numbers went back: ' . fmt_note($p) . ' then ' . fmt_note($e)
			  if $p && $e->{seq} <= $p->{seq};
			$prev{ stream_of($e) } = $e;
		}
	}

	# --- events_once --------------------------------------------------------------
	my %ann;    # "n\0g\0begin|end" => { seq => event }
	# (a term's beginning and its end; not what happens within it)
	my $edge = qr/^(acquired|released|expired)$/;
	my @strict = grep { $_->{event} =~ $edge && kept_visible($h, $_->{port}, $_->{received_at}) } @{ $h->{notes} };
	push @strict, map { { %$_, source => 'hoplock_events(0)' } } grep { $_->{event} =~ $edge } @{ $final->{events} };
	for my $e (@strict)
	{
		my $kind = $e->{event} eq 'acquired' ? 'begin' : 'end';
		$ann{"$e->{name}\0$e->{generation}\0$kind"}{ $e->{seq} } //= $e;
	}
	for my $key (sort keys %ann)
	{
		my @e = sort { $a->{seq} <=> $b->{seq} } values %{ $ann{$key} };
		next if @e < 2;
		my ($n, $g, $kind) = split /\0/, $key;
		push @{ $v{events_once} }, "term g=$g of $n announced to "
		  . ($kind eq 'begin' ? 'begin' : 'end') . ' ' . scalar(@e) . ' times: ' . join(' / ', map { fmt_note($_) } @e);
	}

	# --- events_history -----------------------------------------------------------
	my %fev;
	push @{ $fev{ stream_of($_) } }, $_ for sort { $a->{seq} <=> $b->{seq} } @{ $final->{events} };
	for my $n (sort keys %fev)
	{
		my $prev;
		for my $e (@{ $fev{$n} })
		{
			my $why = !$prev && $e->{event} ne 'acquired' ? "the first event of $n is $e->{event}" : bad_step($prev, $e);
			if (renewed_after_release($prev, $e))
			{
				push @{ $v{renew_all_inflight} }, "hoplock_events(0): $why: " . fmt_note($prev) . ' then ' . fmt_note($e);
				next;
			}
			push @{ $v{events_history} }, "hoplock_events(0): $why: " . ($prev ? fmt_note($prev) . ' then ' : '') . fmt_note($e) if $why;
			$prev = $e;
		}
	}
	my %fseq = map { $_->{seq} => $_ } @{ $final->{events} };
	for my $e (grep { $_->{event} ne 'renewed' && kept_visible($h, $_->{port}, $_->{received_at}) } @{ $h->{notes} })
	{
		my $f = $fseq{ $e->{seq} };
		push @{ $v{events_history} }, 'an event sent is not in hoplock_events(0): ' . fmt_note($e)
		  . ($f ? ' (that number is ' . fmt_note($f) . ')' : '')
		  unless $f && $f->{event} eq $e->{event} && $f->{name} eq $e->{name} && $f->{generation} == $e->{generation} && $f->{owner} eq $e->{owner};
	}

	# --- final_state --------------------------------------------------------------
	push @{ $v{final_state} }, "lapsed term not announced: $_" for @{ $final->{unannounced} // [] };
	push @{ $v{final_state} }, "amcheck: $_" for @{ $final->{amcheck} // [] };
	# (a lease with slots: a row per slot)
	my %lease = map { stream_of($_) => $_ } @{ $final->{leases} };
	for my $n (sort keys %$fstreams)
	{
		my $t = $fstreams->{$n}[-1];
		my $l = $lease{$n};
		if (!$l)
		{
			push @{ $v{final_state} }, "no lease row for $n, whose last term is " . fmt_term($t);
			next;
		}
		my $want = !defined $t->{ended_at} ? 'h' : $t->{how} =~ /^(expired|taken over)$/ ? 'x' : 'r';
		push @{ $v{final_state} }, "lease row of $n (state $l->{state}, g=$l->{generation}, owner $l->{owner}, acquired $l->{acquired_at}) disagrees with its last term "
		  . fmt_term($t)
		  if $l->{generation} != $t->{generation} || $l->{state} ne $want || $l->{owner} ne $t->{owner} || $l->{acquired_at} != $t->{acquired_at};
	}
	for my $n (sort keys %lease)
	{
		push @{ $v{final_state} }, "lease row of $n (g=$lease{$n}{generation}) has no term in the history"
		  unless $fstreams->{$n};
	}

	# --- no_crash -----------------------------------------------------------------
	push @{ $v{no_crash} }, $_ for @{ $final->{crashes} // [] };

	# --- async_suffix -------------------------------------------------------------
	for my $port (sort keys %{ $h->{old} // {} })
	{
		my $old = by_name($h->{old}{$port}{history});
		for my $n (sort keys %$old)
		{
			my %new = map { $_->{generation} => 1 } @{ $fterms->{$n} // [] };
			my @present = grep { $new{ $_->{generation} } } @{ $old->{$n} };
			my @missing = grep { !$new{ $_->{generation} } } @{ $old->{$n} };
			next unless @present && @missing;
			my $top = max(map { $_->{generation} } @present);
			my @hole = grep { $_->{generation} < $top } @missing;
			push @{ $v{async_suffix} }, "promotion from $port lost terms of $n before later ones it kept (kept up to g=$top): "
			  . join(' / ', map { fmt_term($_) } @hole)
			  if @hole;
		}
	}

	# --- slot_count, slot_owner, slot_generations ---------------------------------

	# Judged on the final history and each replaced primary's; what is
	# wrong in both is reported once.
	my @all_hist = ([ 'final history', $final->{history} ]);
	push @all_hist, [ "history of replaced primary $_", $h->{old}{$_}{history} ] for sort keys %{ $h->{old} // {} };
	my %said_slots;
	my $say = sub {
		my ($id, $what, $msg) = @_;
		push @{ $v{$id} }, "$what: $msg" unless $said_slots{"$id\0$msg"}++;
	};
	for my $hist (@all_hist)
	{
		my ($what, $names) = ($hist->[0], by_name($hist->[1]));
		for my $n (sort keys %$names)
		{
			my $list = $names->{$n};
			my $N = $nslots{$n};
			for my $t (@$list)
			{
				if ($N)
				{
					$say->('slot_count', $what, "a term of $n, which has $N slots, is in no slot 1 to $N: " . fmt_term($t))
					  unless has_slot($t) && $t->{slot} >= 1 && $t->{slot} <= $N;
				}
				elsif (has_slot($t))
				{
					$say->('slot_count', $what, "a term of $n, which has no slots, has one: " . fmt_term($t));
				}
			}
			# an owner's terms of the name, one after the other
			my %own;
			push @{ $own{ $_->{owner} } }, $_ for sort { $a->{acquired_at} <=> $b->{acquired_at} } @$list;
			for my $o (sort keys %own)
			{
				my $l = $own{$o};
				for my $i (1 .. $#$l)
				{
					my ($p, $t) = @$l[ $i - 1, $i ];
					next unless !defined $p->{ended_at} || $p->{ended_at} > $t->{acquired_at};
					my $msg = "owner $o held two terms of $n at once: " . fmt_term($p) . ' / ' . fmt_term($t);
					# (a keeper's term that ended before it began: t/104)
					if ($keeper{$o} && grep { defined $_->{ended_at} && $_->{ended_at} < $_->{acquired_at} } $p, $t)
					{
						$say->('keepalive_clock', $what, $msg);
						next;
					}
					# (the end of one and the beginning of the other read on
					# clocks a step apart: judged when both were granted far
					# from a restart that changed the clock)
					my ($gp, $gt) = map { $grant{"$n\0$_->{generation}"} } $p, $t;
					next if ($gp && !$steady->($gp)) || ($gt && !$steady->($gt));
					$say->('slot_owner', $what, $msg);
				}
			}
			next unless $N;
			# N terms at most: the running terms at each beginning (a term
			# that ended as it began never ran)
			my @edges = map { ([ $_->{acquired_at}, 1, $_ ], defined $_->{ended_at} ? ([ $_->{ended_at}, 0, $_ ]) : ()) }
			  grep { !defined $_->{ended_at} || $_->{ended_at} > $_->{acquired_at} } @$list;
			my %running;
			for my $e (sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @edges)
			{
				my $t = $e->[2];
				if (!$e->[1])
				{
					delete $running{"$t"};
					next;
				}
				$running{"$t"} = $t;
				next unless keys %running > $N;
				# (two terms of one slot at once, with a keeper's term that
				# ended before it began between them: t/104's defect)
				my %in_slot;
				push @{ $in_slot{ stream_of($_) } }, $_->{generation} for values %running;
				my $clock = grep {
					my @g = sort { $a <=> $b } @{ $in_slot{$_} };
					my $s = $_;
					@g > 1 && grep { $keeper{ $_->{owner} } && defined $_->{ended_at} && $_->{ended_at} < $_->{acquired_at}
						  && stream_of($_) eq $s && $_->{generation} > $g[0] && $_->{generation} < $g[-1] } @$list
				} keys %in_slot;
				$say->($clock ? 'keepalive_clock' : 'slot_count', $what, scalar(keys %running) . " terms of $n, which has $N slots, ran at once: "
					  . join(' / ', map { fmt_term($_) } sort { $a->{generation} <=> $b->{generation} } values %running));
			}
			for my $i (1 .. $#$list)
			{
				my ($p, $t) = @$list[ $i - 1, $i ];
				if ($p->{generation} == $t->{generation})
				{
					$say->('slot_generations', $what, "generation $t->{generation} of $n in two terms: " . fmt_term($p) . ' / ' . fmt_term($t));
				}
				elsif ($t->{acquired_at} < $p->{acquired_at})
				{
					# (judged when the smaller was granted before the greater
					# was asked for -- two grants at once in two slots read
					# the clock and mint the generation in either order --
					# and both on a steady clock: a slot's term begins no
					# earlier than the slot's last ended, so after a clock
					# step back a later term of another slot may begin
					# earlier)
					my ($gp, $gt) = map { $grant{"$n\0$_->{generation}"} } $p, $t;
					next unless $gp && $gt && $gp->{returned_at} < $gt->{called_at} && $steady->($gp) && $steady->($gt);
					$say->('slot_generations', $what, "a term of $n began before a smaller generation did: " . fmt_term($p) . ' / ' . fmt_term($t));
				}
			}
		}
	}

	# --- renew_all_ended, renew_all_result ----------------------------------------
	# (server times compared only far from a restart that changed the clock)
	for my $c (grep { $_->{kind} eq 'renew_all' && !$_->{sqlstate} && $_->{rows} } @calls)
	{
		my %exp = map { ($_->{expires_at} => 1) } @{ $c->{rows} };
		push @{ $v{renew_all_result} }, 'one call gave its terms different expiries: ' . fmt_call($c) if keys %exp > 1;
		for my $r (@{ $c->{rows} })
		{
			my $row = "$r->{name}" . (has_slot($r) ? " slot $r->{slot}" : '') . " g=$r->{generation}";
			my $ft = $fterm{ $r->{name} }{ $r->{generation} };
			if (!$ft)
			{
				push @{ $v{renew_all_result} }, "it returned $row, a term missing from the surviving history: " . fmt_call($c)
				  if kept($h, $c->{port}, $c->{returned_at});
				next;
			}
			my $t = $ft->{term};
			push @{ $v{renew_all_result} }, "it returned $row, which is not the owner's term in that slot: " . fmt_term($t) . ' / ' . fmt_call($c)
			  if $t->{owner} ne $c->{owner} || stream_of($t) ne stream_of($r);
			# (a renewal an asynchronous promotion may lose: not judged
			# against the surviving history)
			next unless $steady->($c) && kept($h, $c->{port}, $c->{returned_at});
			if (defined $t->{ended_at} && $t->{ended_at} <= $c->{started_at})
			{
				# (a release or the end of its session that may have been in
				# flight: t/105)
				my $inflight = $t->{how} =~ /^(released|session ended)$/ && $c->{started_at} - $t->{ended_at} < 1_000_000;
				push @{ $v{ $inflight ? 'renew_all_inflight' : 'renew_all_ended' } },
				  "it renewed $row, which had ended before the call: " . fmt_term($t) . ' / ' . fmt_call($c);
			}
			my $u = $ft->{next};
			push @{ $v{renew_all_ended} }, "it renewed $row after the next term of its slot began: " . fmt_term($t) . ' / ' . fmt_term($u) . ' / ' . fmt_call($c)
			  if $u && $u->{acquired_at} <= $c->{started_at};
		}
	}
	# Each client's calls in order: the expiry it was last given of each
	# term, and the terms on its keepalive (returned by its last renew_all,
	# or begun attached to it: their expiry is the keepalive's).
	my %client_calls;
	push @{ $client_calls{ $_->{client} } }, $_ for sort { $a->{called_at} <=> $b->{called_at} } @calls;
	for my $cl (sort keys %client_calls)
	{
		my (%exp, %attached, $ka, $owner);
		for my $c (@{ $client_calls{$cl} })
		{
			next unless $c->{kind} =~ /^(acquire|wait|release|renew_all)$/;
			if (!defined $owner || $c->{owner} ne $owner || $c->{unknown_outcome})
			{
				# a new owner, or a call that may have changed what is known
				%exp      = ();
				%attached = ();
				$ka       = undef;
				$owner    = $c->{owner};
				next if $c->{unknown_outcome};
			}
			if ($c->{kind} eq 'release')
			{
				delete $attached{"$c->{name}\0$c->{generation}"};
				next;
			}
			if ($c->{kind} ne 'renew_all')
			{
				next if $c->{sqlstate} || !$c->{result};
				my $key = "$c->{name}\0$c->{result}{generation}";
				if (defined $exp{$key})    { delete $attached{$key} }    # taken again: off the keepalive
				elsif (defined $ka && $c->{result}{expires_at} == $ka) { $attached{$key} = 1 }
				$exp{$key} = $c->{result}{expires_at};
				next;
			}
			next if $c->{sqlstate} || !$c->{rows};
			my %got = map { ("$_->{name}\0$_->{generation}" => $_) } @{ $c->{rows} };
			if ($steady->($c))
			{
				for my $key (sort keys %got)
				{
					push @{ $v{renew_all_ended} }, "it renewed a term whose expiry ($exp{$key}) its owner had been given had passed: $got{$key}{name} g=$got{$key}{generation}: "
					  . fmt_call($c)
					  if defined $exp{$key} && $c->{started_at} > $exp{$key};
				}
				my $judged = defined $ka && $c->{started_at} < $ka && kept($h, $c->{port}, $c->{returned_at});
				for my $key ($judged ? sort keys %attached : ())
				{
					next if $got{$key};
					my ($n, $g) = split /\0/, $key;
					my $ft = $fterm{$n}{$g} or next;
					push @{ $v{renew_all_result} }, "it left out a running term on its keepalive (which ran until $ka): " . fmt_term($ft->{term}) . ' / ' . fmt_call($c)
					  if !defined $ft->{term}{ended_at} || $ft->{term}{ended_at} > $c->{server_time};
				}
			}
			%attached = map { ($_ => 1) } keys %got;
			$exp{$_} = $got{$_}{expires_at} for keys %got;
			$ka = @{ $c->{rows} } ? $c->{rows}[0]{expires_at} : undef;
		}
	}

	return \%v;
}

# ---------------------------------------------------------------------------
# Counts, for the report

sub counts
{
	my ($h) = @_;
	my %n;
	my @calls = @{ $h->{calls} };
	$n{calls} = scalar @calls;
	$n{"calls_$_->{kind}"}++ for @calls;
	$n{errors}++ for grep { $_->{sqlstate} } @calls;
	$n{"sqlstate_$_->{sqlstate}"}++ for grep { $_->{sqlstate} } @calls;
	$n{unknown_outcome} = grep { $_->{unknown_outcome} } @calls;
	$n{granted} = grep { $_->{kind} =~ /^(acquire|wait)$/ && acked_result($_) } @calls;
	$n{contended} = grep { $_->{kind} =~ /^(acquire|wait)$/ && !$_->{sqlstate} && !$_->{result} } @calls;
	$n{renewed} = grep { $_->{kind} eq 'renew' && acked_result($_) } @calls;
	$n{renew_null} = grep { $_->{kind} eq 'renew' && !$_->{sqlstate} && !$_->{result} } @calls;
	$n{renew_late} = grep { $_->{kind} eq 'renew' && $_->{late} } @calls;
	$n{hung} = grep { $_->{kind} eq 'fenced' && $_->{hung} } @calls;
	$n{hung_ended} = grep { $_->{kind} eq 'fenced' && $_->{hung} && ($_->{message} // '') =~ /administrator command/ } @calls;
	$n{released} = grep { $_->{kind} eq 'release' && !$_->{sqlstate} && $_->{ok} } @calls;
	$n{handed_off} = grep { $_->{kind} eq 'handoff' && !$_->{sqlstate} && $_->{result} } @calls;
	$n{handoff_null} = grep { $_->{kind} eq 'handoff' && !$_->{sqlstate} && !$_->{result} } @calls;
	$n{min_hold} = grep { $_->{kind} =~ /^(acquire|wait)$/ && acked_result($_) && $_->{min_hold} } @calls;
	$n{session_bound} = grep { $_->{kind} =~ /^(acquire|wait)$/ && acked_result($_) && $_->{session_bound} } @calls;
	my @f = grep { $_->{kind} eq 'fenced' } @calls;
	$n{fenced_txns} = @f;
	$n{fenced_committed} = grep { $_->{ok} } @f;
	$n{fenced_refused} = grep { ($_->{sqlstate} // '') eq '55P03' } @f;
	$n{"fenced_$_->{isolation}"}++ for grep { $_->{ok} } @f;
	$n{fenced_rows} = scalar @{ $h->{final}{rows} };
	my %tags = map { $_->{tag} => 1 } @{ $h->{final}{rows} };
	$n{fenced_rows_lost_async_commit} = grep { $_->{ok} && $_->{synchronous_commit} eq 'off' && !$tags{ $_->{tag} } } @f;
	$n{terms} = scalar @{ $h->{final}{history} };
	$n{"ended_$_->{how}"}++ for grep { defined $_->{how} } @{ $h->{final}{history} };
	$n{events_notified} = grep { $_->{source} eq 'notify' } @{ $h->{notes} };
	$n{"notified_$_->{event}"}++ for grep { $_->{source} eq 'notify' } @{ $h->{notes} };
	$n{events_final} = scalar @{ $h->{final}{events} };
	my %fterm = map { ("$_->{name}\0$_->{generation}" => 1) } @{ $h->{final}{history} };
	my %lost;
	$lost{"$_->{name}\0$_->{result}{generation}"} = 1 for grep { acked_result($_) && !$fterm{"$_->{name}\0$_->{result}{generation}"} } @calls;
	$n{grants_lost_in_async_promotion} = scalar keys %lost;
	my @ra = grep { $_->{kind} eq 'renew_all' } @calls;
	$n{renew_all_ok} = grep { !$_->{sqlstate} } @ra;
	$n{renew_all_terms} = sum0(map { scalar @{ $_->{rows} // [] } } @ra);
	$n{renew_all_multi} = grep { @{ $_->{rows} // [] } > 1 } @ra;
	$n{renew_all_late} = grep { $_->{late} } @ra;
	# late calls that found some of the terms they held lapsed
	$n{renew_all_lapsed} = grep { $_->{late} && !$_->{sqlstate} && @{ $_->{rows} // [] } < @{ $_->{held} // [] } } @ra;
	my %slotted = %{ $h->{slots} // {} };
	$n{slot_terms} = grep { $slotted{ $_->{name} } } @{ $h->{final}{history} };
	$n{slot_rows} = grep { $slotted{ $_->{name} } } @{ $h->{final}{rows} };
	$n{slot_max} = 0;
	for my $name (keys %slotted)
	{
		my @edges = map { ([ $_->{acquired_at}, 1 ], defined $_->{ended_at} ? ([ $_->{ended_at}, -1 ]) : ()) }
		  grep { $_->{name} eq $name } @{ $h->{final}{history} };
		my $run = 0;
		for my $e (sort { $a->[0] <=> $b->[0] || $a->[1] <=> $b->[1] } @edges)
		{
			$run += $e->[1];
			$n{slot_max} = $run if $run > $n{slot_max};
		}
	}
	$n{$_} //= 0 for qw(contended fenced_refused calls_renew_all);
	return \%n;
}

# ---------------------------------------------------------------------------
# The checker's own test: a small history that passes every check, and for
# each check a change to it that the check must report.

sub sample
{
	my $s = 1_800_000_000_000_000;    # server time, us
	my %c = (synchronous_commit => 'on', port => 1);
	my @calls = (
		{ %c, client => 1, kind => 'acquire', name => 'a', owner => 'o1', called_at => 1.0, returned_at => 1.1, result => { generation => 1, owner => 'o1', acquired_at => $s, expires_at => $s + 300_000 }, server_time => $s },
		{ %c, client => 1, kind => 'fenced', name => 'a', generation => 1, called_at => 1.2, returned_at => 1.3, ok => 1, ids => [1], tag => 'c1.1' },
		{ %c, client => 1, kind => 'renew', name => 'a', owner => 'o1', generation => 1, called_at => 1.3, returned_at => 1.35, result => { generation => 1, owner => 'o1', acquired_at => $s, expires_at => $s + 600_000 }, server_time => $s + 300_000 },
		{ %c, client => 2, kind => 'acquire', name => 'a', owner => 'o2', called_at => 1.4, returned_at => 1.45, result => undef, server_time => $s + 400_000 },
		{ %c, client => 1, kind => 'renew', name => 'a', owner => 'o1', generation => 1, called_at => 2.0, returned_at => 2.05, result => undef, server_time => $s + 1_000_000 },
		{ %c, client => 2, kind => 'wait', name => 'a', owner => 'o2', min_hold => 300, called_at => 1.5, returned_at => 1.65, result => { generation => 2, owner => 'o2', acquired_at => $s + 600_000, expires_at => $s + 900_000 }, server_time => $s + 600_000 },
		{ %c, client => 2, kind => 'fenced', name => 'a', generation => 2, called_at => 1.7, returned_at => 1.75, ok => 1, ids => [2], tag => 'c2.1' },
		{ %c, client => 1, kind => 'fenced', name => 'a', generation => 1, called_at => 2.1, returned_at => 2.15, sqlstate => '55P03', ids => [], tag => 'c1.2' },
		{ %c, client => 2, kind => 'release', name => 'a', owner => 'o2', generation => 2, called_at => 1.8, returned_at => 1.85, ok => 1, server_time => $s + 800_000 },
		# q has three slots: o1 and o2 take one each, then the keeper k
		# (client 3) the one o1 left, and b; it renews both with
		# hoplock_renew_all, twice, releases them, and is late once more
		{ %c, client => 1, kind => 'acquire', name => 'q', owner => 'o1', slots => 3, called_at => 2.30, returned_at => 2.31, result => { generation => 3, owner => 'o1', acquired_at => $s + 1_000_000, expires_at => $s + 1_300_000 }, server_time => $s + 1_000_000 },
		{ %c, client => 2, kind => 'acquire', name => 'q', owner => 'o2', slots => 3, called_at => 2.32, returned_at => 2.33, result => { generation => 4, owner => 'o2', acquired_at => $s + 1_100_000, expires_at => $s + 1_400_000 }, server_time => $s + 1_100_000 },
		{ %c, client => 1, kind => 'fenced', name => 'q', generation => 3, called_at => 2.34, returned_at => 2.35, ok => 1, ids => [3], tag => 'c1.3' },
		{ %c, client => 1, kind => 'release', name => 'q', owner => 'o1', generation => 3, called_at => 2.36, returned_at => 2.37, ok => 1, server_time => $s + 1_200_000 },
		{ %c, client => 3, kind => 'acquire', name => 'q', owner => 'k', slots => 3, keeper => 1, called_at => 2.40, returned_at => 2.41, result => { generation => 5, owner => 'k', acquired_at => $s + 1_250_000, expires_at => $s + 1_350_000 }, server_time => $s + 1_250_000 },
		{ %c, client => 3, kind => 'acquire', name => 'b', owner => 'k', slots => 1, keeper => 1, called_at => 2.42, returned_at => 2.43, result => { generation => 1, owner => 'k', acquired_at => $s + 1_260_000, expires_at => $s + 1_360_000 }, server_time => $s + 1_260_000 },
		{ %c, client => 3, kind => 'renew_all', owner => 'k', ttl => 100, held => [ 'b/1', 'q/5' ], called_at => 2.50, returned_at => 2.51, started_at => $s + 1_300_000, server_time => $s + 1_300_100,
		  rows => [ { name => 'q', slot => 1, generation => 5, expires_at => $s + 1_400_000 }, { name => 'b', slot => undef, generation => 1, expires_at => $s + 1_400_000 } ] },
		{ %c, client => 3, kind => 'fenced', name => 'q', generation => 5, called_at => 2.52, returned_at => 2.53, ok => 1, ids => [5], tag => 'c3.1' },
		{ %c, client => 2, kind => 'fenced', name => 'q', generation => 4, called_at => 2.54, returned_at => 2.55, ok => 1, ids => [6], tag => 'c2.2' },
		{ %c, client => 3, kind => 'renew_all', owner => 'k', ttl => 100, held => [ 'b/1', 'q/5' ], called_at => 2.60, returned_at => 2.61, started_at => $s + 1_350_000, server_time => $s + 1_350_100,
		  rows => [ { name => 'q', slot => 1, generation => 5, expires_at => $s + 1_450_000 }, { name => 'b', slot => undef, generation => 1, expires_at => $s + 1_450_000 } ] },
		{ %c, client => 2, kind => 'release', name => 'q', owner => 'o2', generation => 4, called_at => 2.62, returned_at => 2.63, ok => 1, server_time => $s + 1_400_000 },
		{ %c, client => 3, kind => 'release', name => 'q', owner => 'k', generation => 5, called_at => 2.70, returned_at => 2.71, ok => 1, server_time => $s + 1_430_000 },
		{ %c, client => 3, kind => 'release', name => 'b', owner => 'k', generation => 1, called_at => 2.72, returned_at => 2.73, ok => 1, server_time => $s + 1_440_000 },
		{ %c, client => 3, kind => 'renew_all', owner => 'k', ttl => 100, held => [], late => 1, called_at => 2.90, returned_at => 2.91, started_at => $s + 1_600_000, server_time => $s + 1_600_100, rows => [] },
	);
	my @history = (
		{ name => 'a', generation => 1, owner => 'o1', acquired_at => $s, ended_at => $s + 600_000, how => 'taken over' },
		{ name => 'a', generation => 2, owner => 'o2', acquired_at => $s + 600_000, ended_at => $s + 800_000, how => 'released' },
		{ name => 'q', slot => 1, generation => 3, owner => 'o1', acquired_at => $s + 1_000_000, ended_at => $s + 1_200_000, how => 'released' },
		{ name => 'q', slot => 2, generation => 4, owner => 'o2', acquired_at => $s + 1_100_000, ended_at => $s + 1_400_000, how => 'released' },
		{ name => 'q', slot => 1, generation => 5, owner => 'k', acquired_at => $s + 1_250_000, ended_at => $s + 1_430_000, how => 'released' },
		{ name => 'b', generation => 1, owner => 'k', acquired_at => $s + 1_260_000, ended_at => $s + 1_440_000, how => 'released' },
	);
	my @events = (
		{ seq => 1, event => 'acquired', name => 'a', owner => 'o1', generation => 1 },
		{ seq => 2, event => 'expired', name => 'a', owner => 'o1', generation => 1 },
		{ seq => 3, event => 'acquired', name => 'a', owner => 'o2', generation => 2 },
		{ seq => 4, event => 'released', name => 'a', owner => 'o2', generation => 2 },
		# a lease with two slots: two terms at once, one stream per slot
		{ seq => 5, event => 'acquired', name => 'q', slot => 1, owner => 'o1', generation => 3 },
		{ seq => 6, event => 'acquired', name => 'q', slot => 2, owner => 'o2', generation => 4 },
		{ seq => 7, event => 'released', name => 'q', slot => 1, owner => 'o1', generation => 3 },
		{ seq => 8, event => 'acquired', name => 'q', slot => 1, owner => 'k', generation => 5 },
		{ seq => 9, event => 'acquired', name => 'b', owner => 'k', generation => 1 },
		{ seq => 10, event => 'released', name => 'q', slot => 2, owner => 'o2', generation => 4 },
		{ seq => 11, event => 'released', name => 'q', slot => 1, owner => 'k', generation => 5 },
		{ seq => 12, event => 'released', name => 'b', owner => 'k', generation => 1 },
	);
	my @notes = map { { %$_, source => 'notify', listener => 1, connection => 1, port => 1, received_at => 1 + $_->{seq} / 10 } } @events;
	return {
		calls => \@calls,
		notes => \@notes,
		nodes => { 1 => { name => 'n1', fate => 'final' } },
		final => {
			history => \@history,
			events => [ map { {%$_} } @events ],
			leases => [
				{ name => 'a', state => 'r', owner => 'o2', generation => 2, acquired_at => $s + 600_000, expires_at => $s + 800_000 },
				{ name => 'q', slot => 1, state => 'r', owner => 'k', generation => 5, acquired_at => $s + 1_250_000, expires_at => $s + 1_450_000 },
				{ name => 'q', slot => 2, state => 'r', owner => 'o2', generation => 4, acquired_at => $s + 1_100_000, expires_at => $s + 1_400_000 },
				{ name => 'b', state => 'r', owner => 'k', generation => 1, acquired_at => $s + 1_260_000, expires_at => $s + 1_450_000 },
			],
			# (in id order q's rows go from g=5 back to g=4: two slots)
			rows => [
				{ id => 1, table => 'f', name => 'a', generation => 1, client => 1, tag => 'c1.1', committed_at => $s + 200_000 },
				{ id => 2, table => 't', name => 'a', generation => 2, client => 2, tag => 'c2.1', committed_at => $s + 700_000 },
				{ id => 3, table => 'f', name => 'q', generation => 3, client => 1, tag => 'c1.3', committed_at => $s + 1_150_000 },
				{ id => 5, table => 't', name => 'q', generation => 5, client => 3, tag => 'c3.1', committed_at => $s + 1_320_000 },
				{ id => 6, table => 'f', name => 'q', generation => 4, client => 2, tag => 'c2.2', committed_at => $s + 1_380_000 },
			],
			unannounced => [], amcheck => [], crashes => [],
		},
		old => { 9 => { history => [ map { {%$_} } @history ] } },
		clock_changes => [],
		slots => { q => 3 },
	};
}

# [ check, what is changed, sub changing a sample ]
our @MUTATIONS = (
	[ overlap => 'the second term begins before the first ended', sub { $_[0]{final}{history}[1]{acquired_at} -= 200_000 } ],
	[ reuse => 'a generation handed to another owner', sub {
		push @{ $_[0]{calls} }, { %{ $_[0]{calls}[0] }, client => 3, owner => 'o3', called_at => 3, returned_at => 3.1, result => { %{ $_[0]{calls}[0]{result} }, owner => 'o3' } } } ],
	[ order => 'a new term below one acknowledged earlier', sub {
		push @{ $_[0]{calls} }, { %{ $_[0]{calls}[0] }, client => 3, owner => 'o3', port => 2, called_at => 3, returned_at => 3.1, result => { generation => 0.5, owner => 'o3', acquired_at => 1, expires_at => 2 } } } ],
	[ durable => 'an acknowledged grant missing after a crash', sub { pop @{ $_[0]{final}{history} } } ],
	[ durable => 'an acknowledged handoff that is not what ended the term', sub {
		push @{ $_[0]{calls} }, { %{ $_[0]{calls}[0] }, kind => 'handoff', generation => 1, called_at => 1.9, returned_at => 1.95,
			result => { %{ $_[0]{calls}[5]{result} } } } } ],
	[ reuse => 'a handoff whose result disagrees with the candidate\'s grant', sub {
		push @{ $_[0]{calls} }, { %{ $_[0]{calls}[0] }, kind => 'handoff', generation => 1, called_at => 1.9, returned_at => 1.95,
			result => { %{ $_[0]{calls}[5]{result} }, owner => 'o9' } } } ],
	[ renew_null => 'a renewal NULL before the term lapsed', sub { $_[0]{calls}[4]{server_time} = $_[0]{final}{history}[0]{ended_at} - 1 } ],
	[ fenced_term => 'a row committed after the next term began', sub { $_[0]{final}{rows}[0]{committed_at} = $_[0]{final}{history}[1]{acquired_at} + 1 } ],
	[ fenced_order => 'rows out of generation order', sub { $_[0]{final}{rows}[0]{id} = 3 } ],
	[ fenced_durable => 'a refused transaction left its row', sub {
		push @{ $_[0]{final}{rows} }, { id => 5, table => 'f', name => 'a', generation => 1, client => 1, tag => 'c1.2', committed_at => $_[0]{final}{rows}[0]{committed_at} } } ],
	[ events_stream => 'an acquired without the end of the term before', sub { splice(@{ $_[0]{notes} }, 1, 1) } ],
	[ events_stream => 'a slot\'s acquired without the end of its term before', sub { splice(@{ $_[0]{notes} }, 6, 1) } ],
	[ events_history => 'a slot\'s term that ends twice in hoplock_events(0)', sub {
		push @{ $_[0]{final}{events} }, { %{ $_[0]{final}{events}[10] }, seq => 99 } } ],
	[ events_once => 'an expiry announced again after a crash', sub {
		push @{ $_[0]{notes} }, { %{ $_[0]{notes}[1] }, seq => 9, connection => 2, received_at => 5 } } ],
	[ events_history => 'an event sent that hoplock_events(0) does not have', sub { splice(@{ $_[0]{final}{events} }, 3, 1) } ],
	[ final_state => 'the lease row disagrees with the history', sub { $_[0]{final}{leases}[0]{state} = 'x' } ],
	[ no_crash => 'a server process crashed', sub { push @{ $_[0]{final}{crashes} }, 'LOG: server process (PID 1) was terminated by signal 11' } ],
	[ hold => 'another owner\'s term began within the hold of a term released early', sub {
		my $hist = $_[0]{final}{history};
		push @$hist, { %{ $hist->[1] }, generation => 3, owner => 'o1', acquired_at => $hist->[1]{ended_at} + 50_000, ended_at => undef, how => undef } } ],
	[ async_suffix => 'a promotion lost a term in the middle', sub {
		my $old = $_[0]{old}{9}{history};
		push @$old, { %{ $old->[1] }, generation => 3, acquired_at => $old->[1]{ended_at}, ended_at => $old->[1]{ended_at} + 1 };
		$old->[0]{generation} = 0.5 } ],
	# slots
	[ overlap => 'two terms of one slot overlap', sub { term($_[0], 'q', 5)->{acquired_at} = term($_[0], 'q', 3)->{ended_at} - 1 } ],
	[ slot_count => 'more terms at once than the lease has slots', sub { $_[0]{slots}{q} = 1 } ],
	[ slot_count => 'a term in a slot the lease does not have', sub { term($_[0], 'q', 5)->{slot} = 4 } ],
	[ slot_owner => 'one owner in two slots at once', sub { term($_[0], 'q', 4)->{owner} = 'o1' } ],
	[ slot_generations => 'one generation in two slots', sub { term($_[0], 'q', 5)->{generation} = 4 } ],
	[ slot_generations => 'a greater generation began before a smaller one, in another slot', sub {
		term($_[0], 'q', 4)->{acquired_at} = term($_[0], 'q', 3)->{acquired_at} - 1 } ],
	[ fenced_term => 'a slot\'s row committed after the next term of its slot began', sub {
		my ($r) = grep { $_->{id} == 3 } @{ $_[0]{final}{rows} };
		$r->{committed_at} = term($_[0], 'q', 5)->{acquired_at} + 1 } ],
	[ fenced_order => 'a slot\'s rows out of generation order', sub {
		my ($r) = grep { $_->{id} == 5 } @{ $_[0]{final}{rows} };
		$r->{id} = 2.5 } ],
	# hoplock_renew_all
	[ renew_all_ended => 'it returned a term that had expired before the call', sub {
		@{ term($_[0], 'b', 1) }{qw(how ended_at)} = ('expired', renew_all($_[0], 0)->{started_at} - 1) } ],
	[ renew_all_ended => 'it returned a term after the next term of its slot began', sub {
		push @{ $_[0]{final}{history} }, { %{ term($_[0], 'q', 5) }, generation => 6, owner => 'o9', acquired_at => renew_all($_[0], 0)->{started_at} - 1 } } ],
	[ renew_all_ended => 'it returned a term past the expiry its owner was last given', sub {
		my ($c) = grep { $_->{kind} eq 'acquire' && $_->{name} eq 'b' } @{ $_[0]{calls} };
		$c->{result}{expires_at} = renew_all($_[0], 0)->{started_at} - 1 } ],
	[ renew_all_result => 'it returned a term in another slot', sub { renew_all($_[0], 0)->{rows}[0]{slot} = 2 } ],
	[ renew_all_result => 'it returned another owner\'s term', sub {
		push @{ renew_all($_[0], 0)->{rows} }, { name => 'q', slot => 2, generation => 4, expires_at => renew_all($_[0], 0)->{rows}[0]{expires_at} } } ],
	[ renew_all_result => 'it left out a running term on its keepalive', sub { pop @{ renew_all($_[0], 1)->{rows} } } ],
	[ renew_all_result => 'it gave its terms different expiries', sub { renew_all($_[0], 0)->{rows}[1]{expires_at}++ } ],
	[ renew_all_inflight => 'a keeper\'s term renewed after its release, in hoplock_events(0)', sub {
		my $ev = $_[0]{final}{events};
		my ($rel) = grep { $_->{event} eq 'released' && $_->{name} eq 'b' } @$ev;
		push @$ev, { %$rel, event => 'renewed', seq => $rel->{seq} + 0.5 } } ],
	[ keepalive_clock => 'a term of an owner with a keepalive ends before it began', sub {
		my $t = term($_[0], 'b', 1);
		$t->{ended_at} = $t->{acquired_at} - 1 } ],
	[ durable => 'a term renewed by hoplock_renew_all lapsed before the expiry it gave', sub {
		my $t = term($_[0], 'b', 1);
		@$t{qw(how ended_at)} = ('expired', renew_all($_[0], 1)->{rows}[0]{expires_at} - 1);
		@{ $_[0]{calls} } = grep { !($_->{kind} eq 'release' && $_->{name} eq 'b') } @{ $_[0]{calls} } } ],
);

# In a sample: the term of name and generation in the final history; the
# $i-th hoplock_renew_all call.
sub term
{
	my ($h, $n, $g) = @_;
	my ($t) = grep { $_->{name} eq $n && $_->{generation} == $g } @{ $h->{final}{history} };
	return $t;
}

sub renew_all
{
	my ($h, $i) = @_;
	return (grep { $_->{kind} eq 'renew_all' } @{ $h->{calls} })[$i];
}

# Returns [ check, what, detected (bool), messages ] for each mutation, and
# the violations of the unchanged sample.
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
