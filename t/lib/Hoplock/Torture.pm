# Hoplock::Torture: the torture run of t/017_torture.pl (and of
# scripts/torture, which runs it longer).
#
# A primary with a streaming standby; at least 16 client processes
# (DBD::Pg, each its own process) contend for four names with ttls of
# 50-500 ms: they acquire or wait, renew (now and then too late), write
# through hoplock_fence and through tables fenced by the hoplock_fenced
# trigger under READ COMMITTED, REPEATABLE READ and SERIALIZABLE, release
# or hand their term to the first waiting candidate (hoplock_handoff),
# vanish, hang in a fenced transaction, some with session-bound terms, some
# with synchronous_commit = off.  A fifth name, "jobs", has three slots
# (slots => 3 on acquire and wait): up to three terms of it at once, each
# fenced on its own.  One client in five is a keeper: one owner holding up
# to three terms at once (of any name, "jobs" too, and of three shards
# only keepers take), kept alive by hoplock_renew_all alone -- now and
# then too late -- and keeping what it returns.  A listener process follows the primary and records every
# event.  Meanwhile faults, at random:
#
#   terminate    pg_terminate_backend of one to three clients' backends
#   kill9        SIGKILL of a client process (a new client takes its place)
#   crash        pg_ctl stop -m immediate of the primary, then start
#   worker_kill  SIGKILL of the expiry worker: a crash-restart
#   worker_term  SIGTERM of the expiry worker: the launcher starts another
#   clock        the primary restarted with its clock stepped 1-3 s forward
#                (libfaketime), past every ttl, then back to the real clock
#   vacuum_full  VACUUM FULL hoplock_internal.lease
#   reindex      REINDEX INDEX CONCURRENTLY hoplock_internal.lease_pkey
#   promote      the primary stopped (immediate) and its standby promoted:
#                a synchronous standby (usually after its WAL sender
#                stalled, SIGSTOP, for a moment before the primary failed),
#                or an asynchronous one stopped a moment before its primary
#                so that it misses the last grants.  Clients follow the new
#                primary; the old one is read once more (privately: its
#                history) and discarded, and a standby of the other kind is
#                made from the new primary.
#
# Every call, event and fault is written down with the client's monotonic
# clock; at the end Hoplock::Torture::Check judges the history.
#
# The clients and the listener are separate perl processes (exec'd, so
# that nothing of the test's own state, END blocks included, is in them);
# the run itself is driven from the TAP test, with PostgreSQL::Test::Cluster.
package Hoplock::Torture;

use strict;
use warnings;
use Cwd qw(abs_path);
use DBI;
use File::Basename qw(dirname);
use IO::Select;
use JSON::PP;
use List::Util qw(shuffle sum);
use POSIX ();
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);

our $LIB         = abs_path(dirname(__FILE__) . '/..');
our @NAMES       = qw(alpha beta gamma delta);
# a lease with slots: up to $SLOTS terms of it at once
our $SLOTTED     = 'jobs';
our $SLOTS       = 3;
our @ALL_NAMES   = (@NAMES, $SLOTTED);
# names only the keepers take: an owner's many terms
our @SHARDS      = qw(shard1 shard2 shard3);
our $LIBFAKETIME = '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1';
our $HUNG_HOLDER_TIMEOUT = 1;    # seconds (hoplock.hung_holder_timeout)

sub mono { return clock_gettime(CLOCK_MONOTONIC); }

sub nap
{
	my ($s) = @_;
	Time::HiRes::sleep($s) if $s > 0;
}

sub us { return "(extract(epoch FROM $_[0]) * 1000000)::bigint"; }

my $LEASE_COLS = 'r.generation, r.owner, ' . us('r.acquired_at') . ' AS acquired_at, '
  . us('r.expires_at') . ' AS expires_at, r.step_down, ' . us('clock_timestamp()') . ' AS server_time';
my %SQL = (
	acquire => "SELECT $LEASE_COLS FROM hoplock.hoplock_acquire(\$1, \$2, \$3::interval, \$4::boolean, min_hold => \$5::interval, slots => \$6::integer) AS r",
	wait => "SELECT $LEASE_COLS FROM hoplock.hoplock_wait(\$1, \$2, \$3::interval, \$4::interval, \$5::boolean, min_hold => \$6::interval, slots => \$7::integer) AS r",
	renew => "SELECT $LEASE_COLS FROM hoplock.hoplock_renew(\$1, \$2, \$3::interval, \$4::bigint) AS r",
	release => 'SELECT hoplock.hoplock_release($1, $2, $3::bigint) AS ok, ' . us('clock_timestamp()') . ' AS server_time',
	handoff => "SELECT $LEASE_COLS FROM hoplock.hoplock_handoff(\$1, \$2, \$3::bigint) AS r",
	proclaim => 'SELECT hoplock.hoplock_proclaim($1, $2, $3::bigint, $4) AS ok, ' . us('clock_timestamp()') . ' AS server_time',
	step_down => 'SELECT hoplock.hoplock_request_step_down($1) AS ok, ' . us('clock_timestamp()') . ' AS server_time',
	# the clock before the renewal (the lateral argument makes it read
	# first) and after it; one row with NULLs when nothing was renewed
	renew_all => 'SELECT ' . us('t0.t') . ' AS started_at, r.name, r.slot, r.generation, ' . us('r.expires_at')
	  . ' AS expires_at, ' . us('clock_timestamp()') . ' AS server_time'
	  . ' FROM (SELECT clock_timestamp() AS t OFFSET 0) AS t0'
	  . ' LEFT JOIN LATERAL hoplock.hoplock_renew_all($1, $2::interval + (t0.t - t0.t)) AS r ON true',
);

# the slots argument of a name
sub slots_of { return $_[0] eq $SLOTTED ? $SLOTS : 1; }

# ===========================================================================
# A client process: Hoplock::Torture::client_main(dir=..., id=..., ...)

sub client_main
{
	my %a = map { split(/=/, $_, 2) } @_;
	my $c = Hoplock::Torture::Client->new(%a);
	$c->run;
	POSIX::_exit(0);
}

sub listener_main
{
	my %a = map { split(/=/, $_, 2) } @_;
	Hoplock::Torture::Listener->new(%a)->run;
	POSIX::_exit(0);
}

package Hoplock::Torture::Conn;

# What clients and the listener share: the log, and a connection to
# whichever server the file "primary" names.

sub init
{
	my ($self, $logname) = @_;
	open(my $log, '>>', "$self->{dir}/$logname") or die "$logname: $!";
	$log->autoflush(1);
	$self->{log}  = $log;
	$self->{json} = JSON::PP->new->canonical;
	$self->{connection} = 0;
	$self->{stop} = 0;
	$self->{ppid} = getppid();
	$SIG{TERM} = sub { $self->{stop} = 1 };
	$SIG{PIPE} = 'IGNORE';
}

