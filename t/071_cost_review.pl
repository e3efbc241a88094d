# What a review of the acquire-cost changes (7bc7afc..54aa42e) found, with
# a reproduction that failed before its fix (1: a key that cannot be
# computed now wakes every waiter of the database), and one case it
# checked that held (2), kept as a regression test.  Both inject what cannot be timed from
# SQL with gdb attached to a backend; skipped where gdb is missing or
# cannot attach.
#
# 1. ebe6f34 moved the waiters' key (a SHA-256 digest) to the end of the
#    transaction, after the locks are released, where it "must raise no
#    error": if hl_wait_key_try() fails there, broadcast() skips the
#    wake-up.  Its commit message, the comment on broadcast() and
#    bench/HISTORY.md §14 say the waiters then "look again by themselves,
#    at least every second".  They do not: a hoplock_wait that found the
#    lease held sleeps until the term's expires_at (wait.c caps the sleep
#    at SLEEP_MAX_MS only for a lease not held), so a release whose digest
#    fails at the end leaves every waiter asleep for the rest of the TTL --
#    the contract's "wakes within milliseconds of a release" lost without
#    an error.  Before ebe6f34 the key was computed when the wake-up was
#    queued, where a failure raised an error inside the call.  The failure
#    is injected here by making hl_sha256_try() return false when called
#    from hl_wait_key_try() (with OpenSSL, pg_cryptohash_init/update/final
#    can return -1: an OpenSSL error, an allocation failure).
#
# 2. 54aa42e: the second read of the lease (after the term lock) goes to the
#    TID the first read found.  Between the two reads, the holder renews
#    (HOT updates), VACUUM prunes and the freed line pointers are reused by
#    other names; the release must still end the newest version of the term.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time);

my $gdb = `command -v gdb 2>/dev/null`;
chomp $gdb;
plan skip_all => 'gdb is not installed' unless $gdb;
# the breakpoint's condition ($_caller_is) needs gdb's Python
plan skip_all => 'gdb has no Python'
  unless `$gdb -batch -ex 'python print(6*7)' 2>&1` =~ /^42$/m;

my $node = PostgreSQL::Test::Cluster->new('cost_review');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

# A session kept open, fed statements one at a time.
sub session
{
	my $s = { in => '', out => '' };
	$s->{h} = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres') ],
		'<', \$s->{in}, '>', \$s->{out}, '2>&1');
	return $s;
}

sub run_in
{
	my ($s, $sql, $marker) = @_;
	$s->{out} = '';
	$s->{in} .= "$sql\n\\echo $marker\n";
	$s->{h}->pump until $s->{out} =~ /\Q$marker\E\n/;
	my $out = $s->{out};
	$out =~ s/\Q$marker\E\n//;
	return $out;
}

# gdb attached to "pid" in the background, running "cmds"; detaches itself.
sub gdb_attach
{
	my ($pid, $cmds) = @_;
	my $file = $node->basedir . "/gdb_$pid.cmd";
	open my $fh, '>', $file or die;
	print $fh "set pagination off\nset confirm off\n$cmds\ncontinue\n";
	close $fh;
	my $out = '';
	my $h = IPC::Run::start([ $gdb, '-batch', '-x', $file, '-p', $pid ],
		'>', \$out, '2>&1', IPC::Run::timeout(120));
	# attached once the breakpoint is set
	my $t = time;
	$h->pump while $out !~ /Breakpoint 1 at/ && time - $t < 30;
	return { h => $h, out => \$out };
}

my $probe = session();
my $probe_pid = run_in($probe, 'SELECT pg_backend_pid();', 'PROBE');
chomp $probe_pid;
my $try = `$gdb -batch -p $probe_pid -ex 'info inferiors' 2>&1`;
plan skip_all => "gdb cannot attach to a backend: $try"
  unless $try =~ /process $probe_pid/ && $try !~ /ptrace: Operation not permitted/;
$probe->{in} .= "\\q\n";
$probe->{h}->finish;

# --- 1. a digest that fails at the end of a release: the wake-up is lost ---
{
	my $ttl = 20;
	q1(qq{SELECT hoplock_acquire('lost', 'A', '$ttl s')});
	my $waker = session();
	my $pid = run_in($waker, 'SELECT pg_backend_pid();', 'W0');
	chomp $pid;
	my $g = gdb_attach($pid, <<'EOF');
break hl_sha256_try if $_caller_is("hl_wait_key_try")
commands
silent
printf "injected: hl_sha256_try -> false\n"
return 0
detach
quit
end
EOF

	my $wout = '';
	my $w = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c',
		  q{SELECT (hoplock_wait('lost', 'B', '1 min', '40 s')).owner} ],
		'>', \$wout, '2>&1');
	$node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM hoplock_candidates WHERE name = 'lost'})
	  or die 'B is not waiting';
	my $released = time;
	is(run_in($waker, q{SELECT hoplock_release('lost', 'A');}, 'W1'), "t\n",
		'A released the lease');
	$w->finish;
	my $waited = time - $released;
	$g->{h}->finish;
	like(${ $g->{out} }, qr/injected/, 'the digest at the end of the release failed (injected)');
	is($wout, "B\n", 'B took the lease');
	cmp_ok($waited, '<', 2,
		"B took it within a second or so of the release, not at the term's expiry ${ttl}s later (took ${waited}s)");
	$waker->{in} .= "\\q\n";
	$waker->{h}->finish;
}

# --- 2. held: the TID fast path, with pruning and reuse between the reads ---
{
	q1(q{SELECT hoplock_acquire('p', 'o1', '1 min')});
	q1(q{SELECT hoplock_renew('p', 'o1', '1 min')});
	my $s1 = session();
	my $pid = run_in($s1, 'SELECT pg_backend_pid();', 'S0');
	chomp $pid;
	my $connstr = $node->connstr('postgres');
	my $between = join(' ', map { "-c \"$_\"" }
		  "SELECT hoplock_renew('p','o1','2 min')",
		  "SELECT hoplock_renew('p','o1','3 min')",
		  'VACUUM hoplock_internal.lease',
		  "SELECT hoplock_renew('p','o1','4 min')",
		  "SELECT hoplock_renew('p','o1','5 min')",
		  "SELECT hoplock_acquire('q' || g, 'x', '1 min') FROM generate_series(1, 3) g");
	my $g = gdb_attach($pid, <<"EOF");
break hl_term_trylock
commands
silent
printf "stopped between the two reads\\n"
shell psql -XAtq -d '$connstr' $between > /dev/null
detach
quit
end
EOF
	is(run_in($s1, q{SELECT hoplock_release('p', 'o1');}, 'S1'), "t\n",
		'the release, its term renewed and pruned between its two reads, ends the term');
	$g->{h}->finish;
	like(${ $g->{out} }, qr/stopped between/, 'the renewals and VACUUM ran between the reads');
	is(q1(q{SELECT state FROM hoplock_internal.lease WHERE name = 'p'}), 'r',
		'the newest version was released');
	is(q1(q{SELECT count(*) FROM hoplock_internal.history WHERE name = 'p' AND how = 'released'}),
		'1', 'one term ended, once');
	$s1->{in} .= "\\q\n";
	$s1->{h}->finish;
}

$node->stop;
done_testing();
