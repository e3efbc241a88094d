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
#                 kind (acquire|wait|renew|release|handoff|fenced|vanish),
#                 name, owner, ttl (ms), timeout (ms, wait), session_bound,
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
#                 it failed); vanish: in_transaction } ]
#   notes  => [ { source (notify|catchup), listener, connection, port, seq,
#                 event, name, owner, generation, received_at } ]
#   nodes  => { port => { name, fate (final|sync|async), stop_t,
#                         standby_stop_t } }
#   final  => { history => [ { name, generation, owner, acquired_at, ended_at, how } ],
#               events  => [ { seq, event, name, owner, generation } ],
#               leases  => [ { name, state, owner, generation, acquired_at, expires_at } ],
#               rows    => [ { id, table (fence|trigger), name, generation, client, tag,
#                              committed_at } ],
#               unannounced => [ text ], amcheck => [ text ], crashes => [ text ] }
#   old    => { port => { history => [ ... ] } }   (replaced primaries)
#   clock_changes => [ [ t_from, t_to ] ]   (restarts that changed the clock)
#   faults => [ { kind, port, started_at, ended_at, detail, ... } ]  (not judged)
package Hoplock::Torture::Check;

use strict;
use warnings;
use List::Util qw(max min);

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
	[ overlap => 'the terms of a name never overlap in server time (final history, and each replaced primary\'s)' ],
	[ reuse => 'no generation is granted twice: every result and history row of a generation names the same owner and acquired_at (a handoff\'s result too)' ],
	[ order => 'generations only go up: no result carries a generation below one acknowledged before its call began, a new term is above every earlier one (crashes, promotions, asynchronous ones too)' ],
	[ durable => 'no acknowledged grant, renewal, release or handoff is lost (crashes, synchronous promotion; an asynchronous one only its last moments)' ],
	[ renew_null => 'a renewal returns NULL only once its term has ended' ],
	[ fenced_term => 'every committed fenced row belongs to the term that held the lease at its commit, and to a term its writer was granted' ],
	[ fenced_order => 'a name\'s fenced rows, in id (commit) order, never go back in generation' ],
	[ fenced_durable => 'acknowledged fenced commits survive (synchronous_commit = on); rolled-back ones left no row' ],
	[ events_stream => 'each listener connection saw, per name, acquired(g) (renewed|proclaimed|step_down)(g)* then released(g) [freed(g)] or expired(g), then acquired(g\' > g)' ],
	[ events_once => 'no term is announced as begun or ended twice, across crashes (listeners and hoplock_events(0))' ],
	[ events_history => 'hoplock_events(0) is well formed per name and holds every event the listeners were sent' ],
	[ final_state => 'at the end every lapsed term is announced, the lease table agrees with the history, and amcheck finds nothing' ],
	[ no_crash => 'no server process crashed but the ones killed on purpose (no PANIC, assertion or signal but SIGKILL)' ],
	[ hold => 'a term released (or ended with its session) within its min_hold kept its name from other owners until acquired_at + min_hold (final history)' ],
	[ async_suffix => 'a promotion loses at most the last terms of each name: the replaced primary\'s history, cut at the end' ],
);

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
	my @f = ("client c$c->{client}", "$c->{kind}($c->{name}" . (defined $c->{generation} ? ", g=$c->{generation}" : '') . ')',
		sprintf('t=%.3f..%.3f', $c->{called_at}, $c->{returned_at} // -1), "port $c->{port}",
		"sc=$c->{synchronous_commit}");
	push @f, 'owner ' . ($c->{owner} // '?');
	push @f, "-> g=$c->{result}{generation} acq=$c->{result}{acquired_at} exp=$c->{result}{expires_at}" if $c->{result};
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
	return sprintf('%s g=%s owner %s [%s, %s) %s', $t->{name}, $t->{generation}, $t->{owner}, $t->{acquired_at},
		$t->{ended_at} // 'running', $t->{how} // '');
}

sub fmt_note
{
	my ($e) = @_;
	return sprintf('%s seq=%s %s(%s, g=%s) owner %s via %s%s port %s t=%.3f', $e->{source} // 'final',
		$e->{seq}, $e->{event}, $e->{name}, $e->{generation}, $e->{owner} // '?',
		defined $e->{listener} ? "listener $e->{listener} connection " : '',
		$e->{connection} // '', $e->{port} // '-', $e->{received_at} // 0);
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
	my %fterm;
	for my $n (keys %$fterms)
	{
		my $list = $fterms->{$n};
		for my $i (0 .. $#$list)
		{
			$fterm{$n}{ $list->[$i]{generation} } = { term => $list->[$i], next => $list->[ $i + 1 ] };
		}
	}
	my @calls = @{ $h->{calls} };
	my @results = grep { acked_result($_) } @calls;

	# --- overlap -----------------------------------------------------------
	# (a replaced primary's history shares most terms with the final one:
	# what is wrong in both is reported once)
	my @histories = ([ 'final history', $fterms ]);
	push @histories, [ "history of replaced primary $_", by_name($h->{old}{$_}{history}) ]
	  for sort keys %{ $h->{old} // {} };
	my (%said, @overlap);
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
				push @found, "$what: term ends before it begins: " . fmt_term($t)
				  if defined $t->{ended_at} && $t->{ended_at} < $t->{acquired_at};
				next if $i == 0;
				my $p = $list->[ $i - 1 ];
				if (!defined $p->{ended_at})
				{
					push @found, "$what: a term began while an earlier one never ended: "
					  . fmt_term($p) . ' / ' . fmt_term($t);
				}
				elsif ($t->{acquired_at} < $p->{acquired_at})
				{
					push @found, sprintf('%s: a term began %d us before the previous one began: %s / %s', $what,
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
	my %res_by_name;
	push @{ $res_by_name{ $_->{name} } }, $_ for @results;
	for my $n (sort keys %res_by_name)
	{
		my @r = sort { $a->{returned_at} <=> $b->{returned_at} } @{ $res_by_name{$n} };
		# prefix maxima over results ordered by end: all; kept; per node
		my (@t_all, @m_all, @t_kept, @m_kept, %t_node, %m_node);
		for my $c (@r)
		{
			push @t_all, $c->{returned_at};
			push @m_all, (!@m_all || $c->{result}{generation} > $m_all[-1]{result}{generation}) ? $c : $m_all[-1];
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
		for my $c (@r)
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
		for my $c (values %first)
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
	my %last_ext;    # "n\0g" => last kept acked result
	for my $c (sort { $a->{called_at} <=> $b->{called_at} } @results)
	{
		next unless kept($h, $c->{port}, $c->{returned_at});
		push @{ $v{durable} }, 'an acknowledged grant is missing from the surviving history: ' . fmt_call($c)
		  unless $fterm{ $c->{name} }{ $c->{result}{generation} };
		$last_ext{"$c->{name}\0$c->{result}{generation}"} = $c;
	}
	my %unknown_ext;    # "n\0g" => [ t0 of renewals with unknown outcome ]
	for my $c (@calls)
	{
		push @{ $unknown_ext{"$c->{name}\0$c->{generation}"} }, $c->{called_at}
		  if $c->{kind} eq 'renew' && $c->{unknown_outcome};
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
	for my $c (grep { $_->{kind} eq 'renew' && !$_->{sqlstate} && !$_->{result} } @calls)
	{
		next unless kept($h, $c->{port}, $c->{returned_at}) && defined $c->{server_time};
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
		push @{ $rows_by_name{ $r->{name} } }, $r;
		my $ft = $fterm{ $r->{name} }{ $r->{generation} };
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
	for my $n (sort keys %$fterms)
	{
		my $list = $fterms->{$n};
		for my $i (0 .. $#$list - 1)
		{
			my ($t, $u) = @$list[ $i, $i + 1 ];
			my $us = $hold{"$n\0$t->{generation}"} or next;
			next unless defined $t->{how} && $t->{how} =~ /^(released|session ended)$/;
			my $until = $t->{acquired_at} + $us;
			next if $t->{ended_at} >= $until || $u->{owner} eq $t->{owner};
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
			my $p = $prev{ $e->{name} };
			my $why = bad_step($p, $e);
			push @{ $v{events_stream} }, "$why: " . fmt_note($p) . ' then ' . fmt_note($e) if $why;
			push @{ $v{events_stream} }, 'event numbers went back: ' . fmt_note($p) . ' then ' . fmt_note($e)
			  if $p && $e->{seq} <= $p->{seq};
			$prev{ $e->{name} } = $e;
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
	push @{ $fev{ $_->{name} } }, $_ for sort { $a->{seq} <=> $b->{seq} } @{ $final->{events} };
	for my $n (sort keys %fev)
	{
		my $prev;
		for my $e (@{ $fev{$n} })
		{
			my $why = !$prev && $e->{event} ne 'acquired' ? "the first event of $n is $e->{event}" : bad_step($prev, $e);
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
	my %lease = map { $_->{name} => $_ } @{ $final->{leases} };
	for my $n (sort keys %$fterms)
	{
		my $t = $fterms->{$n}[-1];
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
		  unless $fterms->{$n};
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
	$n{$_} //= 0 for qw(contended fenced_refused);
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
	);
	my @history = (
		{ name => 'a', generation => 1, owner => 'o1', acquired_at => $s, ended_at => $s + 600_000, how => 'taken over' },
		{ name => 'a', generation => 2, owner => 'o2', acquired_at => $s + 600_000, ended_at => $s + 800_000, how => 'released' },
	);
	my @events = (
		{ seq => 1, event => 'acquired', name => 'a', owner => 'o1', generation => 1 },
		{ seq => 2, event => 'expired', name => 'a', owner => 'o1', generation => 1 },
		{ seq => 3, event => 'acquired', name => 'a', owner => 'o2', generation => 2 },
		{ seq => 4, event => 'released', name => 'a', owner => 'o2', generation => 2 },
	);
	my @notes = map { { %$_, source => 'notify', listener => 1, connection => 1, port => 1, received_at => 1 + $_->{seq} / 10 } } @events;
	return {
		calls => \@calls,
		notes => \@notes,
		nodes => { 1 => { name => 'n1', fate => 'final' } },
		final => {
			history => \@history,
			events => [ map { {%$_} } @events ],
			leases => [ { name => 'a', state => 'r', owner => 'o2', generation => 2, acquired_at => $s + 600_000, expires_at => $s + 800_000 } ],
			rows => [
				{ id => 1, table => 'f', name => 'a', generation => 1, client => 1, tag => 'c1.1', committed_at => $s + 200_000 },
				{ id => 2, table => 't', name => 'a', generation => 2, client => 2, tag => 'c2.1', committed_at => $s + 700_000 },
			],
			unannounced => [], amcheck => [], crashes => [],
		},
		old => { 9 => { history => [ map { {%$_} } @history ] } },
		clock_changes => [],
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
);

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
