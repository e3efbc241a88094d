# Hoplock::Maintenance: maintenance of the lease table under load, the run
# of t/049_maintenance_reindex.pl, t/050_maintenance_rewrite.pl and
# t/051_maintenance_repack.pl (each a topic: the commands it loops).
#
# Eight clients acquire, renew, release, wait on, read and forget 50 names
# while another session loops the maintenance commands it is given on
# hoplock_internal.lease -- 20,000 other rows make each rewrite long
# enough to be felt -- and autovacuum visits the table as often as it can.
# Every call is either done right or contended (NULL, false, or the
# retryable 55P03 "could not lock table"); a renewal returns NULL only once
# the term has lapsed; no generation of a name is granted twice, goes down,
# or begins before the term before it ended; reads never go back.
# Afterwards the table agrees with what the clients were told, its heap and
# every index pass amcheck (heapallindexed), each name's next generation is
# greater than any granted, and the server logged no error but the busy
# table, no crash, and no restart of the expiry worker.
#
# Every bound below is an ordering of instants on one clock: the clients
# run on the server's machine, so the client's gettimeofday() before a
# call is earlier than anything the call does, and the one after it is
# later than its commit.  No assertion depends on how fast anything runs.
#
#   Hoplock::Maintenance::run(name => 'reindex', cycle => [ [ kind, SQL ] ...],
#       locks_out_writes => 1 if a command takes a lock writers wait for)
#
# A command of the cycle is SQL, or 'pg_repack' (the lease table and the
# event log, repacked by pg_repack).  HOPLOCK_MAINTENANCE_SECONDS sets how
# long the load runs (default 10 s a file).
package Hoplock::Maintenance;

use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use DBI;
use IPC::Run;
use JSON::PP;
use POSIX qw(WNOHANG);
use Time::HiRes qw(time usleep gettimeofday);

# Can this run: pg_repack (if the cycle has it) and amcheck installed for
# the server under test?  Debian's postgresql-15-repack is built for
# Debian's 15 only.  The server's bindir leads PATH when prove runs, so
# pg_config there is the server's.  Returns why not, or undef.
sub missing
{
	my (%o) = @_;
	chomp(my $pg_bindir = `pg_config --bindir`);
	chomp(my $pg_sharedir = `pg_config --sharedir`);
	return "pg_repack is not installed for the PostgreSQL in $pg_bindir"
	  if grep({ $_->[1] eq 'pg_repack' } @{ $o{cycle} })
	  && !(-x "$pg_bindir/pg_repack" && -f "$pg_sharedir/extension/pg_repack.control");
	return "amcheck is not installed for the PostgreSQL in $pg_bindir"
	  unless -f "$pg_sharedir/extension/amcheck.control";
	return undef;
}

my $n_clients    = 8;
my $n_names      = 50;
my @names        = map { "m-$_" } 1 .. $n_names;
my $dsn;

sub now_us
{
	my ($s, $us) = gettimeofday();
	return $s * 1_000_000 + $us;
}

# the first lines of a list, for a diagnostic
sub first_few
{
	my @lines = @_;
	return join("\n", @lines > 20 ? (@lines[ 0 .. 19 ], '...') : @lines);
}

sub us { return "(extract(epoch FROM $_[0]) * 1000000)::bigint" }

# Each call returns what it was told and, last, the server's clock after
# the function ran (the function in FROM runs before the select list).
my $lease_cols = join(', ',
	'r.generation', 'r.owner', us('r.acquired_at'), us('r.expires_at'), us('clock_timestamp()'));
my %SQL = (
	acquire => "SELECT $lease_cols FROM hoplock_acquire(\$1, \$2, \$3::interval) AS r",
	wait    => "SELECT $lease_cols FROM hoplock_wait(\$1, \$2, \$3::interval, \$4::interval) AS r",
	renew   => "SELECT $lease_cols FROM hoplock_renew(\$1, \$2, \$3::interval, \$4::bigint) AS r",
	read    => "SELECT $lease_cols FROM hoplock_read(\$1) AS r",
	release => 'SELECT r, ' . us('clock_timestamp()') . ' FROM hoplock_release($1, $2, $3::bigint) AS r',
	forget  => 'SELECT r, ' . us('clock_timestamp()') . ' FROM hoplock_forget($1) AS r',);