# Stop when told to, or when the run that started us is gone.
sub stopping
{
	my ($self) = @_;
	$self->{stop} = 1 if getppid() != $self->{ppid};
	return $self->{stop};
}

sub primary_port
{
	my ($self) = @_;
	open(my $fh, '<', "$self->{dir}/primary") or return undef;
	my $p = <$fh>;
	return undef unless defined $p;
	chomp $p;
	return $p;
}

sub connect_to_primary
{
	my ($self, $appname, @setup) = @_;
	return 1 if $self->{dbh};
	my $port = $self->primary_port or return 0;
	my $dbh = eval {
		DBI->connect(
			"dbi:Pg:host=$self->{host};port=$port;dbname=postgres;application_name=$appname",
			'torture', '',
			{ AutoCommit => 1, RaiseError => 1, PrintError => 0, PrintWarn => 0 });
	};
	return 0 unless $dbh;
	my $ok = eval { $dbh->do($_) for @setup; 1 };
	if (!$ok)
	{
		eval { $dbh->disconnect };
		return 0;
	}
	$self->{dbh}  = $dbh;
	$self->{port} = $port;
	$self->{connection}++;
	return 1;
}

# After a failed statement: its SQLSTATE, and whether the connection is
# gone (then the outcome of a statement that was running is unknown).
sub failure
{
	my ($self) = @_;
	my $dbh   = $self->{dbh};
	my $state = ($dbh && $dbh->state) || '';
	my $msg   = ($dbh && $dbh->errstr) || $@ || '';
	$msg =~ s/\s+/ /g;
	my $lost  = ($state eq '' || $state =~ /^(08|57P)/ || !$dbh || !$dbh->ping) ? 1 : 0;
	if ($lost)
	{
		eval { $dbh->disconnect } if $dbh;
		$self->{dbh} = undef;
	}
	return ($state || 'conn', $lost, substr($msg, 0, 160));
}

sub emit
{
	my ($self, $rec) = @_;
	print { $self->{log} } $self->{json}->encode($rec), "\n";
}

package Hoplock::Torture::Client;

our @ISA = ('Hoplock::Torture::Conn');

*mono     = \&Hoplock::Torture::mono;
*nap      = \&Hoplock::Torture::nap;
*slots_of = \&Hoplock::Torture::slots_of;

sub new
{
	my ($class, %a) = @_;
	my $self = bless {%a}, $class;
	srand($a{seed});
	$self->init("c$a{id}.log");
	$self->{synchronous_commit} = rand() < 0.4 ? 'off' : 'on';
	$self->{nr}      = rand() < 0.25 ? 1     : 0;
	# one client in five is a keeper: one owner with several terms, kept
	# alive by hoplock_renew_all alone
	if ($a{id} % 5 == 3)
	{
		$self->{keeper} = { terms => {}, ttl => 150 + int(rand(351)) };
	}
	$self->{owner_n} = 0;
	$self->new_owner;
	return $self;
}

# A client never reuses an owner after a call whose outcome it does not
# know: a term it was never told of is never extended by its next acquire.
sub new_owner
{
	my ($self) = @_;
	$self->{owner} = sprintf('c%d-%d-%d', $self->{id}, $$, ++$self->{owner_n});
}

sub record
{
	my ($self, $rec) = @_;
	$rec->{client}             = $self->{id} + 0;
	$rec->{port}               = $self->{port};
	$rec->{connection}         = $self->{connection};
	$rec->{synchronous_commit} = $self->{synchronous_commit};
	$self->emit($rec);
}

sub connect
{
	my ($self) = @_;
	return $self->connect_to_primary("torture-c$self->{id}",
		"SET synchronous_commit = $self->{synchronous_commit}",
		"SET statement_timeout = '5s'",
		($self->{nr} ? ('SET hoplock.notify_renewals = on') : ()));
}

# acquire, wait, renew, release: one statement, autocommit
sub lease_call
{
	my ($self, $k, $rec, @bind) = @_;
	$rec->{kind}      = $k;
	$rec->{called_at} = mono();
	my $port = $self->{port};
	my $row  = eval {
		my $sth = $self->{dbh}->prepare_cached($SQL{$k});
		$self->{dbh}->selectrow_hashref($sth, undef, @bind);
	};
	$rec->{returned_at} = mono();
	if ($row)
	{
		$rec->{server_time} = $row->{server_time};
		if ($k =~ /^(release|proclaim|step_down)$/)
		{
			$rec->{ok} = $row->{ok} ? 1 : 0;
		}
		elsif (defined $row->{generation})
		{
			$rec->{result} = {
				generation  => $row->{generation}, owner => $row->{owner},
				acquired_at => $row->{acquired_at}, expires_at => $row->{expires_at} };
			$rec->{step_down} = 1 if $row->{step_down};
		}
	}
	else
	{
		@$rec{qw(sqlstate unknown_outcome message)} = $self->failure;
	}
	$self->{port} = $port;
	$self->record($rec);
	return $rec;
}

my @ISO = ('READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE');

# A fenced transaction: hoplock_fence then a row in torture.fenced_rows
# ("fence"), a row in the name's trigger-fenced table ("trigger"), or
# both.  $o{hang}: stay idle inside it that long after the fence;
# $o{vanish}: exit inside it.
sub fenced
{
	my ($self, %o) = @_;
	my $L    = $o{term} // $self->{lead};
	my $iso  = $ISO[ int(rand(@ISO)) ];
	my $mode = (qw(fence trigger both))[ int(rand($o{hang} ? 2 : 3)) ];
	$mode = 'both' if $o{hang} && $mode eq 'trigger';
	# the transaction's rows carry its tag: ids and transaction ids that
	# were handed out but never made durable are handed out again after a
	# crash, tags are not
	my $tag  = "c$self->{id}." . ++$self->{txn_n};
	my $rec  = {
		kind => 'fenced', name => $L->{name}, generation => $L->{generation},
		isolation => $iso, fence_mode => $mode, ids => [], tag => $tag };
	$rec->{stale} = 1 if $o{stale};
	$rec->{hung}  = 1 if $o{hang};
	my $dbh   = $self->{dbh};
	my $port  = $self->{port};
	my $phase = 'begin';
	$rec->{called_at} = mono();
	my $ok = eval {
		$dbh->begin_work;
		$dbh->do("SET TRANSACTION ISOLATION LEVEL $iso");
		if ($mode ne 'trigger')
		{
			$phase = 'fence';
			$dbh->selectrow_array('SELECT hoplock.hoplock_fence($1, $2::bigint)', undef, $L->{name}, $L->{generation});
		}
		if ($o{vanish})
		{
			$self->record({
				kind => 'vanish', name => $L->{name}, generation => $L->{generation},
				called_at => mono(), returned_at => mono(), in_transaction => 1 });
			POSIX::_exit(0);
		}
		nap($o{hang}) if $o{hang};
		$phase = 'insert';
		if ($mode ne 'trigger')
		{
			push @{ $rec->{ids} }, $dbh->selectrow_array(
				'INSERT INTO torture.fenced_rows (name, generation, client, tag) VALUES ($1, $2, $3, $4) RETURNING id',
				undef, $L->{name}, $L->{generation}, $self->{id}, $tag);
		}
		if ($mode ne 'fence')
		{
			push @{ $rec->{ids} }, $dbh->selectrow_array(
				"INSERT INTO torture.trig_$L->{name} (generation, client, tag) VALUES (\$1, \$2, \$3) RETURNING id",
				undef, $L->{generation}, $self->{id}, $tag);
		}
		nap(rand($L->{ttl} / 4000)) if rand() < 0.2;
		$phase = 'commit';
		$dbh->commit;
		1;
	};
	$rec->{returned_at} = mono();
	if ($ok)
	{
		$rec->{ok} = 1;
	}
	else
	{
		@$rec{qw(sqlstate unknown_outcome message)} = $self->failure;
		# a transaction whose COMMIT was never sent did not commit
		$rec->{unknown_outcome} = 0 unless $phase eq 'commit';
		$rec->{phase} = $phase;
		if ($self->{dbh})
		{
			eval { $self->{dbh}->rollback };
		}
	}
	$self->{port} = $port;
	$self->record($rec);
	return $rec;
}

