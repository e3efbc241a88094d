# Hoplock::Torture::Check: the checker of the torture run.  It takes the
# history a run recorded -- every client call, every event a listener
# received, the faults, the fate of each server, and what the surviving
# server holds at the end -- and returns, for each property the README
# promises, the list of its violations (empty when it holds).  It reads
# nothing else, so it can be handed made-up histories (self_test does).
#
# Times: t0 / t1 are the client's CLOCK_MONOTONIC before and after a call
# (all processes run on one machine, so they are comparable across
# processes); acq, exp, st, end, cts are server clock readings in integer
# microseconds since the epoch.
#
# The history, as a hash:
#   calls  => [ { c, port, sc, k (acquire|wait|renew|release|fenced|vanish),
#                 n, o, ttl, sb, g, t0, t1, res => { g, o, acq, exp } | undef,
#                 ok, st, e (SQLSTATE), u (outcome unknown), ids, tag, fm, iso } ]
#   notes  => [ { src (notify|catchup), ln, cn, port, seq, ev, n, o, g, t } ]
#   nodes  => { port => { name, fate (final|sync|async), stop_t,
#                         standby_stop_t } }
#   final  => { history => [ { n, g, o, acq, end, how } ],
#               events  => [ { seq, ev, n, o, g } ],
#               leases  => [ { n, state, o, g, acq, exp } ],
#               rows    => [ { id, tab, n, g, c, tag, cts } ],
#               unannounced => [ text ], amcheck => [ text ], crashes => [ text ] }
#   old    => { port => { history => [ ... ] } }   (replaced primaries)
#   clock_changes => [ [ t_from, t_to ] ]   (restarts that changed the clock)
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
	[ reuse => 'no generation is granted twice: every result and history row of a generation names the same owner and acquired_at' ],
	[ order => 'generations only go up: no result carries a generation below one acknowledged before its call began, a new term is above every earlier one (crashes, promotions, asynchronous ones too)' ],
	[ durable => 'no acknowledged grant, renewal or release is lost (crashes, synchronous promotion; an asynchronous one only its last moments)' ],
	[ renew_null => 'a renewal returns NULL only once its term has ended' ],
	[ fenced_term => 'every committed fenced row belongs to the term that held the lease at its commit, and to a term its writer was granted' ],
	[ fenced_order => 'a name\'s fenced rows, in id (commit) order, never go back in generation' ],
	[ fenced_durable => 'acknowledged fenced commits survive (synchronous_commit = on); rolled-back ones left no row' ],
	[ events_stream => 'each listener connection saw, per name, acquired(g) renewed(g)* then released(g) or expired(g), then acquired(g\' > g)' ],
	[ events_once => 'no term is announced as begun or ended twice, across crashes (listeners and hoplock_events(0))' ],
	[ events_history => 'hoplock_events(0) is well formed per name and holds every event the listeners were sent' ],
	[ final_state => 'at the end every lapsed term is announced, the lease table agrees with the history, and amcheck finds nothing' ],
	[ no_crash => 'no server process crashed but the ones killed on purpose (no PANIC, assertion or signal but SIGKILL)' ],
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

sub acked_result { my ($c) = @_; return $c->{k} =~ /^(acquire|wait|renew)$/ && !$c->{e} && $c->{res}; }