# --- A client: one connection, autocommit, one record per call --------------
#
# A record: client, op, name, the generation and ttl (us) it passed, c0 and
# c1 (client clock before and after), out = ok | none (NULL or false) |
# busy (55P03) | error, and what it was told: g, owner, acq, exp, ret
# (server clock after the function), b (release, forget).
sub run_client
{
	my ($id, $t_end, $file) = @_;
	my $me = "client-$id";
	srand($$ ^ int(time() * 1000));
	open(my $log, '>', $file) or die "$file: $!";
	my $json = JSON::PP->new->canonical;
	my $dbh = DBI->connect("$dsn;application_name=$me", '', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0 });
	$dbh->do(q{SET statement_timeout = '30s'});
	my %sth = map { $_ => $dbh->prepare($SQL{$_}) } keys %SQL;
	my %held;        # name => { g, exp, ttl, until (when to let go) }
	my %cooldown;    # name => expires_at of a term let go without a release

	my $call = sub {
		my ($op, $name, %a) = @_;
		my @params =
			$op eq 'acquire' ? ($name, $me, "$a{ttl} microseconds")
		  : $op eq 'wait'    ? ($name, $me, "$a{ttl} microseconds", "$a{timeout} microseconds")
		  : $op eq 'renew'   ? ($name, $me, "$a{ttl} microseconds", $a{gen})
		  : $op eq 'release' ? ($name, $me, $a{gen})
		  :                    ($name);
		my %rec = (client => $id, op => $op, name => $name, %a);
		$rec{c0} = now_us();
		my @row = eval {
			$sth{$op}->execute(@params);
			my @r = $sth{$op}->fetchrow_array;
			$sth{$op}->finish;
			@r;
		};
		$rec{c1} = now_us();
		if ($@)
		{
			$rec{sqlstate} = $dbh->state;
			$rec{error} = $dbh->errstr // "$@";
			$rec{out} = $rec{sqlstate} eq '55P03' ? 'busy' : 'error';
		}
		elsif ($op eq 'release' || $op eq 'forget')
		{
			@rec{qw(b ret)} = @row;
			$rec{out} = $rec{b} ? 'ok' : 'none';
		}
		else
		{
			@rec{qw(g owner acq exp ret)} = @row;
			$rec{out} = defined $rec{g} ? 'ok' : 'none';
		}
		print $log $json->encode(\%rec), "\n";
		return \%rec;
	};

	# A term is held for 0.2 to 2 s, renewed at a third of its ttl, then
	# released -- or, one time in eight, left to lapse.
	my @ttls = (300_000, 600_000, 1_200_000);
	while (time() < $t_end)
	{
		foreach my $name (sort keys %held)
		{
			my $t = $held{$name};
			if (now_us() >= $t->{until})
			{
				if (rand() < 0.125)
				{
					# a leader that stops renewing: the term lapses (the
					# expiry worker, or the next acquire, ends it); this
					# client leaves the name alone until then
					print $log $json->encode({ client => $id, op => 'abandon', name => $name,
						gen => $t->{g}, c0 => now_us() }), "\n";
					$cooldown{$name} = $t->{exp};
					delete $held{$name};
					next;
				}
				# "false": lapsed already, or contended; either way this
				# client stops leading, and leaves the name alone until the
				# term has surely ended
				my $r = $call->('release', $name, gen => $t->{g});
				$cooldown{$name} = $t->{exp} if $r->{out} eq 'none';
				delete $held{$name} unless $r->{out} eq 'busy';
				next;
			}
			next if now_us() < $t->{exp} - 2 * $t->{ttl} / 3;
			my $r = $call->('renew', $name, gen => $t->{g}, ttl => $t->{ttl});
			$t->{exp} = $r->{exp} if $r->{out} eq 'ok';
			delete $held{$name} if $r->{out} eq 'none';
		}

		my $now  = now_us();
		my @free = grep { !$held{$_} && ($cooldown{$_} // 0) < $now } @names;
		my $x    = rand();
		if ($x < 0.40 && keys %held < 4 && @free)
		{
			# a new term: acquire, or wait up to 250 ms
			my $name = $free[ int(rand(@free)) ];
			my $ttl  = $ttls[ int(rand(@ttls)) ];
			my $r =
			  $x < 0.28
			  ? $call->('acquire', $name, ttl => $ttl)
			  : $call->('wait', $name, ttl => $ttl, timeout => 50_000 + int(rand(200_000)));
			$held{$name} = { g => $r->{g}, exp => $r->{exp}, ttl => $ttl,
				until => $r->{c1} + 200_000 + int(rand(1_800_000)) }
			  if $r->{out} eq 'ok';
		}
		elsif ($x >= 0.40 && $x < 0.55)
		{
			$call->('read', $names[ int(rand(@names)) ]);
		}
		elsif ($x >= 0.55 && $x < 0.58 && @free)
		{
			# the released or lapsed row goes; the next term inserts one
			$call->('forget', $free[ int(rand(@free)) ]);
		}
		else
		{
			usleep(1000 + int(rand(4000)));
		}
	}

	# the end: release what is held, retrying while the table is busy
	foreach my $name (sort keys %held)
	{
		for (1 .. 100)
		{
			my $r = $call->('release', $name, gen => $held{$name}{g});
			last if $r->{out} ne 'busy';
			usleep(10_000);
		}
	}
	$dbh->disconnect;
	close($log) or die "$file: $!";
}

# The run: a server, the load with the maintenance of $o{cycle} meanwhile,
# and the checks (Test::More assertions)
sub run
{
	my (%o) = @_;
	my $load_seconds = $ENV{HOPLOCK_MAINTENANCE_SECONDS} || 10;
	my $repack = grep { $_->[1] eq 'pg_repack' } @{ $o{cycle} };

	my $node = PostgreSQL::Test::Cluster->new("maintenance_$o{name}");
	$node->init;
	$node->append_conf(
		'postgresql.conf', q{
	shared_preload_libraries = 'hoplock'
	log_statement = none
	autovacuum_naptime = 1s
	});
	$node->start;

	# A user's own index on the lease table, and autovacuum (and autoanalyze)
	# after every 20 changed rows.
	$node->safe_psql(
		'postgres', q{
		CREATE EXTENSION hoplock;
		CREATE EXTENSION amcheck;
	} . ($repack ? 'CREATE EXTENSION pg_repack;' : '') . q{
		CREATE INDEX lease_expires_at ON hoplock_internal.lease (expires_at);
		ALTER TABLE hoplock_internal.lease SET (
			autovacuum_vacuum_threshold = 20, autovacuum_vacuum_scale_factor = 0,
			autovacuum_analyze_threshold = 20, autovacuum_analyze_scale_factor = 0,
			autovacuum_vacuum_cost_delay = 0);
	});
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'postgres' AND state = 'sleeping'})
	  or die 'no worker';

	# 20,000 other names, half of them held for an hour, half released: rows
	# enough that rewriting the table takes a while, so that the clients meet
	# it busy.  No client touches them.
	$node->safe_psql(
		'postgres', q{
		DO $$
		BEGIN
			FOR i IN 1..20000 LOOP
				PERFORM hoplock_acquire('filler-' || i, 'filler', '1 h');
				IF i % 2 = 0 THEN PERFORM hoplock_release('filler-' || i, 'filler'); END IF;
				IF i % 1000 = 0 THEN COMMIT; END IF;
			END LOOP;
		END $$;
	});
	my $filler_sql = q{
		SELECT count(*) || ' ' || md5(string_agg(concat_ws(' ', name, state, owner, generation, acquired_at, expires_at), ',' ORDER BY name))
		  FROM hoplock_internal.lease WHERE name LIKE 'filler-%'};
	my $filler = $node->safe_psql('postgres', $filler_sql);

	$dsn = sprintf('dbi:Pg:host=%s;port=%d;dbname=postgres', $node->host, $node->port);
	my $bindir = $node->can('config_data') ? $node->config_data('--bindir') : `pg_config --bindir`;
	chomp $bindir;
	my $tmp    = PostgreSQL::Test::Utils::tempdir;

	# --- Start the clients ------------------------------------------------------
	my $autovacuum_sql = q{SELECT autovacuum_count FROM pg_stat_user_tables
		WHERE relid = 'hoplock_internal.lease'::regclass};
	my $autovacuums = $node->safe_psql('postgres', $autovacuum_sql);
	my $log_start = -s $node->logfile;
	my $t_end = time() + $load_seconds;
	my @pids;
	foreach my $id (1 .. $n_clients)
	{
		my $pid = fork();
		die "fork: $!" unless defined $pid;
		if ($pid == 0)
		{
			# no END blocks here: they belong to the test's process
			my $ok = eval { run_client($id, $t_end, "$tmp/client-$id.log"); 1 };
			print STDERR "client $id: $@" unless $ok;
			POSIX::_exit($ok ? 0 : 1);
		}
		push @pids, $pid;
	}

	# --- Maintenance, in a loop, meanwhile --------------------------------------
	my $mdbh = DBI->connect("$dsn;application_name=maintenance", '', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0 });
	$mdbh->do(q{SET statement_timeout = '60s'});
	my @repack = (
		"$bindir/pg_repack", '--host', $node->host, '--port', $node->port,
		'--dbname', 'postgres', '--table', 'hoplock_internal.lease',
		'--table', 'hoplock_internal.event',
		'--no-kill-backend', '--wait-timeout', '30');
	my @cycle = map { [ $_->[0], $_->[1] eq 'pg_repack' ? \@repack : $_->[1] ] } @{ $o{cycle} };
	my @maint;    # { kind, c0, c1, ok, error }
	for (my $i = 0; time() < $t_end; $i++)
	{
		my ($kind, $what) = @{ $cycle[ $i % @cycle ] };
		my %m = (kind => $kind, c0 => now_us());
		if (ref $what)
		{
			my ($stdout, $stderr) = ('', '');
			my $ok = IPC::Run::run($what, '>', \$stdout, '2>', \$stderr);
			$m{ok} = $ok && $stderr !~ /ERROR|WARNING|[Ss]kipping/;
			$m{error} = "exit $?: $stdout$stderr" unless $m{ok};
		}
		else
		{
			$m{ok} = eval { $mdbh->do($what); 1 };
			$m{error} = $mdbh->errstr // "$@" unless $m{ok};
		}
		$m{c1} = now_us();
		push @maint, \%m;
		usleep(20_000 + int(rand(60_000)));
	}
	$mdbh->disconnect;

	# --- The clients finish -----------------------------------------------------
	my $give_up = time() + 60;
	my %exit;
	foreach my $pid (@pids)
	{
		while (waitpid($pid, WNOHANG) == 0)
		{
			if (time() > $give_up)
			{
				kill 'KILL', $pid;
				waitpid($pid, 0);
				$exit{$pid} = 'killed: did not finish';
				last;
			}
			usleep(50_000);
		}
		$exit{$pid} //= $?;
	}
	is(join(' ', map { $exit{$_} } @pids), join(' ', (0) x $n_clients),
		"all $n_clients clients ran to the end");

	# --- What the clients saw ---------------------------------------------------
	my $json = JSON::PP->new;
	my @calls;
	foreach my $id (1 .. $n_clients)
	{
		open(my $fh, '<', "$tmp/client-$id.log") or die "client-$id.log: $!";
		push @calls, map { $json->decode($_) } <$fh>;
		close $fh;
	}
	my %count;
	$count{"$_->{op} $_->{out}"}++ foreach grep { $_->{op} ne 'abandon' } @calls;
	$count{abandon} = grep { $_->{op} eq 'abandon' } @calls;
	diag(join(', ', map { "$_: $count{$_}" } sort keys %count));

	# Every call was done, or contended, or met a busy table (55P03); nothing
	# else.
	my @errors = grep { ($_->{out} // '') eq 'error' } @calls;
	is(scalar @errors, 0, 'no call failed but with 55P03 (the table busy)')
	  or diag(first_few(map { "$_->{op} $_->{name}: $_->{sqlstate} $_->{error}" } @errors));
	cmp_ok($count{'acquire ok'} // 0, '>', 0, 'acquires granted terms');
	cmp_ok($count{'wait ok'} // 0, '>', 0, 'waits granted terms');
	cmp_ok($count{'renew ok'} // 0, '>', 0, 'renewals went through');
	cmp_ok($count{'release ok'} // 0, '>', 0, 'releases went through');
	cmp_ok($count{'forget ok'} // 0, '>', 0, 'names were forgotten');
	cmp_ok(($count{'acquire none'} // 0) + ($count{'wait none'} // 0), '>', 0,
		'and some acquires and waits were contended');
	# (only commands that lock the table against writes make it busy:
	# not REINDEX CONCURRENTLY, ANALYZE or VACUUM)
	cmp_ok(scalar(grep { ($_->{out} // '') eq 'busy' } @calls), '>', 0,
		'some calls met the table busy (55P03), and were retried')
	  if $o{locks_out_writes};

	# Each term: from its grant, and what its client did with it afterwards
	# (each client's records are in the order it made the calls).
	my (%term, %grants, @wrong, @dup, @lost);
	my $release_contended = 0;
	foreach my $c (@calls)
	{
		next unless ($c->{out} // '') eq 'ok' || ($c->{op} =~ /^(renew|release)$/ && $c->{out} eq 'none');
		my $who = "client-$c->{client}";
		my $what = "$c->{op} $c->{name} by $who";
		if ($c->{op} eq 'acquire' || $c->{op} eq 'wait')
		{
			my $key = "$c->{name}/$c->{g}";
			push @wrong, "$what: generation $c->{g}, owner $c->{owner}"
			  unless $c->{owner} eq $who && $c->{g} > 0;
			push @wrong, "$what: began at $c->{acq}, outside the call [$c->{c0}, $c->{c1}]"
			  unless $c->{c0} <= $c->{acq} && $c->{acq} <= $c->{c1};
			push @wrong, "$what: expires at $c->{exp}, not the call's clock + ttl $c->{ttl}"
			  unless $c->{c0} + $c->{ttl} <= $c->{exp} && $c->{exp} <= $c->{c1} + $c->{ttl};
			if ($term{$key})
			{
				push @dup, "$c->{name}: generation $c->{g} granted to $term{$key}{owner} at $term{$key}{acq} and to $who at $c->{acq}";
				next;
			}
			$term{$key} = { name => $c->{name}, g => $c->{g}, owner => $who, acq => $c->{acq},
				exp => $c->{exp}, c0 => $c->{c0}, c1 => $c->{c1} };
			push @{ $grants{ $c->{name} } }, $term{$key};
		}
		elsif ($c->{op} eq 'renew')
		{
			my $t = $term{"$c->{name}/$c->{gen}"};
			if ($c->{out} eq 'none')
			{
				# NULL only once the term has lapsed: it had not, if the
				# server's clock after the call is before the expiry this
				# client was last told
				push @lost, "$what, generation $c->{gen}: NULL at $c->{ret}, the term runs until $t->{exp}"
				  if $c->{ret} < $t->{exp};
				next;
			}
			push @wrong, "$what: generation $c->{g}, owner $c->{owner}, began $c->{acq}; renewed term $c->{gen} began $t->{acq}"
			  unless $c->{g} == $c->{gen} && $c->{owner} eq $who && $c->{acq} == $t->{acq};
			push @wrong, "$what: expires at $c->{exp}, not the call's clock + ttl $c->{ttl}"
			  unless $c->{c0} + $c->{ttl} <= $c->{exp} && $c->{exp} <= $c->{c1} + $c->{ttl};
			$t->{exp} = $c->{exp} if $c->{exp} > $t->{exp};
		}
		elsif ($c->{op} eq 'release' && $c->{out} eq 'none')
		{
			# false before the term lapsed: contended
			$release_contended++ if $c->{ret} < $term{"$c->{name}/$c->{gen}"}{exp};
		}
		elsif ($c->{op} eq 'release')
		{
			# ended between c0 and c1
			$term{"$c->{name}/$c->{gen}"}{released} = $c->{c0};
		}
	}
	diag(sprintf('releases that returned false: %d before the term lapsed, %d after',
		$release_contended, ($count{'release none'} // 0) - $release_contended));
	is(scalar @wrong, 0, 'every grant and renewal returned the right term, owner and expiry')
	  or diag(first_few(@wrong));
	is(scalar @dup, 0, 'no generation of a name was granted twice')
	  or diag(first_few(@dup));
	is(scalar @lost, 0,
		sprintf('no renewal of a running term returned NULL (%d renewals, %d NULL after the term lapsed)',
			$count{'renew ok'} // 0, $count{'renew none'} // 0))
	  or diag(first_few(@lost));

	# Per name, in generation order: each term began after the one before it
	# ended -- released (not before its release was sent) or lapsed (not before
	# the last expiry its holder was told).
	my @order;
	foreach my $name (sort keys %grants)
	{
		my @t = sort { $a->{g} <=> $b->{g} } @{ $grants{$name} };
		for my $i (1 .. $#t)
		{
			my ($p, $n) = @t[ $i - 1, $i ];
			my $ended = $p->{released} // $p->{exp};
			push @order, "$name: generation $n->{g} began at $n->{acq}, generation $p->{g} ended no earlier than $ended"
			  unless $n->{acq} >= $ended && $n->{acq} > $p->{acq};
		}
	}
	is(scalar @order, 0,
		sprintf('per name, generations go up in the order the terms began, one term at a time (%d terms of %d names)',
			scalar keys %term, scalar keys %grants))
	  or diag(first_few(@order));

	# Reads never go back: a read sees a term at least as new as every grant
	# that committed before the read began, and no term granted after it
	# ended.  A read that finds nothing comes after a release or a forget.
	my %forgets;
	push @{ $forgets{ $_->{name} } }, $_
	  foreach grep { $_->{op} eq 'forget' && $_->{out} eq 'ok' } @calls;
	my @stale;
	my $reads = 0;
	foreach my $r (grep { $_->{op} eq 'read' && $_->{out} =~ /^(ok|none)$/ } @calls)
	{
		$reads++;
		my $before;    # the newest grant committed before the read began
		my $newest = 0;    # the newest that may have begun before it ended
		foreach my $t (@{ $grants{ $r->{name} } // [] })
		{
			$before = $t if $t->{c1} <= $r->{c0} && (!$before || $t->{g} > $before->{g});
			$newest = $t->{g} if $t->{c0} <= $r->{c1} && $t->{g} > $newest;
		}
		if ($r->{out} eq 'ok')
		{
			my $t = $term{"$r->{name}/$r->{g}"};
			push @stale, "read $r->{name} [$r->{c0}, $r->{c1}]: generation $r->{g} of $r->{owner}, never granted so"
			  unless $t && $t->{owner} eq $r->{owner} && $t->{acq} == $r->{acq};
			push @stale, "read $r->{name} [$r->{c0}, $r->{c1}]: generation $r->{g}, but $before->{g} was granted before"
			  if $before && $r->{g} < $before->{g};
			push @stale, "read $r->{name} [$r->{c0}, $r->{c1}]: generation $r->{g}, granted only later"
			  if $r->{g} > $newest;
		}
		elsif ($before)
		{
			my $released = grep { $_->{g} >= $before->{g} && defined $_->{released} && $_->{released} < $r->{c1} }
			  @{ $grants{ $r->{name} } };
			my $forgot = grep { $_->{c1} > $before->{c0} && $_->{c0} < $r->{c1} } @{ $forgets{ $r->{name} } // [] };
			push @stale, "read $r->{name} [$r->{c0}, $r->{c1}]: nothing, but generation $before->{g} was granted before and neither released nor forgotten since"
			  unless $released || $forgot;
		}
	}
	is(scalar @stale, 0, "no read went back ($reads reads)")
	  or diag(first_few(@stale));

	# --- The maintenance ran, every kind of it, and succeeded -------------------
	my (%ran, %took);
	foreach my $m (@maint)
	{
		$ran{ $m->{kind} }++;
		$took{ $m->{kind} } += $m->{c1} - $m->{c0};
	}
	diag('maintenance, times run and mean ms: '
		  . join(', ', map { sprintf('%s %d, %.0f', $_, $ran{$_}, $took{$_} / $ran{$_} / 1000) } sort keys %ran));
	my %seen;
	foreach my $kind (grep { !$seen{$_}++ } map { $_->[0] } @cycle)
	{
		cmp_ok($ran{$kind} // 0, '>', 0, "$kind ran during the load");
	}
	my @failed = grep { !$_->{ok} } @maint;
	is(scalar @failed, 0, 'every maintenance command succeeded')
	  or diag(join("\n", map { "$_->{kind}: $_->{error}" } @failed));

	# Calls that changed a lease, begun and done while a command ran.
	my @writes = sort { $a->{c0} <=> $b->{c0} }
	  grep { ($_->{out} // '') eq 'ok' && $_->{op} =~ /^(acquire|wait|renew|release|forget)$/ } @calls;
	my %during;
	foreach my $m (@maint)
	{
		my ($lo, $hi) = (0, scalar @writes);
		while ($lo < $hi)
		{
			my $mid = int(($lo + $hi) / 2);
			if ($writes[$mid]{c0} < $m->{c0}) { $lo = $mid + 1 } else { $hi = $mid }
		}
		for (my $i = $lo; $i < @writes && $writes[$i]{c0} <= $m->{c1}; $i++)
		{
			$during{ $m->{kind} }++ if $writes[$i]{c1} <= $m->{c1};
		}
	}
	diag('leases changed while it ran: ' . join(', ', map { "$_ " . ($during{$_} // 0) } sort keys %ran));
	cmp_ok($during{pg_repack} // 0, '>', 0, 'leases changed while pg_repack ran') if $repack;
	cmp_ok(($during{'REINDEX INDEX CONCURRENTLY lease_pkey'} // 0)
		  + ($during{'REINDEX INDEX CONCURRENTLY lease_expires_at'} // 0),
		'>', 0, 'leases changed while REINDEX INDEX CONCURRENTLY ran')
	  if grep { $_->[0] =~ /^REINDEX INDEX CONCURRENTLY/ } @cycle;
	# (its visit may be counted a moment after the load: the statistics
	# are reported when it ends, and two TAP files run at a time)
	ok( $node->poll_query_until('postgres',
			"SELECT ($autovacuum_sql) > $autovacuums"),
		'autovacuum visited the table during the load too');

	# --- The table afterwards ---------------------------------------------------
	# Read twice: by a sequential scan and through the primary key.
	my %row;
	foreach my $line (split /\n/, $node->safe_psql('postgres', q{
		SET enable_indexscan = off; SET enable_bitmapscan = off; SET enable_indexonlyscan = off;
		SELECT name, generation, owner, state FROM hoplock_internal.lease}))
	{
		my ($name, $g, $owner, $state) = split /\|/, $line;
		push @{ $row{$name} }, { g => $g, owner => $owner, state => $state };
	}
	my @table;
	foreach my $name (sort keys %row)
	{
		push @table, "$name: " . scalar(@{ $row{$name} }) . ' rows' if @{ $row{$name} } != 1;
	}
	foreach my $name (@names)
	{
		my @t = sort { $a->{g} <=> $b->{g} } @{ $grants{$name} // [] };
		my $last = $t[-1];
		my $r = $row{$name} ? $row{$name}[0] : undef;
		if (!$last)
		{
			push @table, "$name: a row, but no term was ever granted" if $r;
		}
		elsif ($r)
		{
			push @table, "$name: the row says generation $r->{g} of $r->{owner}, the last granted was $last->{g} to $last->{owner}"
			  unless $r->{g} == $last->{g} && $r->{owner} eq $last->{owner};
		}
		else
		{
			push @table, "$name: no row, but generation $last->{g} was never forgotten"
			  unless grep { $_->{c1} > $last->{c0} } @{ $forgets{$name} // [] };
		}
	}
	my $by_index = $node->safe_psql('postgres', join('',
		q{SET enable_seqscan = off; SET enable_bitmapscan = off; },
		map { "SELECT '$_', (SELECT generation FROM hoplock_internal.lease WHERE name = '$_');" } @names));
	foreach my $line (split /\n/, $by_index)
	{
		my ($name, $g) = split /\|/, $line, -1;
		my $seq = $row{$name} ? $row{$name}[0]{g} : '';
		push @table, "$name: generation $g through the index, $seq in the heap" unless $g eq $seq;
	}
	is(scalar @table, 0,
		sprintf('the table holds one row per name, with the last term granted (%d rows)', scalar keys %row))
	  or diag(join("\n", @table));

	is($node->safe_psql('postgres', $filler_sql), $filler,
		'the 20,000 rows no client touched are as they were');

	my @indexes = split /\n/, $node->safe_psql('postgres', q{
		SELECT indexrelid::regclass || ' ' || indisvalid || ' ' || indisready
		  FROM pg_index WHERE indrelid = 'hoplock_internal.lease'::regclass ORDER BY 1});
	is_deeply(\@indexes,
		[ 'hoplock_internal.lease_by_keepalive true true', 'hoplock_internal.lease_expires_at true true',
		  'hoplock_internal.lease_pkey true true' ],
		'the three indexes are there and valid, and nothing was left behind');
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_trigger WHERE tgrelid = 'hoplock_internal.lease'::regclass}),
		'0', 'no trigger left behind by pg_repack') if $repack;
	my ($ret, $stdout, $stderr) = $node->psql('postgres', q{
		SELECT i.indexrelid::regclass, bt_index_check(i.indexrelid, heapallindexed => true),
		       bt_index_parent_check(i.indexrelid, heapallindexed => true)
		  FROM pg_index AS i WHERE i.indrelid = 'hoplock_internal.lease'::regclass ORDER BY i.indexrelid::regclass::text});
	is($ret, 0, 'amcheck: bt_index_check and bt_index_parent_check with heapallindexed pass on every index')
	  or diag($stderr);
	is($stdout, "hoplock_internal.lease_by_keepalive||\nhoplock_internal.lease_expires_at||\nhoplock_internal.lease_pkey||",
		'amcheck checked the three indexes');
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM verify_heapam('hoplock_internal.lease', check_toast => true)}),
		'0', 'amcheck: verify_heapam finds nothing wrong with the heap');

	# Every term granted has its "acquired" event in the log, which pg_repack
	# rebuilt meanwhile too (its trigger fires as each commit writes the log).
	my %acquired = map { $_ => 1 } split /\n/, $node->safe_psql('postgres',
		q{SELECT name || '/' || generation FROM hoplock_internal.event WHERE event = 'acquired'});
	my @no_event = grep { !$acquired{$_} } sort keys %term;
	is(scalar @no_event, 0, 'every term granted has its "acquired" event in the log')
	  or diag(join "\n", @no_event[ 0 .. ($#no_event < 9 ? $#no_event : 9) ]);
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM pg_trigger WHERE tgrelid = 'hoplock_internal.event'::regclass}),
		'0', 'no trigger left behind on the event log by pg_repack') if $repack;

	# Each name's next term has a greater generation than any granted (terms
	# left to lapse are waited out).
	my @next;
	foreach my $name (@names)
	{
		my $last = (sort { $a <=> $b } map { $_->{g} } @{ $grants{$name} // [] })[-1] // 0;
		my $g = $node->safe_psql('postgres',
			"SELECT generation FROM hoplock_wait('$name', 'after', '1 h', '10 s')");
		push @next, "$name: next generation '$g', the last granted was $last"
		  unless $g =~ /^\d+$/ && $g > $last;
	}
	is(scalar @next, 0, 'every name\'s next generation is greater than any granted')
	  or diag(join("\n", @next));

	ok($node->poll_query_until('postgres',
			q{SELECT state = 'sleeping' FROM hoplock_workers WHERE datname = 'postgres'}),
		'the expiry worker is still serving the database');
	diag($node->safe_psql('postgres',
		q{SELECT format('expiry worker: %s expiries announced', expiries_announced) FROM hoplock_workers WHERE datname = 'postgres'}));

	# The server log, from the start of the load to here: no crash, the worker
	# never restarted, and no error but the busy table -- or autovacuum giving
	# way to a stronger lock, or pg_repack's own lock wait giving up.
	my $log = substr(slurp_file($node->logfile), $log_start);
	$node->stop;
	unlike($log, qr/PANIC|TRAP:|terminated by signal|was terminated by|server process .* exited with exit code/,
		'no server process crashed');
	unlike($log, qr/hoplock worker for database "postgres" (started|stopped)/,
		'the expiry worker was never restarted');
	# (pg_repack waits for its ACCESS EXCLUSIVE lock with a statement
	# timeout of its own and tries again: that cancel is its, when the
	# statement it names is that LOCK TABLE.)
	my @lines = split /\n/, $log;
	my @log_errors = grep {
		my $i = $_;
		$lines[$i] =~ /\b(ERROR|WARNING|FATAL|PANIC):/
		  && $lines[$i] !~ /ERROR:  (could not lock table "hoplock_internal\.(lease|event)"|canceling autovacuum task|canceling statement due to lock timeout)$/
		  && !($lines[$i] =~ /ERROR:  canceling statement due to statement timeout$/
			&& ($lines[ $i + 1 ] // '') =~ /STATEMENT:  LOCK TABLE hoplock_internal\.(lease|event) IN ACCESS EXCLUSIVE MODE$/)
	} 0 .. $#lines;
	@log_errors = map { $lines[$_] } @log_errors;
	is(scalar @log_errors, 0, 'the server logged no error but the table being busy')
	  or diag(first_few(@log_errors));

}

1;