sub run
{
	my ($self) = @_;
	while (!$self->stopping)
	{
		if (!$self->connect)
		{
			nap(0.02 + rand(0.05));
			next;
		}
		if    ($self->{keeper}) { $self->keeper_step }
		elsif ($self->{lead})   { $self->lead_step }
		else                    { $self->follow_step }
	}
}

sub follow_step
{
	my ($self) = @_;
	my $n   = $ALL_NAMES[ int(rand(@ALL_NAMES)) ];
	my $ttl = 50 + int(rand(451));
	my $sb  = rand() < 0.2 ? 1 : 0;
	# now and then a hold: released early, the name stays kept from others
	my $hold = rand() < 0.3 ? int($ttl / 2 + rand($ttl / 2)) : undef;
	my $rec = { name => $n, owner => $self->{owner}, ttl => $ttl, session_bound => $sb, min_hold => $hold, slots => slots_of($n) };
	my $hold_arg = defined $hold ? "$hold milliseconds" : undef;
	if (rand() < 0.5)
	{
		$self->lease_call('acquire', $rec, $n, $self->{owner}, "$ttl milliseconds", $sb ? 'true' : 'false', $hold_arg, slots_of($n));
	}
	else
	{
		$rec->{timeout} = 50 + int(rand(750));
		$self->lease_call('wait', $rec, $n, $self->{owner}, "$ttl milliseconds",
			"$rec->{timeout} milliseconds", $sb ? 'true' : 'false', $hold_arg, slots_of($n));
	}
	if ($rec->{result})
	{
		$self->{lead} = {
			name => $n, generation => $rec->{result}{generation}, ttl => $ttl,
			session_bound => $sb, last => $rec->{called_at}, min_hold => $hold,
			granted => $rec->{called_at} };
	}
	elsif ($rec->{unknown_outcome})
	{
		$self->new_owner;
	}
	else
	{
		nap(rand(0.03));
	}
}