sub fmt_call
{
	my ($c) = @_;
	my @f = ("client c$c->{c}", "$c->{k}($c->{n}" . (defined $c->{g} ? ", g=$c->{g}" : '') . ')',
		sprintf('t=%.3f..%.3f', $c->{t0}, $c->{t1} // -1), "port $c->{port}",
		"sc=$c->{sc}");
	push @f, 'owner ' . ($c->{o} // '?');
	push @f, "-> g=$c->{res}{g} acq=$c->{res}{acq} exp=$c->{res}{exp}" if $c->{res};
	push @f, '-> NULL' if $c->{k} =~ /^(acquire|wait|renew)$/ && !$c->{res} && !$c->{e};
	push @f, "ok=$c->{ok}" if defined $c->{ok};
	push @f, "st=$c->{st}" if defined $c->{st};
	push @f, "error $c->{e}" . ($c->{u} ? ' (outcome unknown)' : '') . ($c->{em} ? " \"$c->{em}\"" : '') if $c->{e};
	push @f, "tag $c->{tag}" if $c->{tag};
	push @f, "ids=@{$c->{ids}}" if $c->{ids} && @{ $c->{ids} };
	return join(' ', @f);
}

sub fmt_term
{
	my ($t) = @_;
	return sprintf('%s g=%s owner %s [%s, %s) %s', $t->{n}, $t->{g}, $t->{o}, $t->{acq},
		$t->{end} // 'running', $t->{how} // '');
}

sub fmt_note
{
	my ($e) = @_;
	return sprintf('%s seq=%s %s(%s, g=%s) owner %s via %s%s port %s t=%.3f', $e->{src} // 'final',
		$e->{seq}, $e->{ev}, $e->{n}, $e->{g}, $e->{o} // '?',
		defined $e->{ln} ? "listener $e->{ln} connection " : '',
		$e->{cn} // '', $e->{port} // '-', $e->{t} // 0);
}

# terms of each name, by generation: { name => [ terms ] }
sub by_name
{
	my ($terms) = @_;
	my %t;
	push @{ $t{ $_->{n} } }, $_ for @$terms;
	@$_ = sort { $a->{g} <=> $b->{g} } @$_ for values %t;
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
	if ($prev->{ev} eq 'acquired' || $prev->{ev} eq 'renewed')
	{
		return undef if $e->{ev} =~ /^(renewed|released|expired)$/ && $e->{g} == $prev->{g};
		return "after $prev->{ev}(g=$prev->{g}) came $e->{ev}(g=$e->{g})";
	}
	return undef if $e->{ev} eq 'acquired' && $e->{g} > $prev->{g};
	return "after $prev->{ev}(g=$prev->{g}) came $e->{ev}(g=$e->{g})";
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
			$fterm{$n}{ $list->[$i]{g} } = { term => $list->[$i], next => $list->[ $i + 1 ] };
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
				  if defined $t->{end} && $t->{end} < $t->{acq};
				next if $i == 0;
				my $p = $list->[ $i - 1 ];
				if (!defined $p->{end})
				{
					push @found, "$what: a term began while an earlier one never ended: "
					  . fmt_term($p) . ' / ' . fmt_term($t);
				}
				elsif ($t->{acq} < $p->{acq})
				{
					push @found, sprintf('%s: a term began %d us before the previous one began: %s / %s', $what,
						$p->{acq} - $t->{acq}, fmt_term($p), fmt_term($t));
				}
				elsif ($t->{acq} < $p->{end})
				{
					push @found, sprintf('%s: terms overlap by %d us: %s / %s', $what,
						$p->{end} - $t->{acq}, fmt_term($p), fmt_term($t));
				}
			}
		}
		push @overlap, grep { (my $m = $_) =~ s/^[^:]*: //; !$said{$m}++ } @found;
	}
	$v{overlap} = \@overlap;

	# --- reuse ------------------------------------------------------------------
	my %seen;
	for my $c (sort { $a->{t0} <=> $b->{t0} } @results)
	{
		my $key = "$c->{n}\0$c->{res}{g}";
		my $first = $seen{$key} //= $c;
		if ($first->{res}{o} ne $c->{res}{o} || $first->{res}{acq} != $c->{res}{acq})
		{
			push @{ $v{reuse} }, "generation $c->{res}{g} of $c->{n} granted twice: "
			  . fmt_call($first) . ' / ' . fmt_call($c);
		}
	}
	for my $hist (@histories)
	{
		my ($what, $terms) = @$hist;
		for my $t (map { @$_ } values %$terms)
		{
			my $c = $seen{"$t->{n}\0$t->{g}"} or next;
			push @{ $v{reuse} }, "$what disagrees with what a client was given: "
			  . fmt_term($t) . ' / ' . fmt_call($c)
			  if $c->{res}{o} ne $t->{o} || $c->{res}{acq} != $t->{acq};
		}
	}

	# --- order ------------------------------------------------------------------
	my %res_by_name;
	push @{ $res_by_name{ $_->{n} } }, $_ for @results;
	for my $n (sort keys %res_by_name)
	{
		my @r = sort { $a->{t1} <=> $b->{t1} } @{ $res_by_name{$n} };
		# prefix maxima over results ordered by end: all; kept; per node
		my (@t_all, @m_all, @t_kept, @m_kept, %t_node, %m_node);
		for my $c (@r)
		{
			push @t_all, $c->{t1};
			push @m_all, (!@m_all || $c->{res}{g} > $m_all[-1]{res}{g}) ? $c : $m_all[-1];
			if (kept($h, $c->{port}, $c->{t1}))
			{
				push @t_kept, $c->{t1};
				push @m_kept, (!@m_kept || $c->{res}{g} > $m_kept[-1]{res}{g}) ? $c : $m_kept[-1];
			}
			my ($tn, $mn) = ($t_node{ $c->{port} } //= [], $m_node{ $c->{port} } //= []);
			push @$tn, $c->{t1};
			push @$mn, (!@$mn || $c->{res}{g} > $mn->[-1]{res}{g}) ? $c : $mn->[-1];
		}
		my %first;
		for my $c (@r)
		{
			my $f = $first{ $c->{res}{g} };
			$first{ $c->{res}{g} } = $c if !$f || $c->{t0} < $f->{t0};
		}
		for my $c (@r)
		{
			my @before;
			my $i = below(\@t_kept, $c->{t0});
			push @before, $m_kept[$i] if $i >= 0;
			$i = below($t_node{ $c->{port} }, $c->{t0});
			push @before, $m_node{ $c->{port} }[$i] if $i >= 0;
			for my $a (@before)
			{
				if ($c->{res}{g} < $a->{res}{g})
				{
					push @{ $v{order} }, "a result went back in generation after "
					  . fmt_call($a) . ': ' . fmt_call($c);
					last;
				}
			}
		}
		for my $c (values %first)
		{
			my $i = below(\@t_all, $c->{t0});
			next if $i < 0;
			my $a = $m_all[$i];
			push @{ $v{order} }, 'a new term is not above a generation acknowledged before it was asked for: '
			  . fmt_call($a) . ' then ' . fmt_call($c)
			  if $c->{res}{g} <= $a->{res}{g};
		}
	}

	# --- durable ------------------------------------------------------------------
	my %last_ext;    # "n\0g" => last kept acked result
	for my $c (sort { $a->{t0} <=> $b->{t0} } @results)
	{
		next unless kept($h, $c->{port}, $c->{t1});
		push @{ $v{durable} }, 'an acknowledged grant is missing from the surviving history: ' . fmt_call($c)
		  unless $fterm{ $c->{n} }{ $c->{res}{g} };
		$last_ext{"$c->{n}\0$c->{res}{g}"} = $c;
	}
	my %unknown_ext;    # "n\0g" => [ t0 of renewals with unknown outcome ]
	for my $c (@calls)
	{
		push @{ $unknown_ext{"$c->{n}\0$c->{g}"} }, $c->{t0}
		  if $c->{k} eq 'renew' && $c->{u};
	}
	for my $key (sort keys %last_ext)
	{
		my $c = $last_ext{$key};
		my $ft = $fterm{ $c->{n} }{ $c->{res}{g} } or next;
		my $t = $ft->{term};
		next unless defined $t->{how} && $t->{how} =~ /^(expired|taken over)$/;
		next if grep { $_ > $c->{t0} } @{ $unknown_ext{$key} // [] };
		push @{ $v{durable} }, sprintf('an acknowledged renewal is lost: the term lapsed %d us before the expiry a client was given: %s / %s',
			$c->{res}{exp} - $t->{end}, fmt_term($t), fmt_call($c))
		  if $t->{end} < $c->{res}{exp};
	}
	for my $c (grep { $_->{k} eq 'release' && !$_->{e} && $_->{ok} } @calls)
	{
		next unless kept($h, $c->{port}, $c->{t1});
		my $ft = $fterm{ $c->{n} }{ $c->{g} };
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

	# --- renew_null ---------------------------------------------------------------
	# Judged in server time: the renewal's clock reading against the
	# term's recorded end, when the server's clock did not change since
	# the call that set that end (the client's previous grant or renewal
	# of the term).
	my $same_clock = sub {
		my ($x, $y) = @_;
		my ($lo, $hi) = (min($x->{t0}, $y->{t0}), max($x->{t1}, $y->{t1}));
		return !grep { $_->[0] < $hi && $_->[1] > $lo } @{ $h->{clock_changes} // [] };
	};
	my %by_client;
	push @{ $by_client{ $_->{c} } }, $_ for sort { $a->{t0} <=> $b->{t0} } @calls;
	my %prev_ext;    # renewal => the client's call before it that extended its term
	for my $list (values %by_client)
	{
		my %last;
		for my $c (@$list)
		{
			if ($c->{k} eq 'renew')
			{
				$prev_ext{$c} = $last{"$c->{n}\0$c->{g}"};
				$last{"$c->{n}\0$c->{g}"} = $c;
			}
			elsif ($c->{k} =~ /^(acquire|wait)$/ && $c->{res})
			{
				$last{"$c->{n}\0$c->{res}{g}"} = $c;
			}
		}
	}
	for my $c (grep { $_->{k} eq 'renew' && !$_->{e} && !$_->{res} } @calls)
	{
		next unless kept($h, $c->{port}, $c->{t1}) && defined $c->{st};
		my $ft = $fterm{ $c->{n} }{ $c->{g} } or next;
		my $t = $ft->{term};
		next unless defined $t->{how} && $t->{how} =~ /^(expired|taken over)$/;
		my $p = $prev_ext{$c};
		next unless $p && $same_clock->($p, $c);
		push @{ $v{renew_null} }, sprintf('a renewal returned NULL %d us before its term lapsed: %s / %s',
			$t->{end} - $c->{st}, fmt_call($c), fmt_term($t))
		  if $c->{st} < $t->{end};
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
	$granted{"$_->{c}\0$_->{n}\0$_->{res}{g}"} = 1 for @results;
	my %grant;      # "n\0g" => the call that began the term, as far as a client was told
	for my $c (grep { $_->{k} =~ /^(acquire|wait)$/ } @results)
	{
		my $key = "$c->{n}\0$c->{res}{g}";
		$grant{$key} = $c if !$grant{$key} || $c->{t0} < $grant{$key}{t0};
	}
	my %tag_call = map { $_->{tag} => $_ } grep { $_->{k} eq 'fenced' && $_->{ok} } @calls;
	my %rows_by_name;
	for my $r (@{ $final->{rows} })
	{
		push @{ $rows_by_name{ $r->{n} } }, $r;
		my $ft = $fterm{ $r->{n} }{ $r->{g} };
		my $row = "row $r->{id} ($r->{tab}, $r->{n}, g=$r->{g}, client c$r->{c}, committed at "
		  . ($r->{cts} // '?') . ')';
		push @{ $v{fenced_term} }, "$row was written under a generation its writer was never granted"
		  unless $granted{"$r->{c}\0$r->{n}\0$r->{g}"};
		if (!$ft)
		{
			push @{ $v{fenced_term} }, "$row: no such term in the history";
			next;
		}
		next unless defined $r->{cts} && $ft->{next};
		my $fc = $tag_call{ $r->{tag} } or next;
		my $gc = $grant{"$r->{n}\0$ft->{next}{g}"} or next;
		next unless $same_clock->($fc, $gc);
		push @{ $v{fenced_term} }, sprintf('%s committed %d us after the next term began: %s / %s / %s', $row,
			$r->{cts} - $ft->{next}{acq}, fmt_term($ft->{next}), fmt_call($fc), fmt_call($gc))
		  if $r->{cts} > $ft->{next}{acq};
	}
	for my $n (sort keys %rows_by_name)
	{
		my @rows = sort { $a->{id} <=> $b->{id} } @{ $rows_by_name{$n} };
		my $hi;
		for my $r (@rows)
		{
			if ($hi && $r->{g} < $hi->{g})
			{
				push @{ $v{fenced_order} }, "row $r->{id} of $n (g=$r->{g}, client c$r->{c}) came after row $hi->{id} (g=$hi->{g}, client c$hi->{c})";
			}
			$hi = $r if !$hi || $r->{g} > $hi->{g};
		}
	}

	# --- fenced_durable -----------------------------------------------------------
	# (by the transactions' tags: an id drawn by a transaction that never
	# became durable is drawn again after a crash)
	my %tagged;
	push @{ $tagged{ $_->{tag} } }, $_ for @{ $final->{rows} };
	for my $c (grep { $_->{k} eq 'fenced' } @calls)
	{
		my @rows = @{ $tagged{ $c->{tag} // '' } // [] };
		if ($c->{ok})
		{
			next unless $c->{sc} eq 'on' && kept($h, $c->{port}, $c->{t1});
			push @{ $v{fenced_durable} }, 'an acknowledged fenced commit lost its rows (' . scalar(@rows)
			  . ' of ' . scalar(@{ $c->{ids} }) . ' left): ' . fmt_call($c)
			  if @rows != @{ $c->{ids} };
		}
		elsif ($c->{e} && !$c->{u})
		{
			push @{ $v{fenced_durable} }, 'a fenced transaction that failed left rows ('
			  . join(', ', map { $_->{id} } @rows) . '): ' . fmt_call($c)
			  if @rows;
		}
	}

	# --- events_stream ------------------------------------------------------------
	my %conn;
	push @{ $conn{"$_->{ln}/$_->{cn}"} }, $_ for grep { $_->{src} eq 'notify' } @{ $h->{notes} };
	for my $k (sort keys %conn)
	{
		my %prev;
		for my $e (@{ $conn{$k} })
		{
			my $p = $prev{ $e->{n} };
			my $why = bad_step($p, $e);
			push @{ $v{events_stream} }, "$why: " . fmt_note($p) . ' then ' . fmt_note($e) if $why;
			push @{ $v{events_stream} }, 'event numbers went back: ' . fmt_note($p) . ' then ' . fmt_note($e)
			  if $p && $e->{seq} <= $p->{seq};
			$prev{ $e->{n} } = $e;
		}
	}

	# --- events_once --------------------------------------------------------------
	my %ann;    # "n\0g\0begin|end" => { seq => event }
	my @strict = grep { $_->{ev} ne 'renewed' && kept_visible($h, $_->{port}, $_->{t}) } @{ $h->{notes} };
	push @strict, map { { %$_, src => 'hoplock_events(0)' } } grep { $_->{ev} ne 'renewed' } @{ $final->{events} };
	for my $e (@strict)
	{
		my $kind = $e->{ev} eq 'acquired' ? 'begin' : 'end';
		$ann{"$e->{n}\0$e->{g}\0$kind"}{ $e->{seq} } //= $e;
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
	push @{ $fev{ $_->{n} } }, $_ for sort { $a->{seq} <=> $b->{seq} } @{ $final->{events} };
	for my $n (sort keys %fev)
	{
		my $prev;
		for my $e (@{ $fev{$n} })
		{
			my $why = !$prev && $e->{ev} ne 'acquired' ? "the first event of $n is $e->{ev}" : bad_step($prev, $e);
			push @{ $v{events_history} }, "hoplock_events(0): $why: " . ($prev ? fmt_note($prev) . ' then ' : '') . fmt_note($e) if $why;
			$prev = $e;
		}
	}
	my %fseq = map { $_->{seq} => $_ } @{ $final->{events} };
	for my $e (grep { $_->{ev} ne 'renewed' && kept_visible($h, $_->{port}, $_->{t}) } @{ $h->{notes} })
	{
		my $f = $fseq{ $e->{seq} };
		push @{ $v{events_history} }, 'an event sent is not in hoplock_events(0): ' . fmt_note($e)
		  . ($f ? ' (that number is ' . fmt_note($f) . ')' : '')
		  unless $f && $f->{ev} eq $e->{ev} && $f->{n} eq $e->{n} && $f->{g} == $e->{g} && $f->{o} eq $e->{o};
	}

	# --- final_state --------------------------------------------------------------
	push @{ $v{final_state} }, "lapsed term not announced: $_" for @{ $final->{unannounced} // [] };
	push @{ $v{final_state} }, "amcheck: $_" for @{ $final->{amcheck} // [] };
	my %lease = map { $_->{n} => $_ } @{ $final->{leases} };
	for my $n (sort keys %$fterms)
	{
		my $t = $fterms->{$n}[-1];
		my $l = $lease{$n};
		if (!$l)
		{
			push @{ $v{final_state} }, "no lease row for $n, whose last term is " . fmt_term($t);
			next;
		}
		my $want = !defined $t->{end} ? 'h' : $t->{how} =~ /^(expired|taken over)$/ ? 'x' : 'r';
		push @{ $v{final_state} }, "lease row of $n (state $l->{state}, g=$l->{g}, owner $l->{o}, acquired $l->{acq}) disagrees with its last term "
		  . fmt_term($t)
		  if $l->{g} != $t->{g} || $l->{state} ne $want || $l->{o} ne $t->{o} || $l->{acq} != $t->{acq};
	}
	for my $n (sort keys %lease)
	{
		push @{ $v{final_state} }, "lease row of $n (g=$lease{$n}{g}) has no term in the history"
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
			my %new = map { $_->{g} => 1 } @{ $fterms->{$n} // [] };
			my @present = grep { $new{ $_->{g} } } @{ $old->{$n} };
			my @missing = grep { !$new{ $_->{g} } } @{ $old->{$n} };
			next unless @present && @missing;
			my $top = max(map { $_->{g} } @present);
			my @hole = grep { $_->{g} < $top } @missing;
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
	$n{"calls_$_->{k}"}++ for @calls;
	$n{errors}++ for grep { $_->{e} } @calls;
	$n{"sqlstate_$_->{e}"}++ for grep { $_->{e} } @calls;
	$n{unknown_outcome} = grep { $_->{u} } @calls;
	$n{granted} = grep { $_->{k} =~ /^(acquire|wait)$/ && acked_result($_) } @calls;
	$n{contended} = grep { $_->{k} =~ /^(acquire|wait)$/ && !$_->{e} && !$_->{res} } @calls;
	$n{renewed} = grep { $_->{k} eq 'renew' && acked_result($_) } @calls;
	$n{renew_null} = grep { $_->{k} eq 'renew' && !$_->{e} && !$_->{res} } @calls;
	$n{renew_late} = grep { $_->{k} eq 'renew' && $_->{late} } @calls;
	$n{hung} = grep { $_->{k} eq 'fenced' && $_->{hung} } @calls;
	$n{hung_ended} = grep { $_->{k} eq 'fenced' && $_->{hung} && ($_->{em} // '') =~ /administrator command/ } @calls;
	$n{released} = grep { $_->{k} eq 'release' && !$_->{e} && $_->{ok} } @calls;
	$n{session_bound} = grep { $_->{k} =~ /^(acquire|wait)$/ && acked_result($_) && $_->{sb} } @calls;
	my @f = grep { $_->{k} eq 'fenced' } @calls;
	$n{fenced_txns} = @f;
	$n{fenced_committed} = grep { $_->{ok} } @f;
	$n{fenced_refused} = grep { ($_->{e} // '') eq '55P03' } @f;
	$n{"fenced_$_->{iso}"}++ for grep { $_->{ok} } @f;
	$n{fenced_rows} = scalar @{ $h->{final}{rows} };
	my %tags = map { $_->{tag} => 1 } @{ $h->{final}{rows} };
	$n{fenced_rows_lost_async_commit} = grep { $_->{ok} && $_->{sc} eq 'off' && !$tags{ $_->{tag} } } @f;
	$n{terms} = scalar @{ $h->{final}{history} };
	$n{"ended_$_->{how}"}++ for grep { defined $_->{how} } @{ $h->{final}{history} };
	$n{events_notified} = grep { $_->{src} eq 'notify' } @{ $h->{notes} };
	$n{"notified_$_->{ev}"}++ for grep { $_->{src} eq 'notify' } @{ $h->{notes} };
	$n{events_final} = scalar @{ $h->{final}{events} };
	my %fterm = map { ("$_->{n}\0$_->{g}" => 1) } @{ $h->{final}{history} };
	my %lost;
	$lost{"$_->{n}\0$_->{res}{g}"} = 1 for grep { acked_result($_) && !$fterm{"$_->{n}\0$_->{res}{g}"} } @calls;
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
	my %c = (sc => 'on', port => 1);
	my @calls = (
		{ %c, c => 1, k => 'acquire', n => 'a', o => 'o1', t0 => 1.0, t1 => 1.1, res => { g => 1, o => 'o1', acq => $s, exp => $s + 300_000 }, st => $s },
		{ %c, c => 1, k => 'fenced', n => 'a', g => 1, t0 => 1.2, t1 => 1.3, ok => 1, ids => [1], tag => 'c1.1' },
		{ %c, c => 1, k => 'renew', n => 'a', o => 'o1', g => 1, t0 => 1.3, t1 => 1.35, res => { g => 1, o => 'o1', acq => $s, exp => $s + 600_000 }, st => $s + 300_000 },
		{ %c, c => 2, k => 'acquire', n => 'a', o => 'o2', t0 => 1.4, t1 => 1.45, res => undef, st => $s + 400_000 },
		{ %c, c => 1, k => 'renew', n => 'a', o => 'o1', g => 1, t0 => 2.0, t1 => 2.05, res => undef, st => $s + 1_000_000 },
		{ %c, c => 2, k => 'wait', n => 'a', o => 'o2', t0 => 1.5, t1 => 1.65, res => { g => 2, o => 'o2', acq => $s + 600_000, exp => $s + 900_000 }, st => $s + 600_000 },
		{ %c, c => 2, k => 'fenced', n => 'a', g => 2, t0 => 1.7, t1 => 1.75, ok => 1, ids => [2], tag => 'c2.1' },
		{ %c, c => 1, k => 'fenced', n => 'a', g => 1, t0 => 2.1, t1 => 2.15, e => '55P03', ids => [], tag => 'c1.2' },
		{ %c, c => 2, k => 'release', n => 'a', o => 'o2', g => 2, t0 => 1.8, t1 => 1.85, ok => 1, st => $s + 800_000 },
	);
	my @history = (
		{ n => 'a', g => 1, o => 'o1', acq => $s, end => $s + 600_000, how => 'taken over' },
		{ n => 'a', g => 2, o => 'o2', acq => $s + 600_000, end => $s + 800_000, how => 'released' },
	);
	my @events = (
		{ seq => 1, ev => 'acquired', n => 'a', o => 'o1', g => 1 },
		{ seq => 2, ev => 'expired', n => 'a', o => 'o1', g => 1 },
		{ seq => 3, ev => 'acquired', n => 'a', o => 'o2', g => 2 },
		{ seq => 4, ev => 'released', n => 'a', o => 'o2', g => 2 },
	);
	my @notes = map { { %$_, src => 'notify', ln => 1, cn => 1, port => 1, t => 1 + $_->{seq} / 10 } } @events;
	return {
		calls => \@calls,
		notes => \@notes,
		nodes => { 1 => { name => 'n1', fate => 'final' } },
		final => {
			history => \@history,
			events => [ map { {%$_} } @events ],
			leases => [ { n => 'a', state => 'r', o => 'o2', g => 2, acq => $s + 600_000, exp => $s + 800_000 } ],
			rows => [
				{ id => 1, tab => 'f', n => 'a', g => 1, c => 1, tag => 'c1.1', cts => $s + 200_000 },
				{ id => 2, tab => 't', n => 'a', g => 2, c => 2, tag => 'c2.1', cts => $s + 700_000 },
			],
			unannounced => [], amcheck => [], crashes => [],
		},
		old => { 9 => { history => [ map { {%$_} } @history ] } },
		clock_changes => [],
	};
}

# [ check, what is changed, sub changing a sample ]
our @MUTATIONS = (
	[ overlap => 'the second term begins before the first ended', sub { $_[0]{final}{history}[1]{acq} -= 200_000 } ],
	[ reuse => 'a generation handed to another owner', sub {
		push @{ $_[0]{calls} }, { %{ $_[0]{calls}[0] }, c => 3, o => 'o3', t0 => 3, t1 => 3.1, res => { %{ $_[0]{calls}[0]{res} }, o => 'o3' } } } ],
	[ order => 'a new term below one acknowledged earlier', sub {
		push @{ $_[0]{calls} }, { %{ $_[0]{calls}[0] }, c => 3, o => 'o3', port => 2, t0 => 3, t1 => 3.1, res => { g => 0.5, o => 'o3', acq => 1, exp => 2 } } } ],
	[ durable => 'an acknowledged grant missing after a crash', sub { pop @{ $_[0]{final}{history} } } ],
	[ renew_null => 'a renewal NULL before the term lapsed', sub { $_[0]{calls}[4]{st} = $_[0]{final}{history}[0]{end} - 1 } ],
	[ fenced_term => 'a row committed after the next term began', sub { $_[0]{final}{rows}[0]{cts} = $_[0]{final}{history}[1]{acq} + 1 } ],
	[ fenced_order => 'rows out of generation order', sub { $_[0]{final}{rows}[0]{id} = 3 } ],
	[ fenced_durable => 'a refused transaction left its row', sub {
		push @{ $_[0]{final}{rows} }, { id => 5, tab => 'f', n => 'a', g => 1, c => 1, tag => 'c1.2', cts => $_[0]{final}{rows}[0]{cts} } } ],
	[ events_stream => 'an acquired without the end of the term before', sub { splice(@{ $_[0]{notes} }, 1, 1) } ],
	[ events_once => 'an expiry announced again after a crash', sub {
		push @{ $_[0]{notes} }, { %{ $_[0]{notes}[1] }, seq => 9, cn => 2, t => 5 } } ],
	[ events_history => 'an event sent that hoplock_events(0) does not have', sub { splice(@{ $_[0]{final}{events} }, 3, 1) } ],
	[ final_state => 'the lease row disagrees with the history', sub { $_[0]{final}{leases}[0]{state} = 'x' } ],
	[ no_crash => 'a server process crashed', sub { push @{ $_[0]{final}{crashes} }, 'LOG: server process (PID 1) was terminated by signal 11' } ],
	[ async_suffix => 'a promotion lost a term in the middle', sub {
		my $old = $_[0]{old}{9}{history};
		push @$old, { %{ $old->[1] }, g => 3, acq => $old->[1]{end}, end => $old->[1]{end} + 1 };
		$old->[0]{g} = 0.5 } ],
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
