# Hoplock::Forks: the fork torture run of t/037_fork_torture.pl (and of
# scripts/torture-forks, which runs it longer).
#
# A model-based test of the rule "a value a client has seen never stands
# for anything else, across every fork of the lease state" (issue 17, the
# 1.2 design in docs/forks-and-events.md).  One driver process draws
# random chains.  A chain begins with a fresh cluster (the root branch) and
# goes on with steps, each on a live branch picked at random:
#
#   acquire, renew, release   of three names and one with two slots ("j"),
#                             by four clients, with ttls short (lapsing
#                             within the chain) or long
#   lapse                     a pause that lets short terms lapse (the
#                             worker announces them)
#   fence                     hoplock_fence then a row, or a row in a table
#                             fenced by the hoplock_fenced trigger, with a
#                             term the client was granted (its latest, or an
#                             older one, or one of another branch: stale)
#   read, write               hoplock_read, and hoplock_write with a handle
#                             the client was told (fresh or stale)
#   events                    hoplock_events(n) from a number the client
#                             remembers (of any branch), beside
#                             hoplock_events(0), in one snapshot
#   late                      a term change left uncommitted while another
#                             commits, events read on the standby between
#
# and forks, each yielding new branches:
#
#   dump_newdb       pg_dump (plain or custom) restored into a new database
#                    of the same cluster
#   dump_cluster     the same, into another cluster
#   dump_dataonly    pg_dump --schema-only and --data-only (plain or custom)
#                    restored section by section into a new database, of
#                    this cluster or of the other
#   restore_inplace  pg_restore --clean --if-exists of an earlier custom
#                    dump into the same database ("last night's backup")
#   template         CREATE DATABASE ... TEMPLATE of the branch's database
#   crash            stop('immediate') and start
#   promote_sync     a synchronous standby promoted
#   promote_async    an asynchronous standby cut (stopped) at a random
#                    point, the primary used on, then the standby promoted
#                    without ever seeing what the primary did after the cut
#   clone            the data directory copied while stopped and started as
#                    a second cluster; both used
#
# After a promotion the old primary is stopped (failover) or keeps serving
# (split brain).  After every fork the clients follow: each resumes its
# events from the last number it saw, renews and fences its latest term
# and writes with its latest handle, on the new branch; once the new branch
# has numbered events of its own, each resumes its events from the last
# number it saw there (or on the nearest ancestor).  Servers stay
# bounded: a chain has at most four running servers and five live
# branches (the oldest are retired: read a last time and dropped or
# stopped), and a chain ends after a few forks.
#
# Everything any client was told is recorded, with the branch and step:
# every lease returned (generation, owner, acquired_at, expires_at,
# handle), every history row and event read, every NOTIFY payload (a
# Hoplock::Listener on every live branch), every fence and write with the
# state of the lease in the same transaction, and every hoplock_events(n)
# with the stream from 0 beside it.  Hoplock::Forks::Check judges it.
#
# HOPLOCK_FORKS_SEED makes a run repeat its choices (not its timing: what
# lapses and what a worker announces depends on the clock).
package Hoplock::Forks;

use strict;
use warnings;
use DBI;
use IPC::Run ();
use JSON::PP;
use List::Util qw(shuffle sum min max);
use Time::HiRes qw(clock_gettime CLOCK_MONOTONIC);
use Hoplock::Listener;

our @NAMES   = qw(a b c);
# a lease with slots: acquired, renewed, released and fenced like the
# others (not read or written through the compare-and-swap calls, which
# are for leases without slots); its events come per slot
our $SLOTTED = 'j';
our $SLOTS   = 2;
our $CLIENTS = 4;
our @FORK_KINDS = qw(dump_newdb dump_cluster dump_dataonly restore_inplace template
  crash promote_sync promote_async clone);
our $MAX_NODES    = 4;    # running servers per chain (the standby included)
our $MAX_BRANCHES = 5;    # live branches per chain

sub mono { return clock_gettime(CLOCK_MONOTONIC); }
sub nap { Time::HiRes::sleep($_[0]) if $_[0] > 0; }
sub us { return "(extract(epoch FROM $_[0]) * 1000000)::bigint"; }

my $LEASE = 'r.generation AS g, r.owner AS o, ' . us('r.acquired_at') . ' AS acq, '
  . us('r.expires_at') . ' AS exp, r.handle AS h';

my $CONF = q{
shared_preload_libraries = 'hoplock'
max_connections = 40
shared_buffers = 16MB
max_worker_processes = 16
hoplock.history_size = 1000000
hoplock.released_retention = 0
hoplock.hung_holder_timeout = '2s'
log_min_messages = warning
log_min_error_statement = panic
log_statement = none
};

# Runs in progress: their servers are stopped at the end whatever happens
my @RUNS;

sub new
{
	my ($class, %o) = @_;
	require PostgreSQL::Test::Cluster;
	require PostgreSQL::Test::Utils;
	my $self = bless {
		seconds  => $o{seconds} // 60,
		seed     => $o{seed} // (time() ^ $$),
		dir      => $o{dir},
		step     => 0,
		node_n   => 0,
		chain_n  => 0,
		dump_n   => 0,
		stream_n => 0,
		errors   => [],
		rec      => {
			branches => {}, grants => [], events => [], handles => [], guards => [],
			streams  => [], resumes => [], forks => [], ops => {},
		},
	}, $class;
	srand($self->{seed});
	mkdir $self->{dir};
	open(my $log, '>>', "$self->{dir}/steps.log") or die "steps.log: $!";
	$log->autoflush(1);
	$self->{log} = $log;
	push @RUNS, $self;
	return $self;
}

