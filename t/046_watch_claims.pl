# hoplock_watch sleepers of a database are woken by that database's events
# alone, however many databases watched before.  (It failed when the
# per-database condition variables were claimed for good: once 256
# databases had watched -- a CREATEDB role copying a database it owns
# 256 times, or a CI server's churn of test databases -- every later
# database shared one of 64 buckets, and each commit with events in one
# database woke the watchers of the others in its bucket.  Watchers now
# sleep on an entry of the table of names waited for, made by the first
# and removed by the last.)
#
# It takes minutes (321 databases): it runs with HOPLOCK_LONG_TESTS=1.
#
# 256 databases are created, watched in and dropped; then 65 more each get
# a watcher, which by the pigeonhole principle puts two in one bucket if
# claims are never given back.  Each database in turn commits events: its
# own watcher returns, and no other may be woken.  Wake-ups are counted
# from the watchers' voluntary context switches (Linux).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

plan skip_all => 'needs /proc/PID/status (Linux)' unless -r "/proc/$$/status";
plan skip_all => 'takes minutes: set HOPLOCK_LONG_TESTS=1' unless $ENV{HOPLOCK_LONG_TESTS};

my $node = PostgreSQL::Test::Cluster->new('watch_claims');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.databases = 'postgres'
max_connections = 100
fsync = off
});
$node->start;
$node->safe_psql('postgres', q{CREATE DATABASE tpl});
$node->safe_psql('tpl', q{CREATE SCHEMA hoplock; CREATE EXTENSION hoplock SCHEMA hoplock});

my $strategy = $node->safe_psql('postgres', 'SHOW server_version_num') >= 150000
  ? 'STRATEGY FILE_COPY' : '';
for my $i (1 .. 256)
{
	$node->safe_psql('postgres', "CREATE DATABASE gone$i TEMPLATE tpl $strategy");
	$node->safe_psql("gone$i",
		q{SELECT count(*) FROM hoplock.hoplock_watch(0, '0')});
	$node->safe_psql('postgres', "DROP DATABASE gone$i");
}
pass('256 databases watched in and dropped');

my $n = 65;
my (@h, @out, @pid);
for my $i (1 .. $n)
{
	$node->safe_psql('postgres', "CREATE DATABASE w$i TEMPLATE tpl $strategy");
	$out[$i] = '';
	$h[$i] = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr("w$i"), '-c',
		  "SET application_name = 'watch$i'; SELECT count(*) FROM hoplock.hoplock_watch(hoplock.hoplock_position(), '10 min')" ],
		'>', \$out[$i], '2>&1');
}
$node->poll_query_until('postgres', qq{
	SELECT count(*) = $n FROM pg_stat_activity
	 WHERE application_name LIKE 'watch%' AND wait_event_type = 'Extension'})
  or die 'the watchers did not start';
for my $i (1 .. $n)
{
	$pid[$i] = $node->safe_psql('postgres',
		"SELECT pid FROM pg_stat_activity WHERE application_name = 'watch$i'");
}

sub switches
{
	my ($p) = @_;
	open(my $fh, '<', "/proc/$p/status") or return undef;
	while (<$fh>)
	{
		return $1 if /^voluntary_ctxt_switches:\s+(\d+)/;
	}
	return undef;
}

my $commits = 100;
my $script = join('',
	map { "SELECT hoplock.hoplock_acquire('n', 'o', '1 min'); SELECT hoplock.hoplock_release('n', 'o');\n" }
	  1 .. $commits / 2);
my @woken;
for my $j (1 .. $n)
{
	my %before;
	for my $i ($j + 1 .. $n)
	{
		$before{$i} = switches($pid[$i]);
	}
	$node->psql("w$j", $script);
	for my $i ($j + 1 .. $n)
	{
		my $after = switches($pid[$i]);
		next unless defined $before{$i} && defined $after;
		push @woken, "w$i by w$j: " . ($after - $before{$i})
		  if $after - $before{$i} > $commits / 2;
	}
}
note("woken by another database's commits: @woken") if @woken;
is(scalar(@woken), 0,
	"no watcher is woken by another database's events after 256 databases watched and went");

$node->safe_psql('postgres',
	q{SELECT pg_cancel_backend(pid) FROM pg_stat_activity WHERE application_name LIKE 'watch%'});
$_->finish for @h[1 .. $n];
done_testing();