sub lead_step
{
	my ($self) = @_;
	my $L = $self->{lead};
	my $x = rand();
	if ($x < 0.002)
	{
		# vanish: just exit, holding the lease
		$self->record({
			kind => 'vanish', name => $L->{name}, generation => $L->{generation},
			called_at => mono(), returned_at => mono() });
		POSIX::_exit(0);
	}
	if ($x < 0.004)
	{
		$self->fenced(vanish => 1);
		return;
	}
	if ($x < 0.009)
	{
		# a hung holder: the fence stays open past the term's end and the
		# hung-holder timeout
		my $rec = $self->fenced(hang => $L->{ttl} / 1000 + $HUNG_HOLDER_TIMEOUT + 0.3 + rand(0.5));
		$self->{lead} = undef if $rec->{sqlstate};
		return;
	}
	if ($x < 0.03)
	{
		# publish a value for the term, or ask the leader of another name
		# to step down (an operator's request: the torture's role may)
		if (rand() < 0.5)
		{
			my $rec = { name => $L->{name}, owner => $self->{owner}, generation => $L->{generation} };
			$self->lease_call('proclaim', $rec, $L->{name}, $self->{owner}, $L->{generation}, "c$self->{id}:" . int(rand(1000)));
			$self->new_owner if $rec->{unknown_outcome};
		}
		else
		{
			my $n = $ALL_NAMES[ int(rand(@ALL_NAMES)) ];
			my $rec = { name => $n };
			$self->lease_call('step_down', $rec, $n);
			$self->new_owner if $rec->{unknown_outcome};
		}
		return;
	}
	if ($L->{min_hold} && mono() < $L->{granted} + $L->{min_hold} / 1000 && rand() < 0.2)
	{
		# released within its hold: the name stays kept from other owners
		my $rec = { name => $L->{name}, owner => $self->{owner}, generation => $L->{generation} };
		$self->lease_call('release', $rec, $L->{name}, $self->{owner}, $L->{generation});
		$self->new_owner if $rec->{unknown_outcome};
		$self->{lead} = undef;
		return;
	}
	if ($x < 0.07 || $L->{step_down})
	{
		# hand over to the first waiting candidate (always, when asked to
		# step down), or release; with no candidate the handoff returns
		# NULL and the term goes on
		my $k = ($L->{step_down} || rand() < 0.5) ? 'handoff' : 'release';
		my $rec = { name => $L->{name}, owner => $self->{owner}, generation => $L->{generation} };
		$self->lease_call($k, $rec, $L->{name}, $self->{owner}, $L->{generation});
		$self->new_owner if $rec->{unknown_outcome};
		if ($k eq 'handoff' && !$rec->{sqlstate} && !$rec->{result})
		{
			# nobody waits: lead on (a request to step down is seen again
			# at the next renewal)
			$L->{step_down} = 0;
			return;
		}
		$self->{lead} = undef;
		return;
	}
	if (rand() < 0.7)
	{
		my $rec = $self->fenced;
		if (($rec->{sqlstate} // '') eq '55P03')
		{
			$self->{lead} = undef;
			return;
		}
		return unless $self->{dbh};
	}
	my $late = rand() < 0.07;
	my $due  = $L->{last} + ($late ? $L->{ttl} / 1000 * (1.05 + rand(1)) : $L->{ttl} / 3000);
	nap($due - mono());
	return if $self->{stop} || !$self->{dbh};
	if ($late && rand() < 0.6)
	{
		# the stale leader writes before it learns that it lost
		my $rec = $self->fenced(stale => 1);
		if (($rec->{sqlstate} // '') eq '55P03')
		{
			$self->{lead} = undef;
			return;
		}
		return unless $self->{dbh};
	}
	my $rec = { name => $L->{name}, owner => $self->{owner}, ttl => $L->{ttl}, generation => $L->{generation} };
	$rec->{late} = 1 if $late;
	$self->lease_call('renew', $rec, $L->{name}, $self->{owner}, "$L->{ttl} milliseconds", $L->{generation});
	if ($rec->{result})
	{
		$L->{last} = $rec->{called_at};
		$L->{step_down} = 1 if $rec->{step_down};
	}
	elsif (!$rec->{sqlstate})
	{
		$self->{lead} = undef;
	}
}

# A keeper: one owner, up to three terms (names, the slotted one too, and
# shards that only keepers take),
# renewed by hoplock_renew_all alone, now and then too late; between
# renewals it takes a term, takes a name it holds again, releases one,
# or writes fenced under one.  What hoplock_renew_all returns is what it
# keeps.
sub keeper_step
{
	my ($self) = @_;
	my $K   = $self->{keeper};
	my $T   = $K->{terms};
	if (defined $K->{due} && mono() >= $K->{due})
	{
		if ($K->{late} && %$T && rand() < 0.5)
		{
			# the stale keeper writes before it learns that it lost (from
			# hoplock_renew_all, next)
			my ($k) = (sort keys %$T)[ int(rand(keys %$T)) ];
			$self->fenced(term => $T->{$k}, stale => 1);
			return unless $self->{dbh};
		}
		$self->renew_all_call;
		return;
	}
	my @held = sort keys %$T;
	my $x = rand();
	if ($x < 0.3 && @held < 3)
	{
		my @free = grep { !$T->{$_} } @ALL_NAMES, @SHARDS;
		$self->keeper_take($free[ int(rand(@free)) ]);
	}
	elsif ($x < 0.38 && @held)
	{
		# a name it holds, taken again: the same term, extended
		$self->keeper_take($held[ int(rand(@held)) ]);
	}
	elsif ($x < 0.45 && @held)
	{
		my $L = delete $T->{ $held[ int(rand(@held)) ] };
		my $rec = { name => $L->{name}, owner => $self->{owner}, generation => $L->{generation} };
		$self->lease_call('release', $rec, $L->{name}, $self->{owner}, $L->{generation});
		$self->keeper_abandon if $rec->{unknown_outcome};
	}
	elsif ($x < 0.85 && @held)
	{
		my $k = $held[ int(rand(@held)) ];
		my $rec = $self->fenced(term => $T->{$k});
		delete $T->{$k} if ($rec->{sqlstate} // '') eq '55P03';
	}
	my $left = defined $K->{due} ? $K->{due} - mono() : 0.03;
	nap(List::Util::min($left, rand(0.03)));
}

# acquire or wait for a name, as the keeper's owner
sub keeper_take
{
	my ($self, $n) = @_;
	my $K   = $self->{keeper};
	my $ttl = $K->{ttl};
	my $sb  = rand() < 0.15 ? 1 : 0;
	my $rec = { name => $n, owner => $self->{owner}, ttl => $ttl, session_bound => $sb, slots => slots_of($n), keeper => 1 };
	if (rand() < 0.6)
	{
		$self->lease_call('acquire', $rec, $n, $self->{owner}, "$ttl milliseconds", $sb ? 'true' : 'false', undef, slots_of($n));
	}
	else
	{
		$rec->{timeout} = 20 + int(rand(60));
		$self->lease_call('wait', $rec, $n, $self->{owner}, "$ttl milliseconds",
			"$rec->{timeout} milliseconds", $sb ? 'true' : 'false', undef, slots_of($n));
	}
	if ($rec->{result})
	{
		$K->{terms}{$n} = { name => $n, generation => $rec->{result}{generation}, ttl => $ttl };
		$self->keeper_due($rec->{called_at}) unless defined $K->{due};
	}
	elsif ($rec->{unknown_outcome})
	{
		$self->keeper_abandon;
	}
	else
	{
		delete $K->{terms}{$n};
	}
}

# after a call of unknown outcome: its terms are left to lapse, and a
# new owner begins afresh
sub keeper_abandon
{
	my ($self) = @_;
	$self->{keeper}{terms} = {};
	$self->{keeper}{due}   = undef;
	$self->new_owner;
}

# the next renewal: a third of the ttl after $t, or now and then too late
sub keeper_due
{
	my ($self, $t) = @_;
	my $K = $self->{keeper};
	$K->{late} = rand() < 0.08 ? 1 : 0;
	$K->{due} = $t + ($K->{late} ? $K->{ttl} / 1000 * (1.05 + rand(1)) : $K->{ttl} / 3000);
}

sub renew_all_call
{
	my ($self) = @_;
	my $K   = $self->{keeper};
	my $rec = {
		kind => 'renew_all', owner => $self->{owner}, ttl => $K->{ttl},
		held => [ map { "$_->{name}/$_->{generation}" } sort { $a->{name} cmp $b->{name} } values %{ $K->{terms} } ] };
	$rec->{late} = 1 if $K->{late};
	$rec->{called_at} = mono();
	my $port = $self->{port};
	my $rows = eval {
		my $sth = $self->{dbh}->prepare_cached($SQL{renew_all});
		$self->{dbh}->selectall_arrayref($sth, { Slice => {} }, $self->{owner}, "$K->{ttl} milliseconds");
	};
	$rec->{returned_at} = mono();
	if ($rows && @$rows)
	{
		$rec->{started_at}  = $rows->[0]{started_at};
		$rec->{server_time} = $rows->[0]{server_time};
		$rec->{rows} = [
			map { { name => $_->{name}, slot => $_->{slot}, generation => $_->{generation}, expires_at => $_->{expires_at} } }
			grep { defined $_->{generation} } @$rows ];
	}
	else
	{
		@$rec{qw(sqlstate unknown_outcome message)} = $self->failure;
	}
	$self->{port} = $port;
	$self->record($rec);
	if ($rec->{rows})
	{
		# what it renewed is what it keeps
		my %got = map { ("$_->{name}\0$_->{generation}" => 1) } @{ $rec->{rows} };
		for my $n (keys %{ $K->{terms} })
		{
			delete $K->{terms}{$n} unless $got{"$n\0$K->{terms}{$n}{generation}"};
		}
		$self->keeper_due($rec->{called_at});
		$K->{due} = undef unless %{ $K->{terms} };
	}
	else
	{
		# (55P03, or the connection lost: the next call tells) soon again
		$K->{due} = mono() + 0.01;
	}
}

package Hoplock::Torture::Listener;

our @ISA = ('Hoplock::Torture::Conn');

*mono = \&Hoplock::Torture::mono;
*nap  = \&Hoplock::Torture::nap;

sub new
{
	my ($class, %a) = @_;
	my $self = bless {%a}, $class;
	$self->init("listener$a{listener}.log");
	$self->{last_seq} = 0;
	return $self;
}

sub note
{
	my ($self, $src, $e) = @_;
	$self->emit({
		source => $src, listener => $self->{listener} + 0, connection => $self->{connection},
		port => $self->{port}, seq => $e->{seq}, event => $e->{event}, name => $e->{name},
		slot => $e->{slot}, owner => $e->{owner}, generation => $e->{generation}, received_at => mono() });
	$self->{last_seq} = $e->{seq} if $e->{seq} > $self->{last_seq};
}

sub run
{
	my ($self) = @_;
	while (!$self->stopping)
	{
		if (!$self->connect_to_primary("torture-listener", 'LISTEN hoplock'))
		{
			nap(0.02);
			next;
		}
		my $dbh = $self->{dbh};
		# what was missed meanwhile (also sent again below as notifications
		# of transactions that commit after the LISTEN: the same numbers)
		my $ok = eval {
			my $rows = $dbh->selectall_arrayref(
				'SELECT seq, event, name, owner, generation, slot FROM hoplock.hoplock_events($1) ORDER BY seq',
				{ Slice => {} }, $self->{last_seq});
			$self->note('catchup', $_) for @$rows;
			1;
		};
		my $json   = JSON::PP->new;
		my $select = IO::Select->new($dbh->{pg_socket});
		my $last_ping = mono();
		while ($ok && !$self->stopping)
		{
			my @ready = $select->can_read(0.2);
			my $got = 0;
			$ok = eval {
				while (my $n = $dbh->pg_notifies)
				{
					$self->note('notify', $json->decode($n->[2]));
					$got++;
				}
				1;
			};
			last unless $ok;
			if ((@ready && !$got) || mono() - $last_ping > 1)
			{
				$last_ping = mono();
				$ok = $dbh->ping ? 1 : 0;
			}
		}
		eval { $dbh->disconnect };
		$self->{dbh} = undef;
		nap(0.02) unless $self->{stop};
	}
}

# ===========================================================================
# The run

package Hoplock::Torture;

# Runs in progress: a test that dies leaves none of their processes behind.
my @RUNS;
END
{
	kill 'KILL', keys %{ $_->{children} } for @RUNS;
}

sub new
{
	my ($class, %o) = @_;
	require PostgreSQL::Test::Cluster;
	require PostgreSQL::Test::Utils;
	my $self = bless {
		seconds => $o{seconds} // 30,
		clients => $o{clients} // 16,
		seed    => $o{seed} // (time() ^ $$),
		dir     => $o{dir},
		faults  => [],
		nodes   => {},
		node_n  => 0,
		clock_changes => [],
		children => {},
		client_n => 0,
		listener_n => 0,
		errors  => [],
	}, $class;
	push @RUNS, $self;
	srand($self->{seed});
	mkdir $self->{dir};
	open(my $fl, '>>', "$self->{dir}/faults.log") or die;
	$fl->autoflush(1);
	$self->{fault_log} = $fl;
	return $self;
}

sub say
{
	my ($self, $msg) = @_;
	printf "# [%7.2f] %s\n", mono() - ($self->{t_start} // mono()), $msg;
}

sub new_node
{
	my ($self) = @_;
	my $node = PostgreSQL::Test::Cluster->new('torture' . ++$self->{node_n});
	push @{ $self->{all_nodes} }, $node;
	return $node;
}

sub set_primary
{
	my ($self, $node) = @_;
	$self->{primary} = $node;
	$self->{nodes}{ $node->port } //= { name => $node->name };
	$self->{nodes}{ $node->port }{fate} = 'final';
	my $f = "$self->{dir}/primary";
	open(my $fh, '>', "$f.tmp") or die;
	print $fh $node->port, "\n";
	close $fh;
	rename("$f.tmp", $f) or die;
}

sub setup
{
	my ($self) = @_;
	my $p = $self->new_node;
	$p->init(allows_streaming => 1);
	$p->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
restart_after_crash = on
log_statement = none
log_min_error_statement = panic
max_connections = 60
shared_buffers = 16MB
track_commit_timestamp = on
synchronous_standby_names = ''
hoplock.history_size = 1000000
hoplock.released_retention = 0
hoplock.hung_holder_timeout = '${HUNG_HOLDER_TIMEOUT}s'
hoplock.log_events = on
});
	$p->start;
	my $tables = join('', map { qq{
		CREATE TABLE torture.trig_$_ (
			id bigint PRIMARY KEY DEFAULT nextval('torture.row_id'),
			generation bigint NOT NULL,
			client integer NOT NULL,
			tag text NOT NULL,
			txid bigint NOT NULL DEFAULT txid_current(),
			written_at timestamptz NOT NULL DEFAULT clock_timestamp());
		CREATE TRIGGER fenced BEFORE INSERT OR UPDATE OR DELETE ON torture.trig_$_
			FOR EACH ROW EXECUTE FUNCTION hoplock.hoplock_fenced('$_', 'generation');
	} } @ALL_NAMES, @SHARDS);
	$p->safe_psql('postgres', qq{
		CREATE SCHEMA hoplock;
		CREATE EXTENSION hoplock SCHEMA hoplock;
		CREATE EXTENSION amcheck;
		CREATE ROLE torture LOGIN;
		GRANT USAGE ON SCHEMA hoplock TO torture;
		-- the clients play the operator too, asking leaders to step down
		GRANT EXECUTE ON FUNCTION hoplock.hoplock_request_step_down(text, text) TO torture;
		CREATE SCHEMA torture;
		CREATE SEQUENCE torture.row_id;
		CREATE TABLE torture.fenced_rows (
			id bigint PRIMARY KEY DEFAULT nextval('torture.row_id'),
			name text NOT NULL,
			generation bigint NOT NULL,
			client integer NOT NULL,
			tag text NOT NULL,
			txid bigint NOT NULL DEFAULT txid_current(),
			written_at timestamptz NOT NULL DEFAULT clock_timestamp());
		$tables
		GRANT USAGE ON SCHEMA torture TO torture;
		GRANT SELECT, INSERT ON ALL TABLES IN SCHEMA torture TO torture;
		GRANT USAGE ON SEQUENCE torture.row_id TO torture;
	});
	$self->set_primary($p);
}

# A new standby of the primary; "sync" makes it the synchronous standby.
sub add_standby
{
	my ($self, $kind) = @_;
	my $p     = $self->{primary};
	my $bname = 'b' . $self->{node_n};
	$p->backup($bname);
	my $s = $self->new_node;
	$s->init_from_backup($p, $bname, has_streaming => 1);
	$s->append_conf('postgresql.conf', "synchronous_standby_names = ''");
	$s->start;
	$p->wait_for_catchup($s);
	if ($kind eq 'sync')
	{
		$p->append_conf('postgresql.conf', "synchronous_standby_names = '" . $s->name . "'");
		$p->reload;
		$p->poll_query_until('postgres',
			"SELECT EXISTS (SELECT FROM pg_stat_replication WHERE application_name = '"
			  . $s->name . "' AND sync_state = 'sync')")
		  or die 'the standby did not become synchronous';
	}
	$self->{standby}      = $s;
	$self->{standby_kind} = $kind;
	$self->say("standby " . $s->name . " ($kind) of " . $p->name . ' ready');
}

# ---------------------------------------------------------------------------
# Children

sub spawn
{
	my ($self, $what, %args) = @_;
	my $pid = fork();
	die "fork: $!" unless defined $pid;
	if ($pid == 0)
	{
		my $tag = $what eq 'client' ? "c$args{id}" : "listener$args{listener}";
		open(STDOUT, '>>', "$self->{dir}/$tag.out");
		open(STDERR, '>>', "$self->{dir}/$tag.out");
		exec($^X, "-I$LIB", '-MHoplock::Torture', '-e', "Hoplock::Torture::${what}_main(\@ARGV)",
			map { "$_=$args{$_}" } sort keys %args)
		  or POSIX::_exit(127);
	}
	$self->{children}{$pid} = { what => $what, %args };
	return $pid;
}

sub spawn_client
{
	my ($self) = @_;
	my $id = ++$self->{client_n};
	return $self->spawn('client', id => $id, dir => $self->{dir},
		host => $self->{primary}->host, seed => $self->{seed} * 1000 + $id);
}

sub spawn_listener
{
	my ($self) = @_;
	return $self->spawn('listener', listener => ++$self->{listener_n}, dir => $self->{dir},
		host => $self->{primary}->host);
}

# Reap children that ended; put new ones in their place unless stopping.
sub tend
{
	my ($self) = @_;
	while ((my $pid = waitpid(-1, POSIX::WNOHANG())) > 0)
	{
		my $child = delete $self->{children}{$pid} or next;
		next if $self->{stopping};
		if ($child->{what} eq 'client') { $self->spawn_client }
		else                            { $self->spawn_listener }
	}
}

sub wait_a_while
{
	my ($self, $s) = @_;
	my $until = mono() + $s;
	while (mono() < $until)
	{
		$self->tend;
		nap(List::Util::min(0.05, $until - mono()));
	}
	$self->tend;
}

sub client_pids
{
	my ($self) = @_;
	return grep { $self->{children}{$_}{what} eq 'client' } keys %{ $self->{children} };
}

# ---------------------------------------------------------------------------
# Faults

sub fault_log
{
	my ($self, $rec) = @_;
	push @{ $self->{faults} }, $rec;
	print { $self->{fault_log} } JSON::PP->new->canonical->encode($rec), "\n";
	$self->say("$rec->{kind}" . ($rec->{detail} ? ": $rec->{detail}" : ''));
}

sub wait_up
{
	my ($self, $node) = @_;
	# Not poll_query_until: PostgreSQL 18's dies on the broken pipe to a
	# psql that the restarting server turned away.
	my $deadline = mono() + 180;
	while (mono() < $deadline)
	{
		my $up = eval { ($node->psql('postgres', 'SELECT NOT pg_is_in_recovery()'))[1] };
		return if defined $up && $up eq 't';
		nap(0.1);
	}
	die $node->name . ' did not come back';
}

# Stop and start the primary, its clock $offset from the real one
# ("+2s"), or the real clock.
sub restart_primary
{
	my ($self, $mode, $offset) = @_;
	my $p = $self->{primary};
	$p->stop($mode);
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	if (defined $offset)
	{
		local $ENV{LD_PRELOAD} = $LIBFAKETIME;
		local $ENV{FAKETIME}   = $offset;
		$p->start;
	}
	else
	{
		delete local $ENV{LD_PRELOAD};
		delete local $ENV{FAKETIME};
		$p->start;
	}
}

sub fault
{
	my ($self, $k) = @_;
	my $p   = $self->{primary};
	my $rec = { kind => $k, started_at => mono(), port => $p->port };
	if ($k eq 'terminate')
	{
		my $n = 1 + int(rand(3));
		$rec->{count} = $p->safe_psql('postgres', qq{
			SELECT count(pg_terminate_backend(pid)) FROM (
				SELECT pid FROM pg_stat_activity WHERE application_name LIKE 'torture-c%'
				 ORDER BY random() LIMIT $n) AS s});
		$rec->{detail} = "$rec->{count} backends";
	}
	elsif ($k eq 'kill9')
	{
		my @pids = $self->client_pids or return;
		my $pid = $pids[ int(rand(@pids)) ];
		kill 'KILL', $pid;
		$rec->{detail} = "client c$self->{children}{$pid}{id} (pid $pid)";
		$rec->{count} = 1;
	}
	elsif ($k eq 'crash')
	{
		$p->stop('immediate');
		nap(rand(0.5));
		$self->restart_primary_start;
		$rec->{detail} = $p->name;
	}
	elsif ($k eq 'worker_kill' || $k eq 'worker_term')
	{
		my $pid = $p->safe_psql('postgres',
			q{SELECT coalesce(max(pid), 0) FROM hoplock.hoplock_workers WHERE datname = 'postgres'});
		return unless $pid;
		kill($k eq 'worker_kill' ? 'KILL' : 'TERM', $pid);
		$rec->{detail} = "pid $pid";
		$self->wait_up($p) if $k eq 'worker_kill';
	}
	elsif ($k eq 'clock')
	{
		my $step = 1 + int(rand(3));
		$rec->{step} = $step;
		my $t = mono();
		$self->restart_primary(rand() < 0.5 ? 'fast' : 'immediate', "+${step}s");
		push @{ $self->{clock_changes} }, [ $t, mono() ];
		$self->say("clock of " . $p->name . " stepped $step s forward");
		$self->wait_a_while(1.5 + rand(2));
		$t = mono();
		$self->restart_primary('fast', undef);
		push @{ $self->{clock_changes} }, [ $t, mono() ];
		$rec->{detail} = "+$step s, then back";
	}
	elsif ($k eq 'vacuum_full' || $k eq 'reindex')
	{
		my $sql = $k eq 'reindex'
		  ? 'REINDEX INDEX CONCURRENTLY hoplock_internal.lease_pkey'
		  : 'VACUUM FULL hoplock_internal.lease';
		my ($ret, $out, $err) = $p->psql('postgres', "SET lock_timeout = '2s';\n$sql;");
		$rec->{ok} = $ret == 0 ? 1 : 0;
		$rec->{detail} = $ret == 0 ? 'done' : "failed: $err";
	}
	elsif ($k eq 'promote')
	{
		return $self->promote($rec);
	}
	$rec->{ended_at} = mono();
	$self->fault_log($rec);
	return 1;
}

sub restart_primary_start
{
	my ($self) = @_;
	delete local $ENV{LD_PRELOAD};
	delete local $ENV{FAKETIME};
	$self->{primary}->start;
}

sub promote
{
	my ($self, $rec) = @_;
	my ($p, $s, $kind) = @$self{qw(primary standby standby_kind)};
	return 0 unless $s;
	my $pn = $self->{nodes}{ $p->port };
	$rec->{kind}      = "promote_$kind";
	$rec->{from_port} = $p->port;
	$rec->{to_port}   = $s->port;
	my $stalled;
	if ($kind eq 'async')
	{
		# the standby misses what the primary does in its last moments
		$s->stop('immediate');
		$pn->{standby_stop_t} = mono();
		$self->wait_a_while(0.3 + rand(0.7));
	}
	elsif (!$self->{sync_promotions}++ || rand() < 0.5)
	{
		# the link to the synchronous standby stalls a moment before the
		# primary fails: commits that wait for the standby wait, and what
		# the primary sends meanwhile never arrives (its WAL sender is
		# stopped, then killed with the primary)
		$stalled = $p->safe_psql('postgres',
			"SELECT pid FROM pg_stat_replication WHERE application_name = '" . $s->name . "'");
		if ($stalled)
		{
			kill 'STOP', $stalled;
			$self->wait_a_while(0.3 + rand(0.5));
			$rec->{stall} = 1;
		}
		else
		{
			$self->say('no WAL sender to stall on ' . $p->name);
		}
	}
	$pn->{stop_t} = mono();
	$pn->{standby_stop_t} //= $pn->{stop_t};
	kill 'KILL', $stalled if $stalled;
	$p->stop('immediate');
	$pn->{fate} = $kind;
	$s->start if $kind eq 'async';
	$s->promote;
	$self->wait_up($s);
	$self->set_primary($s);
	$self->{standby} = undef;
	$rec->{ended_at} = mono();
	$rec->{detail} = $p->name . ' -> ' . $s->name . ($rec->{stall} ? ', the standby stalled before' : '');
	$self->fault_log($rec);
	$self->read_old($p);
	if ($self->{end} - mono() > 12)
	{
		$self->add_standby($kind eq 'sync' ? 'async' : 'sync');
	}
	return 1;
}

# The replaced primary's history: started once more, where no client can
# reach it, with no expiry worker.
sub read_old
{
	my ($self, $node) = @_;
	my $sock = PostgreSQL::Test::Utils::tempdir_short();
	my $port = PostgreSQL::Test::Cluster::get_free_port();
	my $opts = "-p $port -c unix_socket_directories=$sock -c hoplock.databases=none_at_all"
	  . " -c synchronous_standby_names= -c restart_after_crash=off";
	if (PostgreSQL::Test::Utils::system_log('pg_ctl', '-w', '-D', $node->data_dir, '-l',
			$node->logfile, '-o', $opts, 'start') != 0)
	{
		push @{ $self->{errors} }, 'could not start the replaced primary ' . $node->name;
		return;
	}
	my ($out, $err) = PostgreSQL::Test::Utils::run_command([
		'psql', '-X', '-At', '-h', $sock, '-p', $port, '-d', 'postgres', '-c',
		'COPY (' . history_sql() . ') TO STDOUT' ]);
	PostgreSQL::Test::Utils::system_log('pg_ctl', '-D', $node->data_dir, '-m', 'immediate', 'stop');
	if ($err)
	{
		push @{ $self->{errors} }, 'reading the replaced primary ' . $node->name . ": $err";
		return;
	}
	$self->{old}{ $node->port } = { history => parse_history($out) };
}

sub history_sql
{
	return 'SELECT name, generation, owner, ' . us('acquired_at') . ', ' . us('ended_at')
	  . ', how, slot FROM hoplock.hoplock_history';
}

sub parse_rows
{
	my ($text, @cols) = @_;
	my @rows;
	for my $line (split /\n/, $text // '')
	{
		my @f = split /\t/, $line, -1;
		my %r;
		@r{@cols} = map { $_ eq '\\N' ? undef : $_ } @f;
		push @rows, \%r;
	}
	return \@rows;
}

sub parse_history { return parse_rows($_[0], qw(name generation owner acquired_at ended_at how slot)); }

# ---------------------------------------------------------------------------
# The run itself

sub pick_fault
{
	my ($self) = @_;
	my %w = (terminate => 14, kill9 => 14, crash => 7, worker_kill => 6, worker_term => 6,
		clock => 6, vacuum_full => 8, reindex => 8, promote => 5);
	my $total = sum(values %w);
	my $x = rand($total);
	for my $k (sort keys %w)
	{
		return $k if ($x -= $w{$k}) < 0;
	}
	return 'terminate';
}

sub run
{
	my ($self) = @_;
	$self->{t_start} = mono();
	$self->say("seed $self->{seed}, $self->{clients} clients, $self->{seconds} s");
	$self->setup;
	# the first standby: synchronous or not, the next one the other kind
	$self->add_standby(rand() < 0.5 ? 'sync' : 'async');
	$self->spawn_listener;
	$self->spawn_client for 1 .. $self->{clients};
	$self->{end} = mono() + $self->{seconds};

	# a short run meets every fault once, promotions a third and two thirds in
	my @plan;
	if ($self->{seconds} < 120)
	{
		my @others = shuffle(qw(terminate kill9 crash worker_kill worker_term clock vacuum_full reindex));
		@plan = (@others[ 0 .. 1 ], 'promote', @others[ 2 .. 4 ], 'promote', @others[ 5 .. 7 ]);
	}
	my $pace = $self->{seconds} < 120 ? [ 0.6, 1.2 ] : [ 1, 3 ];
	$self->wait_a_while(1);
	while (mono() < $self->{end} - 1)
	{
		if (!$self->primary_alive)
		{
			push @{ $self->{errors} }, 'the postmaster of ' . $self->{primary}->name . ' died by itself';
			last;
		}
		my $k = shift(@plan) // $self->pick_fault;
		next if $k eq 'promote' && (!$self->{standby} || $self->{end} - mono() < 6);
		my $ok = eval { $self->fault($k); 1 };
		if (!$ok)
		{
			push @{ $self->{errors} }, "fault $k: $@";
			$self->say("fault $k failed: $@");
			last;
		}
		$self->wait_a_while($pace->[0] + rand($pace->[1] - $pace->[0]));
	}
	if (!eval { $self->finish; 1 })
	{
		push @{ $self->{errors} }, "the end of the run: $@";
		$self->{final} = undef;
		kill 'KILL', keys %{ $self->{children} };
	}
}

sub primary_alive
{
	my ($self) = @_;
	my $pid = $self->{primary}{_pid};
	return defined $pid && kill(0, $pid);
}

sub finish
{
	my ($self) = @_;
	my $p = $self->{primary};
	$self->{stopping} = 1;
	$self->say('stopping the clients');
	my @clients = $self->client_pids;
	kill 'TERM', @clients;
	my $until = mono() + 8;
	while ($self->client_pids && mono() < $until)
	{
		$self->tend;
		nap(0.05);
	}
	kill 'KILL', $self->client_pids;
	$self->tend;

	# every term lapses and is announced
	die 'the postmaster of ' . $p->name . " died by itself\n" unless $self->primary_alive;
	$self->wait_up($p);
	my $quiet = 0;
	$until = mono() + 20;
	while (!$quiet && mono() < $until)
	{
		$quiet = $p->safe_psql('postgres',
			q{SELECT count(*) = 0 FROM hoplock_internal.lease WHERE state = 'h'}) eq 't';
		nap(0.2) unless $quiet;
	}
	$self->say('all terms ended' . ($quiet ? '' : ' -- NOT all, after the wait'));
	my $unannounced = $p->safe_psql('postgres', q{
		SELECT name || ' g=' || generation || ' expired at ' || expires_at
		  FROM hoplock_internal.lease
		 WHERE state = 'h' AND expires_at < clock_timestamp() - interval '5 s'});
	$self->wait_a_while(1);
	my @listeners = grep { $self->{children}{$_}{what} eq 'listener' } keys %{ $self->{children} };
	kill 'TERM', @listeners;
	$until = mono() + 5;
	while (%{ $self->{children} } && mono() < $until)
	{
		$self->tend;
		nap(0.05);
	}
	kill 'KILL', keys %{ $self->{children} };
	$self->tend;

	# what the surviving server holds
	my %final;
	$final{history} = parse_history($p->safe_psql('postgres', 'COPY (' . history_sql() . ') TO STDOUT'));
	$final{events} = parse_rows($p->safe_psql('postgres',
		'COPY (SELECT seq, event, name, owner, generation, slot FROM hoplock.hoplock_events(0)) TO STDOUT'),
		qw(seq event name owner generation slot));
	# (a slot's row is named "name\x1fslot"; the row of the name itself,
	# whose owner is "\x1fN", records its number of slots)
	$final{leases} = parse_rows($p->safe_psql('postgres',
		q{COPY (SELECT split_part(name, E'\x1f', 1), state, owner, generation, } . us('acquired_at') . ', ' . us('expires_at')
		  . q{, CASE WHEN strpos(name, E'\x1f') > 0 THEN split_part(name, E'\x1f', 2) END
		  FROM hoplock_internal.lease WHERE strpos(name, E'\x1f') > 0 OR strpos(owner, E'\x1f') <> 1) TO STDOUT}),
		qw(name state owner generation acquired_at expires_at slot));
	my $cts = us('pg_xact_commit_timestamp(xmin)');
	my $rows_sql = join(' UNION ALL ',
		"SELECT id, 'fence', name, generation, client, tag, $cts FROM torture.fenced_rows",
		map { "SELECT id, 'trigger', '$_', generation, client, tag, $cts FROM torture.trig_$_" } @ALL_NAMES, @SHARDS);
	$final{rows} = parse_rows($p->safe_psql('postgres', "COPY ($rows_sql) TO STDOUT"),
		qw(id table name generation client tag committed_at));
	$final{unannounced} = [ grep { length } split /\n/, $unannounced ];
	# verify_heapam came with PostgreSQL 14
	my $heap_checks = $p->safe_psql('postgres', 'SHOW server_version_num') >= 140000
	  ? q{
		SELECT blkno || ': ' || msg FROM verify_heapam('hoplock_internal.lease');
		SELECT blkno || ': ' || msg FROM verify_heapam('hoplock_internal.history');}
	  : '';
	my ($ret, $out, $err) = $p->psql('postgres', q{
		SELECT bt_index_check('hoplock_internal.lease_pkey', true);
		SELECT bt_index_check('hoplock_internal.history_pkey', true);} . $heap_checks);
	$final{amcheck} = [ grep { length } (split(/\n/, $out // ''), $ret ? ("error: $err") : ()) ];
	$self->{stats} = $p->safe_psql('postgres',
		q{SELECT terms_begun || ' terms begun, ' || contended || ' contended, ' || renewals || ' renewals, '
		         || releases || ' releases, ' || expiries || ' expiries, ' || waits || ' waits (since the last start)'
		    FROM hoplock.hoplock_stats WHERE datname = 'postgres'});

	# crashes nobody asked for, in every server's log
	my @crashes;
	for my $node (@{ $self->{all_nodes} })
	{
		open(my $fh, '<', $node->logfile) or next;
		while (my $line = <$fh>)
		{
			push @crashes, $node->name . ": $line"
			  if $line =~ /PANIC:|TRAP:|terminated by signal (?!9:)\d+|was terminated by exception/;
		}
	}
	my %uniq;
	$final{crashes} = [ grep { !$uniq{$_}++ } @crashes ];
	$self->{final} = \%final;
	$self->{standby}->stop('fast') if $self->{standby};
	$self->say('done');
}

# Everything recorded, for Hoplock::Torture::Check
sub history
{
	my ($self) = @_;
	my (@calls, @notes);
	my $json = JSON::PP->new;
	for my $file (glob("$self->{dir}/c*.log"), glob("$self->{dir}/listener*.log"))
	{
		open(my $fh, '<', $file) or die "$file: $!";
		my $list = $file =~ m{/c\d+\.log$} ? \@calls : \@notes;
		while (my $line = <$fh>)
		{
			# a process killed while writing leaves a partial last line
			my $rec = eval { $json->decode($line) } or next;
			push @$list, $rec;
		}
	}
	@notes = sort { $a->{received_at} <=> $b->{received_at} } @notes;
	return {
		calls    => \@calls,
		notes    => \@notes,
		nodes    => $self->{nodes},
		final    => $self->{final},
		old      => $self->{old} // {},
		clock_changes => $self->{clock_changes},
		faults   => $self->{faults},
		slots    => { $SLOTTED => $SLOTS },
	};
}

sub fault_counts
{
	my ($self) = @_;
	my %n;
	for my $f (@{ $self->{faults} })
	{
		$n{ $f->{kind} }++;
		$n{terminated_backends} += $f->{count} // 0 if $f->{kind} eq 'terminate';
		$n{stalled}++ if $f->{stall};
	}
	return \%n;
}

1;