sub say
{
	my ($self, $msg) = @_;
	my $line = sprintf('[%7.2f] %s', mono() - ($self->{t_start} // mono()), $msg);
	print "# $line\n";
	print { $self->{log} } "$line\n";
}

sub note
{
	my ($self, $msg) = @_;
	print { $self->{log} } sprintf("[%7.2f] %6d %s\n", mono() - ($self->{t_start} // mono()), $self->{step}, $msg);
}

sub oops
{
	my ($self, $what) = @_;
	$what =~ s/\s+$//;
	push @{ $self->{errors} }, $what;
	$self->say("error: $what");
}

# ===========================================================================
# Servers

sub new_node
{
	my ($self, $ch, %o) = @_;
	my $name = 'forks' . ++$self->{node_n};
	my $pg = PostgreSQL::Test::Cluster->new($name);
	my $node = { pg => $pg, name => $name, ch => $ch->{id}, up => 0 };
	push @{ $ch->{nodes} }, $node;
	return $node;
}

sub conf_node
{
	my ($self, $node) = @_;
	$node->{pg}->append_conf('postgresql.conf', $CONF);
}

sub start_node
{
	my ($self, $node) = @_;
	$node->{pg}->start;
	$node->{up} = 1;
}

sub stop_node
{
	my ($self, $node, $mode) = @_;
	$self->disconnect_node($node);
	$node->{pg}->stop($mode // 'fast') if $node->{up};
	$node->{up} = 0;
}

sub running_nodes
{
	my ($self, $ch) = @_;
	return grep { $_->{up} } @{ $ch->{nodes} };
}

# Wait until a server accepts writes.
sub wait_primary
{
	my ($self, $node) = @_;
	my $deadline = mono() + 60;
	while (mono() < $deadline)
	{
		my ($ret, $out) = $node->{pg}->psql('postgres', 'SELECT NOT pg_is_in_recovery()');
		return if $ret == 0 && $out eq 't';
		nap(0.05);
	}
	die "$node->{name} did not become a primary\n";
}

sub setup_db
{
	my ($self, $node, $db) = @_;
	my $tables = join('', map { qq{
		CREATE TABLE fk.trig_$_ (id bigserial PRIMARY KEY, generation bigint NOT NULL, owner text NOT NULL);
		CREATE TRIGGER fenced BEFORE INSERT OR UPDATE OR DELETE ON fk.trig_$_
			FOR EACH ROW EXECUTE FUNCTION hoplock.hoplock_fenced('$_', 'generation');
	} } @NAMES, $SLOTTED);
	$node->{pg}->safe_psql($db, qq{
		CREATE SCHEMA hoplock;
		CREATE EXTENSION hoplock SCHEMA hoplock;
		CREATE SCHEMA fk;
		CREATE TABLE fk.fenced_rows (id bigserial PRIMARY KEY, name text NOT NULL,
			generation bigint NOT NULL, owner text NOT NULL);
		$tables
	});
}

# ===========================================================================
# Connections

sub dsn
{
	my ($node, $db) = @_;
	return sprintf('dbi:Pg:host=%s;port=%d;dbname=%s', $node->{pg}->host, $node->{pg}->port, $db);
}

sub connect_db
{
	my ($self, $node, $db) = @_;
	my $dbh = DBI->connect(dsn($node, $db), '', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0, PrintWarn => 0 });
	$dbh->do("SET statement_timeout = '10s'");
	$dbh->do("SET lock_timeout = '5s'");
	return $dbh;
}

# The connection to a branch (or to its standby: $via = 'standby'), made
# again when it is gone.
sub dbh
{
	my ($self, $b, $via) = @_;
	my $key = $via // 'primary';
	my $node = $key eq 'standby' ? $self->{chains}{ $b->{ch} }{standby}{node} : $b->{node};
	my $dbh = $b->{dbh}{$key};
	return $dbh if $dbh && $dbh->{Active} && eval { $dbh->ping };
	$b->{dbh}{$key} = undef;
	$dbh = eval { $self->connect_db($node, $b->{db}) };
	$b->{dbh}{$key} = $dbh;
	return $dbh;
}

sub disconnect_branch
{
	my ($self, $b) = @_;
	for my $k (keys %{ $b->{dbh} // {} })
	{
		eval { $b->{dbh}{$k}->disconnect } if $b->{dbh}{$k};
	}
	$b->{dbh} = {};
	if ($b->{listener})
	{
		eval { $b->{listener}->disconnect };
		$b->{listener} = undef;
	}
}

sub disconnect_node
{
	my ($self, $node) = @_;
	my $ch = $self->{chains}{ $node->{ch} };
	for my $b (values %{ $ch->{branches} })
	{
		$self->disconnect_branch($b) if $b->{node} == $node;
		if ($ch->{standby} && $ch->{standby}{node} == $node && $b->{dbh}{standby})
		{
			eval { $b->{dbh}{standby}->disconnect };
			delete $b->{dbh}{standby};
		}
	}
}

# Run $code->($dbh); on failure return (undef, sqlstate, message).
sub try
{
	my ($self, $dbh, $code) = @_;
	return (undef, 'conn', 'no connection') unless $dbh;
	my $r = eval { $code->($dbh) };
	return ($r) unless $@;
	my $err = $@;
	my $state = $dbh->state || 'conn';
	$state = 'conn' if $state eq 'S8006' || $state =~ /^08/;
	(my $msg = $dbh->errstr // $err) =~ s/\s+/ /g;
	eval { $dbh->rollback } unless $dbh->{AutoCommit};
	return (undef, $state, substr($msg, 0, 200));
}

# ===========================================================================
# Recording

sub rec_branch
{
	my ($self, $b) = @_;
	$self->{rec}{branches}{ $b->{id} } = {
		id => $b->{id}, ch => $b->{ch}, parent => $b->{parent}, kind => $b->{kind},
		step => $b->{step}, node => $b->{node}{name}, db => $b->{db}, detail => $b->{detail} };
}

# A lease a client was told of ($r: g, o, acq, exp, h): its term, and what
# its handle stands for.
sub told_lease
{
	my ($self, $b, $src, $n, $r, $via) = @_;
	return unless $r && defined $r->{g};
	my %base = (ch => $b->{ch}, b => $b->{id}, step => $self->{step}, src => $src, n => $n);
	$base{via} = $via if $via;
	push @{ $self->{rec}{grants} }, { %base, g => $r->{g}, o => $r->{o}, acq => $r->{acq}, exp => $r->{exp} };
	push @{ $self->{rec}{handles} }, { %base, h => $r->{h}, g => $r->{g}, o => $r->{o}, acq => $r->{acq}, exp => $r->{exp} }
	  if defined $r->{h};
}

sub told_events
{
	my ($self, $b, $src, $events, $via) = @_;
	for my $e (@$events)
	{
		push @{ $self->{rec}{events} }, {
			ch => $b->{ch}, b => $b->{id}, step => $self->{step}, src => $src, ($via ? (via => $via) : ()),
			seq => $e->{seq}, ev => $e->{ev}, n => $e->{n}, g => $e->{g}, o => $e->{o}, (defined $e->{sl} ? (sl => $e->{sl}) : ()) };
	}
}

sub count_op { $_[0]{rec}{ops}{ $_[1] } += $_[2] // 1; }

# ===========================================================================
# Chains and branches

sub new_chain
{
	my ($self) = @_;
	my $ch = { id => ++$self->{chain_n}, nodes => [], branches => {}, branch_n => 0,
		dumps => [], pending => [], forks => 0, clients => [] };
	$self->{chains}{ $ch->{id} } = $ch;
	$ch->{clients} = [ map { { id => $_, owner_n => 0, terms => [], handles => [], marks => [] } } 1 .. $CLIENTS ];
	$ch->{budget} = 4 + int(rand(4));
	my $node = $self->new_node($ch);
	$node->{pg}->init(allows_streaming => 1);
	$self->conf_node($node);
	$self->start_node($node);
	$node->{pg}->safe_psql('postgres', 'CREATE DATABASE app');
	$self->setup_db($node, 'app');
	my $b = $self->new_branch($ch, undef, 'root', $node, 'app');
	$self->say("chain $ch->{id}: root branch $b->{id} on $node->{name}");
	return $ch;
}

sub new_branch
{
	my ($self, $ch, $parent, $kind, $node, $db, $detail) = @_;
	my $b = {
		id => "$ch->{id}." . ++$ch->{branch_n}, ch => $ch->{id},
		parent => $parent ? $parent->{id} : undef, kind => $kind, node => $node, db => $db,
		step => $self->{step}, live => 1, dbh => {}, detail => $detail };
	$ch->{branches}{ $b->{id} } = $b;
	$self->rec_branch($b);
	$b->{listener} = eval { Hoplock::Listener->new($node->{pg}, $db) };
	return $b;
}

sub live_branches
{
	my ($self, $ch) = @_;
	return sort { $a->{step} <=> $b->{step} || $a->{id} cmp $b->{id} }
	  grep { $_->{live} && $_->{node}{up} } values %{ $ch->{branches} };
}

# A branch ends (it is replaced, or retired): what it holds is read once
# more, into the record.
sub end_branch
{
	my ($self, $b, $why) = @_;
	return unless $b->{live};
	$self->final_reads($b) if $b->{node}{up};
	$self->disconnect_branch($b);
	$b->{live} = 0;
	$self->{rec}{branches}{ $b->{id} }{ended} = $why;
	$self->note("branch $b->{id} ends: $why");
}

sub final_reads
{
	my ($self, $b) = @_;
	$self->collect_notifications($b);
	my $dbh = $self->dbh($b) or return;
	my ($hist) = $self->try($dbh, sub {
		$_[0]->selectall_arrayref('SELECT name AS n, generation AS g, owner AS o, ' . us('acquired_at')
			  . ' AS acq, ' . us('ended_at') . ' AS "end", how FROM hoplock.hoplock_history', { Slice => {} }) });
	for my $t (@{ $hist // [] })
	{
		push @{ $self->{rec}{grants} }, { ch => $b->{ch}, b => $b->{id}, step => $self->{step}, src => 'history',
			n => $t->{n}, g => $t->{g}, o => $t->{o}, acq => $t->{acq} };
	}
	my ($ev) = $self->try($dbh, sub { $_[0]->selectall_arrayref(events_sql(), { Slice => {} }, 0) });
	$self->told_events($b, 'final', $ev) if $ev;
	for my $n (@NAMES)
	{
		my ($r) = $self->try($dbh, sub { $_[0]->selectrow_hashref("SELECT $LEASE FROM hoplock.hoplock_read(\$1) AS r", undef, $n) });
		$self->told_lease($b, 'read', $n, $r);
	}
}

# Keep the chain within its bounds: retire the oldest branches, and
# servers beyond $MAX_NODES (but not those in @keep).
sub bound
{
	my ($self, $ch, @keep) = @_;
	my %keep = map { $_ => 1 } @keep;
	my @live = $self->live_branches($ch);
	while (@live > $MAX_BRANCHES)
	{
		my ($old) = grep { !$keep{ $_->{node}{name} } } @live;
		$old //= $live[0];
		$self->retire_branch($ch, $old);
		@live = $self->live_branches($ch);
	}
	my @running = $self->running_nodes($ch);
	while (@running >= $MAX_NODES)
	{
		my $sb = $ch->{standby} ? $ch->{standby}{node} : undef;
		my ($victim) = grep { !$keep{ $_->{name} } && (!$sb || $_ != $sb) && $_ != ($ch->{spare} // 0) } @running;
		($victim) = grep { !$keep{ $_->{name} } && (!$sb || $_ != $sb) } @running unless $victim;
		last unless $victim;
		# never the last server with a live branch
		my @others = grep { $_->{node} != $victim } $self->live_branches($ch);
		last unless @others;
		$self->say("retiring server $victim->{name}");
		$self->end_branch($_, 'retired') for grep { $_->{node} == $victim } $self->live_branches($ch);
		$self->drop_standby($ch) if $ch->{standby} && $ch->{standby}{primary} == $victim;
		$self->stop_node($victim, 'fast');
		$ch->{spare} = undef if $ch->{spare} && $ch->{spare} == $victim;
		@running = $self->running_nodes($ch);
	}
}

sub retire_branch
{
	my ($self, $ch, $b) = @_;
	$self->say("retiring branch $b->{id}");
	$self->end_branch($b, 'retired');
	my @same = grep { $_->{node} == $b->{node} } $self->live_branches($ch);
	if (@same)
	{
		my ($ret, $out, $err) = $b->{node}{pg}->psql('postgres', qq{DROP DATABASE "$b->{db}" WITH (FORCE)});
		$self->oops("dropping $b->{db} on $b->{node}{name}: $err") if $ret;
	}
	else
	{
		$self->drop_standby($ch) if $ch->{standby} && $ch->{standby}{primary} == $b->{node};
		$self->stop_node($b->{node}, 'fast');
		$ch->{spare} = undef if $ch->{spare} && $ch->{spare} == $b->{node};
	}
}

sub end_chain
{
	my ($self, $ch) = @_;
	$self->end_branch($_, 'end of the chain') for $self->live_branches($ch);
	$self->drop_standby($ch) if $ch->{standby};
	for my $node (@{ $ch->{nodes} })
	{
		next unless $node->{up};
		$self->stop_node($node, 'immediate');
	}
	# crashes nobody asked for
	for my $node (@{ $ch->{nodes} })
	{
		open(my $fh, '<', $node->{pg}->logfile) or next;
		while (my $line = <$fh>)
		{
			push @{ $self->{rec}{crashes} }, "$node->{name}: $line"
			  if $line =~ /PANIC:|TRAP:|terminated by signal (?!9:)\d+|was terminated by exception/;
		}
	}
	$self->say("chain $ch->{id} ends: " . scalar(keys %{ $ch->{branches} }) . " branches, $ch->{forks} forks");
}

# ===========================================================================
# Client steps

sub client { my ($ch) = @_; return $ch->{clients}[ int(rand(@{ $ch->{clients} })) ]; }

sub new_owner
{
	my ($ch, $c) = @_;
	return sprintf('c%d.%d-%d', $ch->{id}, $c->{id}, ++$c->{owner_n});
}

sub pick_recent
{
	my ($list) = @_;
	return undef unless @$list;
	# the latest half the time, else any
	return rand() < 0.5 ? $list->[-1] : $list->[ int(rand(@$list)) ];
}

sub remember_term
{
	my ($self, $c, $b, $n, $r) = @_;
	my ($t) = grep { $_->{n} eq $n && $_->{g} == $r->{g} && $_->{o} eq $r->{o} && $_->{acq} == $r->{acq} } @{ $c->{terms} };
	if ($t)
	{
		@{ $c->{terms} } = ((grep { $_ != $t } @{ $c->{terms} }), $t);
	}
	else
	{
		$t = { n => $n, g => $r->{g}, o => $r->{o}, acq => $r->{acq} };
		push @{ $c->{terms} }, $t;
		shift @{ $c->{terms} } if @{ $c->{terms} } > 12;
	}
	$t->{exp} = $r->{exp};
	$t->{b} = $b->{id};
	$self->remember_handle($c, $b, $n, $r);
}

sub remember_handle
{
	my ($self, $c, $b, $n, $r) = @_;
	return unless defined $r->{h} && $n ne $SLOTTED;
	push @{ $c->{handles} }, { n => $n, h => $r->{h}, b => $b->{id},
		state => { o => $r->{o}, g => $r->{g}, acq => $r->{acq}, exp => $r->{exp} } };
	shift @{ $c->{handles} } if @{ $c->{handles} } > 12;
}

sub ttl
{
	return rand() < 0.7 ? (150 + int(rand(450))) . ' milliseconds' : (2 + int(rand(8))) . ' seconds';
}

sub op_acquire
{
	my ($self, $ch, $b, $c) = @_;
	$c //= client($ch);
	my $n = (@NAMES, $SLOTTED)[ int(rand(@NAMES + 1)) ];
	# extend a term it believes it holds, or try for a new one
	my ($t) = grep { $_->{n} eq $n } reverse @{ $c->{terms} };
	my $o = ($t && rand() < 0.3) ? $t->{o} : new_owner($ch, $c);
	my ($r, $e, $m) = $self->try($self->dbh($b), sub {
		$_[0]->selectrow_hashref("SELECT $LEASE FROM hoplock.hoplock_acquire(\$1, \$2, \$3::interval, slots => \$4::integer) AS r",
			undef, $n, $o, ttl(), $n eq $SLOTTED ? $SLOTS : 1) });
	$self->count_op('acquire');
	if ($r && defined $r->{g})
	{
		$self->count_op('acquire_granted');
		$self->told_lease($b, 'acquire', $n, $r);
		$self->remember_term($c, $b, $n, $r);
	}
	$self->note("c$c->{id} acquire($n, $o) on $b->{id}: " . ($e ? "error $e $m" : $r && defined $r->{g} ? "g=$r->{g}" : 'NULL'));
}

sub op_renew
{
	my ($self, $ch, $b, $c, $t) = @_;
	$c //= client($ch);
	$t //= pick_recent($c->{terms}) or return $self->op_acquire($ch, $b, $c);
	my ($r, $e, $m) = $self->try($self->dbh($b), sub {
		$_[0]->selectrow_hashref("SELECT $LEASE FROM hoplock.hoplock_renew(\$1, \$2, \$3::interval, \$4::bigint) AS r",
			undef, $t->{n}, $t->{o}, ttl(), $t->{g}) });
	$self->count_op('renew');
	if ($r && defined $r->{g})
	{
		$self->count_op('renew_ok');
		$self->told_lease($b, 'renew', $t->{n}, $r);
		$self->remember_term($c, $b, $t->{n}, $r);
	}
	$self->note("c$c->{id} renew($t->{n}, $t->{o}, g=$t->{g}) on $b->{id}: " . ($e ? "error $e $m" : $r && defined $r->{g} ? "ok" : 'NULL'));
}

sub op_release
{
	my ($self, $ch, $b) = @_;
	my $c = client($ch);
	my $t = pick_recent($c->{terms}) or return;
	my ($ok, $e, $m) = $self->try($self->dbh($b), sub {
		scalar $_[0]->selectrow_array('SELECT hoplock.hoplock_release($1, $2, $3::bigint)', undef, $t->{n}, $t->{o}, $t->{g}) });
	$self->count_op('release');
	$self->count_op('release_ok') if $ok;
	$self->note("c$c->{id} release($t->{n}, $t->{o}, g=$t->{g}) on $b->{id}: " . ($e ? "error $e $m" : $ok ? 'true' : 'false'));
}

sub op_lapse
{
	my ($self, $ch, $b) = @_;
	my $s = 0.2 + rand(0.5);
	$self->count_op('lapse');
	$self->note("lapse ${s}s");
	nap($s);
}

# The stored state of lease $n (expired or not); of a lease with slots,
# the state of the slot term $g runs in, if it still does
sub read_state
{
	my ($dbh, $n, $g) = @_;
	my $r = $n eq $SLOTTED
	  ? $dbh->selectrow_hashref('SELECT r.generation AS g, r.owner AS o, ' . us('r.acquired_at') . ' AS acq, '
		  . us('r.expires_at') . ' AS exp FROM hoplock.hoplock_leases AS r WHERE r.name = $1 AND r.generation = $2',
		undef, $n, $g)
	  : $dbh->selectrow_hashref("SELECT $LEASE FROM hoplock.hoplock_read(\$1) AS r", undef, $n);
	return ($r && defined $r->{g}) ? $r : undef;
}

# A fenced transaction with term $t: hoplock_fence then a row, or a row in
# the name's trigger-fenced table.  The lease as the transaction sees it
# right after (the fence keeps any new term out until it ends) says whether
# the client's term was the one holding.
sub op_fence
{
	my ($self, $ch, $b, $c, $t) = @_;
	$c //= client($ch);
	$t //= ($c->{terms}[ int(rand(@{ $c->{terms} })) ] // return $self->op_acquire($ch, $b, $c));
	my $mode = rand() < 0.5 ? 'fence' : 'trigger';
	my $dbh = $self->dbh($b);
	my ($before) = $self->try($dbh, sub { read_state($_[0], $t->{n}, $t->{g}) });
	my $cur;
	my ($ok, $e, $m) = $self->try($dbh, sub {
		my $d = shift;
		$d->begin_work;
		if ($mode eq 'fence')
		{
			$d->selectrow_array('SELECT hoplock.hoplock_fence($1, $2::bigint)', undef, $t->{n}, $t->{g});
			$cur = read_state($d, $t->{n}, $t->{g});
			$d->do('INSERT INTO fk.fenced_rows (name, generation, owner) VALUES ($1, $2, $3)', undef, $t->{n}, $t->{g}, $t->{o});
		}
		else
		{
			$d->do("INSERT INTO fk.trig_$t->{n} (generation, owner) VALUES (\$1, \$2)", undef, $t->{g}, $t->{o});
			$cur = read_state($d, $t->{n}, $t->{g});
		}
		$d->commit;
		1;
	});
	my $stale = !same_term($before, $t);
	$self->count_op("fence_$mode");
	$self->count_op('fence_stale') if $stale;
	$self->count_op($ok ? 'fence_passed' : 'fence_refused');
	push @{ $self->{rec}{guards} }, {
		ch => $b->{ch}, b => $b->{id}, step => $self->{step}, k => $mode, n => $t->{n}, g => $t->{g},
		mine => { o => $t->{o}, g => $t->{g}, acq => $t->{acq} }, from_b => $t->{b},
		ok => $ok ? 1 : 0, e => $e, cur => $cur && { map { $_ => $cur->{$_} } qw(o g acq exp) },
		before => $before && { map { $_ => $before->{$_} } qw(o g acq exp) }, stale => $stale ? 1 : 0 };
	$self->note("c$c->{id} $mode($t->{n}, g=$t->{g}, $t->{o}) on $b->{id}" . ($stale ? ' (stale)' : '') . ': '
		  . ($ok ? 'passed' : "refused $e $m"));
}

sub same_term
{
	my ($x, $t) = @_;
	return $x && $t && $x->{o} eq $t->{o} && $x->{g} == $t->{g} && $x->{acq} == $t->{acq};
}

sub same_state
{
	my ($x, $y) = @_;
	return same_term($x, $y) && $x->{exp} == $y->{exp};
}

sub op_read
{
	my ($self, $ch, $b, $c) = @_;
	$c //= client($ch);
	my $n = $NAMES[ int(rand(@NAMES)) ];
	my ($r, $e) = $self->try($self->dbh($b), sub { read_state($_[0], $n) });
	$self->count_op('read');
	return unless $r;
	$self->told_lease($b, 'read', $n, $r);
	$self->remember_handle($c, $b, $n, $r);
}

# hoplock_write with a handle the client was told, the lease read in the
# same transaction just before.
sub op_write
{
	my ($self, $ch, $b, $c, $hd) = @_;
	$c //= client($ch);
	$hd //= pick_recent($c->{handles}) or return $self->op_read($ch, $b, $c);
	# continue the term the handle stood for, or take over
	my $o = rand() < 0.5 ? $hd->{state}{o} : new_owner($ch, $c);
	my $ttl = ttl();
	my ($cur, $r);
	my ($ok, $e, $m) = $self->try($self->dbh($b), sub {
		my $d = shift;
		$d->begin_work;
		$cur = read_state($d, $hd->{n});
		$r = $d->selectrow_hashref("SELECT $LEASE FROM hoplock.hoplock_write(\$1, \$2, \$3, \$4::interval) AS r",
			undef, $hd->{n}, $hd->{h}, $o, $ttl);
		$d->commit;
		1;
	});
	my $wrote = $ok && $r && defined $r->{g};
	my $stale = !same_state($cur, $hd->{state});
	$self->count_op('write');
	$self->count_op('write_stale') if $stale;
	$self->count_op($wrote ? 'write_ok' : 'write_refused');
	push @{ $self->{rec}{guards} }, {
		ch => $b->{ch}, b => $b->{id}, step => $self->{step}, k => 'write', n => $hd->{n}, h => $hd->{h},
		mine => $hd->{state}, from_b => $hd->{b}, ok => $wrote ? 1 : 0, e => $e,
		cur => $cur && { map { $_ => $cur->{$_} } qw(o g acq exp) }, cur_h => $cur && $cur->{h},
		stale => $stale ? 1 : 0 };
	if ($cur)
	{
		$self->told_lease($b, 'read', $hd->{n}, $cur);
	}
	if ($wrote)
	{
		$self->told_lease($b, 'write', $hd->{n}, $r);
		$self->remember_term($c, $b, $hd->{n}, $r);
	}
	$self->note("c$c->{id} write($hd->{n}, $hd->{h}, $o) on $b->{id}" . ($stale ? ' (stale)' : '') . ': '
		  . ($e ? "error $e $m" : $wrote ? "g=$r->{g}" : 'NULL'));
}

sub events_sql
{
	return 'SELECT seq, event AS ev, name AS n, owner AS o, generation AS g, slot AS sl FROM hoplock.hoplock_events($1) ORDER BY seq';
}

sub new_stream
{
	my ($self, $b, $events, $via) = @_;
	my $id = ++$self->{stream_n};
	push @{ $self->{rec}{streams} }, { id => $id, ch => $b->{ch}, b => $b->{id}, step => $self->{step},
		($via ? (via => $via) : ()), events => $events };
	return $id;
}

# The client's last mark of this branch, or else of the nearest ancestor
sub mark_of_lineage
{
	my ($self, $ch, $b, $c) = @_;
	for (my $x = $b; $x; $x = defined $x->{parent} ? $ch->{branches}{ $x->{parent} } : undef)
	{
		my ($m) = grep { $_->{b} eq $x->{id} } reverse @{ $c->{marks} };
		return $m if $m;
	}
	return undef;
}

# hoplock_events(0) (the whole stream) then hoplock_events(n) from a number
# the client remembers, in one snapshot; the client then remembers the
# newest number it saw (and sometimes another).
sub op_events
{
	my ($self, $ch, $b, $c, $mark, $via) = @_;
	$c //= client($ch);
	$mark //= (rand() < 0.15 ? undef : rand() < 0.5 ? $self->mark_of_lineage($ch, $b, $c) : undef)
	  // pick_recent($c->{marks});
	my $dbh = $self->dbh($b, $via);
	my ($full, $got, $resume_err);
	my ($ok, $e, $m) = $self->try($dbh, sub {
		my $d = shift;
		$d->begin_work;
		$d->do('SET TRANSACTION ISOLATION LEVEL REPEATABLE READ');
		$full = $d->selectall_arrayref(events_sql(), { Slice => {} }, 0);
		if ($mark)
		{
			$got = eval { $d->selectall_arrayref(events_sql(), { Slice => {} }, $mark->{seq}) };
			if (!$got)
			{
				# hoplock_events(n) raised: an answer too
				(my $msg = $d->errstr // $@) =~ s/\s+/ /g;
				$resume_err = [ $d->state, $msg ];
				$d->rollback;
				return 1;
			}
		}
		$d->commit;
		1;
	});
	$self->count_op('events');
	if (!$ok)
	{
		$self->note("c$c->{id} events on $b->{id}" . ($via ? " ($via)" : '') . ": error $e $m");
		return;
	}
	my $sid = $self->new_stream($b, $full, $via);
	$self->told_events($b, 'read', $full, $via);
	if ($mark)
	{
		$self->count_op('resume');
		$self->told_events($b, 'read', $got, $via) if $got;
		push @{ $self->{rec}{resumes} }, {
			ch => $b->{ch}, b => $b->{id}, step => $self->{step}, ($via ? (via => $via) : ()),
			from_b => $mark->{b}, after => $mark->{seq}, known => $mark->{stream}, full => $sid,
			got => $got, ($resume_err ? (e => $resume_err->[0], em => $resume_err->[1]) : ()) };
		$self->note("c$c->{id} events($mark->{seq} of $mark->{b}) on $b->{id}" . ($via ? " ($via)" : '') . ': '
			  . ($resume_err ? "error $resume_err->[0] $resume_err->[1]" : scalar(@$got) . ' events, ' . scalar(@$full) . ' from 0'));
	}
	if (@$full)
	{
		my @pick = ($full->[-1]);
		push @pick, $full->[ int(rand(@$full)) ] if rand() < 0.3;
		for my $e (@pick)
		{
			push @{ $c->{marks} }, { b => $b->{id}, seq => $e->{seq}, stream => $sid };
			shift @{ $c->{marks} } if @{ $c->{marks} } > 16;
		}
	}
}

sub collect_notifications
{
	my ($self, $b) = @_;
	my $l = $b->{listener} or return;
	my $got = eval { $l->collect(0) };
	if (!$got)
	{
		$b->{listener} = undef;
		return;
	}
	my @ev = map { {
		seq => $_->{seq}, ev => $_->{event}, n => $_->{name}, o => $_->{owner}, g => $_->{generation},
		(defined $_->{slot} ? (sl => $_->{slot}) : ()) } } @$got;
	$self->told_events($b, 'notify', \@ev);
	$self->count_op('notifications', scalar @ev);
	$l->reset;
}

# A term change left uncommitted (its event number taken) while another
# commits; the events are read on the standby in between and after.
sub op_late
{
	my ($self, $ch, $b) = @_;
	my $sb = $ch->{standby};
	my $via = ($sb && !$sb->{cut} && $sb->{primary} == $b->{node} && $sb->{node}{up}) ? 'standby' : undef;
	my $c = client($ch);
	my $slow = eval { $self->connect_db($b->{node}, $b->{db}) } or return;
	my @n = shuffle(@NAMES);
	my ($o1, $o2) = (new_owner($ch, $c), new_owner($ch, $c));
	my $r1;
	my ($ok, $e, $m) = $self->try($slow, sub {
		my $d = shift;
		$d->begin_work;
		$r1 = $d->selectrow_hashref("SELECT $LEASE FROM hoplock.hoplock_acquire(\$1, \$2, '300 ms') AS r", undef, $n[0], $o1);
		1;
	});
	$self->count_op('late');
	if ($ok && $r1 && defined $r1->{g})
	{
		$self->count_op('late_held');
		my $dbh = $self->dbh($b);
		my ($r2) = $self->try($dbh, sub {
			$_[0]->selectrow_hashref("SELECT $LEASE FROM hoplock.hoplock_acquire(\$1, \$2, '300 ms') AS r", undef, $n[1], $o2) });
		if ($r2 && defined $r2->{g})
		{
			$self->told_lease($b, 'acquire', $n[1], $r2);
			$self->remember_term($c, $b, $n[1], $r2);
		}
		eval { $b->{node}{pg}->wait_for_catchup($sb->{node}{pg}) } if $via;
		$self->op_events($ch, $b, $c, undef, $via);
		eval { $slow->commit };
		if (!$@)
		{
			$self->told_lease($b, 'acquire', $n[0], $r1);
			$self->remember_term($c, $b, $n[0], $r1);
		}
		eval { $b->{node}{pg}->wait_for_catchup($sb->{node}{pg}) } if $via;
		# resume from what was read while the first change was in flight
		my ($mark) = grep { $_->{b} eq $b->{id} } reverse @{ $c->{marks} };
		$self->op_events($ch, $b, $c, $mark, $via) if $mark;
	}
	eval { $slow->rollback } if $slow->{Active} && !$slow->{AutoCommit};
	eval { $slow->disconnect };
	$self->note("late on $b->{id}" . ($via ? ' (events read on the standby)' : '') . ': ' . ($ok ? ($r1 && defined $r1->{g} ? 'done' : 'contended') : "error $e $m"));
}

# A short-lived leader: a client takes a name and lets it go, a few times
sub op_churn
{
	my ($self, $ch, $b) = @_;
	my $c = client($ch);
	my $n = $NAMES[ int(rand(@NAMES)) ];
	$self->count_op('churn');
	for (1 .. 1 + int(rand(6)))
	{
		my $o = new_owner($ch, $c);
		my ($r) = $self->try($self->dbh($b), sub {
			$_[0]->selectrow_hashref("SELECT $LEASE FROM hoplock.hoplock_acquire(\$1, \$2, '5 s') AS r", undef, $n, $o) });
		last unless $r && defined $r->{g};
		$self->count_op('acquire_granted');
		$self->told_lease($b, 'acquire', $n, $r);
		$self->remember_term($c, $b, $n, $r);
		my ($ok) = $self->try($self->dbh($b), sub {
			scalar $_[0]->selectrow_array('SELECT hoplock.hoplock_release($1, $2, $3::bigint)', undef, $n, $o, $r->{g}) });
		$self->count_op('release_ok') if $ok;
		$self->note("c$c->{id} churn($n, $o) on $b->{id}: g=$r->{g}" . ($ok ? ', released' : ''));
	}
}

sub pick_op
{
	my ($busy) = @_;
	my %w = (acquire => 22, renew => 16, release => 6, lapse => 5, fence => 14, read => 6, write => 10,
		events => 12, late => 2, churn => ($busy ? 40 : 4));
	my $x = rand(sum(values %w));
	for my $k (sort keys %w)
	{
		return $k if ($x -= $w{$k}) < 0;
	}
	return 'acquire';
}

sub do_op
{
	my ($self, $ch, $b, $k) = @_;
	my $m = "op_$k";
	$self->$m($ch, $b);
	$self->collect_notifications($_) for $self->live_branches($ch);
}

# After a fork the clients follow to the new branch: each renews and fences
# its latest term, writes with its latest handle, tries for a name, and
# then resumes its events from the last number it saw on the branch's
# lineage.
sub follow
{
	my ($self, $ch, $b) = @_;
	return unless $b->{live} && $b->{node}{up};
	$self->dbh($b) or return;
	for my $c (shuffle @{ $ch->{clients} })
	{
		$self->{step}++;
		$self->op_renew($ch, $b, $c, $c->{terms}[-1]) if @{ $c->{terms} };
		$self->op_fence($ch, $b, $c, $c->{terms}[-1]) if @{ $c->{terms} };
		$self->op_write($ch, $b, $c, $c->{handles}[-1]) if @{ $c->{handles} };
	}
	for my $c (shuffle @{ $ch->{clients} })
	{
		$self->{step}++;
		$self->op_acquire($ch, $b, $c);
		$self->op_fence($ch, $b, $c) if @{ $c->{terms} };
	}
	# the listeners resume where they were (the new branch has events of
	# its own by now)
	for my $c (shuffle @{ $ch->{clients} })
	{
		$self->{step}++;
		my $mark = $self->mark_of_lineage($ch, $b, $c) // $c->{marks}[-1];
		$self->op_events($ch, $b, $c, $mark) if $mark;
	}
	$self->collect_notifications($_) for $self->live_branches($ch);
}

# ===========================================================================
# Forks

sub fork_log
{
	my ($self, $ch, $k, $from, $to, $detail) = @_;
	push @{ $self->{rec}{forks} }, { ch => $ch->{id}, k => $k, step => $self->{step},
		from => [ map { $_->{id} } @$from ], to => [ map { $_->{id} } @$to ], detail => $detail };
	$ch->{forks}++;
	$self->say("fork $k: " . join(',', map { $_->{id} } @$from) . ' -> ' . join(',', map { $_->{id} } @$to)
		  . ($detail ? " ($detail)" : ''));
}

sub run_cmd
{
	my ($self, @cmd) = @_;
	my ($out, $err) = ('', '');
	my $ok = IPC::Run::run(\@cmd, '>', \$out, '2>', \$err, IPC::Run::timeout(120));
	$err =~ s/^.*(?:NOTICE|INFO):.*\n//mg;
	return ($ok, $out, $err);
}

# pg_dump of a branch, kept for later restores
sub take_dump
{
	my ($self, $ch, $b, $format) = @_;
	$format //= (qw(plain custom dataonly))[ int(rand(3)) ];
	my $id = ++$self->{dump_n};
	my $base = "$self->{dir}/dump$id";
	my $conn = $b->{node}{pg}->connstr($b->{db});
	my @files;
	if ($format eq 'plain')
	{
		push @files, "$base.sql";
		my ($ok, $out, $err) = $self->run_cmd('pg_dump', '-Fp', '-f', $files[0], '-d', $conn);
		return $self->oops("pg_dump -Fp of $b->{id}: $err") unless $ok;
	}
	elsif ($format eq 'custom')
	{
		push @files, "$base.dump";
		my ($ok, $out, $err) = $self->run_cmd('pg_dump', '-Fc', '-f', $files[0], '-d', $conn);
		return $self->oops("pg_dump -Fc of $b->{id}: $err") unless $ok;
	}
	else
	{
		my $dfmt = rand() < 0.5 ? 'p' : 'c';
		push @files, "$base.schema.dump", "$base.data.$dfmt";
		my ($ok, $out, $err) = $self->run_cmd('pg_dump', '-Fc', '--schema-only', '-f', $files[0], '-d', $conn);
		($ok, $out, $err) = $self->run_cmd('pg_dump', "-F$dfmt", '--data-only', '-f', $files[1], '-d', $conn) if $ok;
		return $self->oops("pg_dump --schema-only / --data-only of $b->{id}: $err") unless $ok;
	}
	my $d = { id => $id, b => $b, step => $self->{step}, format => $format, files => \@files };
	push @{ $ch->{dumps} }, $d;
	shift @{ $ch->{dumps} } if @{ $ch->{dumps} } > 4;
	$self->count_op("dump_$format");
	$self->note("dump $id ($format) of $b->{id}");
	return $d;
}

# Restore dump $d into database $db of $node (created here unless $inplace)
sub restore
{
	my ($self, $d, $node, $db, $inplace) = @_;
	my $pg = $node->{pg};
	my $conn = $pg->connstr($db);
	my @steps;
	if ($inplace)
	{
		@steps = ([ 'pg_restore', '--clean', '--if-exists', '-d', $conn, $d->{files}[0] ]);
	}
	else
	{
		$pg->safe_psql('postgres', qq{CREATE DATABASE "$db"});
		if ($d->{format} eq 'plain')
		{
			@steps = ([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $conn, '-f', $d->{files}[0] ]);
		}
		elsif ($d->{format} eq 'custom')
		{
			@steps = ([ 'pg_restore', '-d', $conn, $d->{files}[0] ]);
		}
		else
		{
			my ($schema, $data) = @{ $d->{files} };
			@steps = ([ 'pg_restore', '--section=pre-data', '-d', $conn, $schema ],
				$data =~ /\.p$/
				? [ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-d', $conn, '-f', $data ]
				: [ 'pg_restore', '--data-only', '-d', $conn, $data ],
				[ 'pg_restore', '--section=post-data', '-d', $conn, $schema ]);
		}
	}
	for my $cmd (@steps)
	{
		my ($ok, $out, $err) = $self->run_cmd(@$cmd);
		if (!$ok || $err =~ /ERROR|FATAL/)
		{
			$self->oops("$cmd->[0] of dump $d->{id} ($d->{format}) into $db on $node->{name}: $err");
			return 0 unless $ok;
		}
	}
	return 1;
}

sub spare_cluster
{
	my ($self, $ch, $b) = @_;
	return $ch->{spare} if $ch->{spare} && $ch->{spare}{up};
	$self->bound($ch, $b->{node}{name});
	my $node = $self->new_node($ch);
	$node->{pg}->init(allows_streaming => 1);
	$self->conf_node($node);
	$self->start_node($node);
	$ch->{spare} = $node;
	return $node;
}

sub fork_dump
{
	my ($self, $ch, $b, $kind) = @_;
	my $format = $kind eq 'dump_dataonly' ? 'dataonly' : rand() < 0.5 ? 'plain' : 'custom';
	my $d = $self->take_dump($ch, $b, $format) or return;
	# a few steps on the source first: the copy misses them
	$self->run_ops($ch, 1 + int(rand(4)), $b);
	my $node = $kind eq 'dump_cluster' || ($kind eq 'dump_dataonly' && rand() < 0.5)
	  ? $self->spare_cluster($ch, $b) : $b->{node};
	$self->bound($ch, $node->{name}, $b->{node}{name});
	my $db = "app_$ch->{id}_" . ($ch->{branch_n} + 1);
	$self->restore($d, $node, $db) or return;
	my $nb = $self->new_branch($ch, $d->{b}, $kind, $node, $db, "dump $d->{id} ($format) of $d->{b}{id} into $node->{name}");
	$self->fork_log($ch, $kind, [ $d->{b} ], [$nb], $nb->{detail});
	$self->follow($ch, $nb);
}

sub fork_restore_inplace
{
	my ($self, $ch, $b, $d) = @_;
	my $node = $b->{node};
	$self->end_branch($b, 'restored in place');
	$self->restore($d, $node, $b->{db}, 1) or return;
	my $nb = $self->new_branch($ch, $d->{b}, 'restore_inplace', $node, $b->{db},
		"pg_restore --clean --if-exists of dump $d->{id} (of $d->{b}{id}, step $d->{step}) into $b->{id}");
	$nb->{replaced} = $b->{id};
	$self->{rec}{branches}{ $nb->{id} }{replaced} = $b->{id};
	$self->fork_log($ch, 'restore_inplace', [ $d->{b}, $b ], [$nb], $nb->{detail});
	$self->follow($ch, $nb);
}

sub fork_template
{
	my ($self, $ch, $b) = @_;
	$self->bound($ch, $b->{node}{name});
	my $db = "app_$ch->{id}_" . ($ch->{branch_n} + 1);
	$self->disconnect_branch($b);
	my ($ret, $out, $err);
	for (1 .. 20)
	{
		($ret, $out, $err) = $b->{node}{pg}->psql('postgres', qq{CREATE DATABASE "$db" TEMPLATE "$b->{db}"});
		last if $ret == 0;
		nap(0.1);
	}
	$b->{listener} = eval { Hoplock::Listener->new($b->{node}{pg}, $b->{db}) };
	if ($ret && $err =~ /is being accessed by other users/)
	{
		# a session still on the template (a worker coming back, on a
		# loaded machine): no fork this time, which is not a fault
		$self->say("fork template skipped: $db: the template is in use");
		return;
	}
	return $self->oops("CREATE DATABASE $db TEMPLATE $b->{db}: $err") if $ret;
	my $nb = $self->new_branch($ch, $b, 'template', $b->{node}, $db, "CREATE DATABASE $db TEMPLATE $b->{db}");
	$self->fork_log($ch, 'template', [$b], [$nb], $nb->{detail});
	$self->follow($ch, $nb);
}

# Every live branch on $node gets a child on $to (the same database)
sub children
{
	my ($self, $ch, $node, $to, $kind, $detail) = @_;
	my @old = grep { $_->{node} == $node } $self->live_branches($ch);
	my @new;
	for my $b (@old)
	{
		push @new, $self->new_branch($ch, $b, $kind, $to, $b->{db}, $detail);
	}
	return (\@old, \@new);
}

sub fork_crash
{
	my ($self, $ch, $b) = @_;
	my $node = $b->{node};
	my @old = grep { $_->{node} == $node } $self->live_branches($ch);
	$self->final_reads($_) for @old;
	$self->stop_node($node, 'immediate');
	$_->{live} = 0 for @old;
	$self->{rec}{branches}{ $_->{id} }{ended} = 'crash' for @old;
	nap(rand(0.3));
	$self->start_node($node);
	$self->wait_primary($node);
	my @new = map { $self->new_branch($ch, $_, 'crash', $node, $_->{db}, "immediate stop and start of $node->{name}") } @old;
	$self->fork_log($ch, 'crash', \@old, \@new, "immediate stop and start of $node->{name}");
	$self->follow($ch, $_) for @new;
}

sub add_standby
{
	my ($self, $ch, $b, $kind) = @_;
	my $p = $b->{node};
	$self->bound($ch, $p->{name});
	my $bname = 'sb' . ++$self->{node_n};
	$p->{pg}->backup($bname);
	my $s = $self->new_node($ch);
	$s->{pg}->init_from_backup($p->{pg}, $bname, has_streaming => 1);
	$s->{pg}->append_conf('postgresql.conf', "synchronous_standby_names = ''");
	$self->start_node($s);
	$p->{pg}->wait_for_catchup($s->{pg});
	if ($kind eq 'sync')
	{
		$p->{pg}->append_conf('postgresql.conf', "synchronous_standby_names = '$s->{name}'");
		$p->{pg}->reload;
		$p->{pg}->poll_query_until('postgres',
			"SELECT EXISTS (SELECT FROM pg_stat_replication WHERE application_name = '$s->{name}' AND sync_state = 'sync')")
		  or die "the standby did not become synchronous\n";
	}
	$ch->{standby} = { node => $s, primary => $p, kind => $kind, cut => 0, step => $self->{step} };
	$self->say("standby $s->{name} ($kind) of $p->{name} ready");
	$self->count_op("standby_$kind");
}

sub unsync
{
	my ($self, $p) = @_;
	return unless $p->{up};
	$p->{pg}->append_conf('postgresql.conf', "synchronous_standby_names = ''");
	$p->{pg}->reload;
}

sub drop_standby
{
	my ($self, $ch) = @_;
	my $sb = delete $ch->{standby} or return;
	$self->unsync($sb->{primary}) if $sb->{kind} eq 'sync';
	$self->stop_node($sb->{node}, 'immediate') if $sb->{node}{up};
}

# Cut the asynchronous standby off: it never sees what comes after.
sub cut_standby
{
	my ($self, $ch) = @_;
	my $sb = $ch->{standby} or return;
	$self->stop_node($sb->{node}, 'immediate');
	$sb->{cut} = $self->{step};
	$self->say("standby $sb->{node}{name} cut off from $sb->{primary}{name}");
}

sub fork_promote
{
	my ($self, $ch) = @_;
	my $sb = $ch->{standby} or return;
	my ($p, $s) = ($sb->{primary}, $sb->{node});
	my $kind = $sb->{kind} eq 'sync' ? 'promote_sync' : 'promote_async';
	my $split = rand() < 0.5;
	my $detail;
	if ($kind eq 'promote_async')
	{
		$self->cut_standby($ch) unless $sb->{cut};
		$s->{pg}->append_conf('postgresql.conf', "primary_conninfo = ''");
		$self->start_node($s);
		$detail = "asynchronous standby $s->{name} of $p->{name}, cut at step $sb->{cut}";
	}
	else
	{
		$detail = "synchronous standby $s->{name} of $p->{name}";
		if ($split)
		{
			$self->unsync($p);
		}
	}
	my @old = grep { $_->{node} == $p } $self->live_branches($ch);
	$self->final_reads($_) for @old;
	if (!$split)
	{
		$self->stop_node($p, 'immediate');
		for (@old)
		{
			$_->{live} = 0;
			$self->{rec}{branches}{ $_->{id} }{ended} = 'failover';
		}
	}
	$s->{pg}->promote;
	$self->wait_primary($s);
	delete $ch->{standby};
	$detail .= $split ? ', the old primary serving on (split brain)' : ', the old primary stopped';
	my @new = map { $self->new_branch($ch, $_, $kind, $s, $_->{db}, $detail) } @old;
	$self->fork_log($ch, $kind, \@old, \@new, $detail);
	$self->count_op($split ? 'split_brain' : 'failover');
	$self->follow($ch, $_) for @new;
	if ($split)
	{
		# the clients of the old primary carry on there too
		$self->run_ops($ch, 2 + int(rand(4)), $_) for grep { $_->{live} } @old;
	}
}

sub fork_clone
{
	my ($self, $ch, $b) = @_;
	my $node = $b->{node};
	$self->bound($ch, $node->{name});
	my @old = grep { $_->{node} == $node } $self->live_branches($ch);
	$self->final_reads($_) for @old;
	$self->drop_standby($ch) if $ch->{standby} && $ch->{standby}{primary} == $node;
	$self->stop_node($node, 'fast');
	$_->{live} = 0 for @old;
	$self->{rec}{branches}{ $_->{id} }{ended} = 'cloned' for @old;
	my $bname = 'clone' . ++$self->{node_n};
	$node->{pg}->backup_fs_cold($bname);
	my $c = $self->new_node($ch);
	$c->{pg}->init_from_backup($node->{pg}, $bname);
	$c->{pg}->append_conf('postgresql.conf', "synchronous_standby_names = ''");
	$self->start_node($node);
	$self->start_node($c);
	$self->wait_primary($_) for $node, $c;
	my $detail = "data directory of $node->{name} copied while stopped to $c->{name}, both started";
	my @new;
	for my $ob (@old)
	{
		push @new, $self->new_branch($ch, $ob, 'clone', $node, $ob->{db}, "$detail (the original)");
		push @new, $self->new_branch($ch, $ob, 'clone', $c, $ob->{db}, "$detail (the copy)");
	}
	$self->fork_log($ch, 'clone', \@old, \@new, $detail);
	$self->follow($ch, $_) for @new;
}

# A fork of kind $k on branch $b.  Some take steps between their parts:
# a dump taken, the source used on, then restored; a standby added, used,
# cut, the primary used on, then promoted.
sub do_fork
{
	my ($self, $ch, $k, $b) = @_;
	if ($k =~ /^dump_/)
	{
		$self->fork_dump($ch, $b, $k);
	}
	elsif ($k eq 'restore_inplace')
	{
		my @d = grep { $_->{format} eq 'custom' } @{ $ch->{dumps} };
		my $d = @d && rand() < 0.5 ? $d[ int(rand(@d)) ] : $self->take_dump($ch, $b, 'custom');
		return unless $d;
		$self->run_ops($ch, 6 + int(rand(12)), $b);
		return unless $b->{live} && $b->{node}{up};
		$self->fork_restore_inplace($ch, $b, $d);
	}
	elsif ($k eq 'template')
	{
		$self->fork_template($ch, $b);
	}
	elsif ($k eq 'crash')
	{
		$self->fork_crash($ch, $b);
	}
	elsif ($k eq 'clone')
	{
		$self->fork_clone($ch, $b);
	}
	elsif ($k =~ /^promote_(sync|async)$/)
	{
		my $kind = $1;
		$self->drop_standby($ch) if $ch->{standby};
		$self->add_standby($ch, $b, $kind);
		$self->{step}++;
		$self->op_late($ch, $b);
		$self->run_ops($ch, 2 + int(rand(6)), $b);
		return unless $b->{live} && $b->{node}{up};
		if ($kind eq 'async')
		{
			$self->cut_standby($ch);
			# the primary goes on without its standby, busy (term changes
			# number events: a sequence is WAL-logged 32 numbers ahead)
			$self->run_ops($ch, 8 + int(rand(30)), $b, 1);
		}
		$self->fork_promote($ch);
	}
}

sub run_ops
{
	my ($self, $ch, $count, $b, $busy) = @_;
	for (1 .. $count)
	{
		last if mono() > $self->{end};
		my $on = $b;
		if (!$on || !$on->{live} || !$on->{node}{up})
		{
			my @live = $self->live_branches($ch) or return;
			$on = $live[ int(rand(@live)) ];
		}
		$self->{step}++;
		my $k = pick_op($busy);
		$self->do_op($ch, $on, $k);
	}
}

sub run_chain
{
	my ($self, $ch) = @_;
	while (mono() < $self->{end} && $ch->{forks} < $ch->{budget})
	{
		$self->run_ops($ch, 4 + int(rand(8)));
		last if mono() > $self->{end};
		my @live = $self->live_branches($ch) or last;
		my $b = $live[ int(rand(@live)) ];
		my $k = shift(@{ $self->{plan} }) // $FORK_KINDS[ int(rand(@FORK_KINDS)) ];
		# every client has read the branch's events before it forks, so
		# each has a number to resume from after it, however few steps
		# a slow machine left before the fork
		for my $c (@{ $ch->{clients} })
		{
			$self->{step}++;
			$self->op_events($ch, $b, $c);
		}
		$self->{step}++;
		my $ok = eval { $self->do_fork($ch, $k, $b); 1 };
		if (!$ok)
		{
			$self->oops("fork $k on $b->{id}: $@");
			last;
		}
		$self->count_op("fork_$k");
	}
}

sub run
{
	my ($self) = @_;
	$self->{t_start} = mono();
	$self->{end} = mono() + $self->{seconds};
	$self->say("seed $self->{seed}, $self->{seconds} s");
	# every kind of fork in each pass of the plan, in random order
	$self->{plan} = [ shuffle(@FORK_KINDS) ];
	push @{ $self->{plan} }, shuffle(@FORK_KINDS) if $self->{seconds} >= 120;
	while (mono() < $self->{end})
	{
		my $ch = eval { $self->new_chain };
		if (!$ch)
		{
			$self->oops("a new chain: $@");
			last;
		}
		$self->run_chain($ch);
		my $ok = eval { $self->end_chain($ch); 1 };
		$self->oops("the end of chain $ch->{id}: $@") unless $ok;
		last if @{ $self->{errors} } > 20;
		push @{ $self->{plan} }, shuffle(@FORK_KINDS) if !@{ $self->{plan} } && $self->{seconds} >= 120;
	}
	$self->{done} = 1;
	open(my $fh, '>', "$self->{dir}/record.json") or die;
	print $fh JSON::PP->new->canonical->encode($self->{rec});
	close $fh;
}

sub history { return $_[0]{rec}; }

END
{
	for my $run (@RUNS)
	{
		for my $ch (values %{ $run->{chains} // {} })
		{
			for my $node (@{ $ch->{nodes} })
			{
				eval { $node->{pg}->stop('immediate') } if $node->{up};
			}
		}
	}
}

1;
