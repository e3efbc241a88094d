# The README, run: every SQL block, as pasted, top to bottom, in a fresh
# database (the installation for each database in one more; each block by
# psql, stopping at the first error; a block with
# \watch runs until a timeout), with the outputs the README promises; then
# the recipes that need several sessions, with real ones: a handover to a
# waiting follower within milliseconds, a successor that learns of its term
# from the event, and a stuck lease cleared by its operator.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);
use Hoplock::Listener;

my $node = PostgreSQL::Test::Cluster->new('readme');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE readme');

# The ```sql blocks of README.md, in order (those of the SQL edition,
# fenced ```sql (the SQL edition), are not this edition's to run).
open(my $fh, '<', 'README.md') or die "README.md: $!";
my (@blocks, $cur);
while (my $line = <$fh>)
{
	if (!defined $cur && $line =~ /^```sql\s*$/) { $cur = ''; next; }
	if (defined $cur && $line =~ /^```\s*$/) { push @blocks, $cur; undef $cur; next; }
	$cur .= $line if defined $cur;
}
close $fh;
cmp_ok(scalar(@blocks), '>=', 8, scalar(@blocks) . ' SQL blocks in the README');

my %out;
for my $i (0 .. $#blocks)
{
	my $sql = $blocks[$i];
	my ($stdout, $stderr) = ('', '');
	# the installation, "in each database", goes into a database of its own
	# (the quick start before it installed hoplock in this one)
	my $db = 'readme';
	if ($sql =~ /\A-- in each database/)
	{
		$db = 'readme_install_' . ($i + 1);
		$node->safe_psql('postgres', "CREATE DATABASE $db");
	}
	my @cmd = ('psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
		'-h', $node->host, '-p', $node->port, '-d', $db);
	if ($sql =~ /\\watch/)
	{
		# psql repeats it until stopped: let it run three rounds
		my $h = IPC::Run::start(\@cmd, '<', \$sql, '>', \$stdout, '2>', \$stderr,
			IPC::Run::timeout(20));
		my $until = time() + 2.5;
		while (time() < $until)
		{
			$h->pump_nb;
			usleep(50_000);
		}
		# as a user's ^C: psql ends the \watch, then its input
		$h->signal('INT');
		$h->finish;
		is($stderr, '', "block " . ($i + 1) . " (\\watch) runs without errors");
		my $rounds = () = $stdout =~ /report-runner|billing-scheduler/g;
		cmp_ok($rounds, '>', 0, "block " . ($i + 1) . " shows the events");
		next;
	}
	my $t0 = time();
	my $ok = IPC::Run::run(\@cmd, '<', \$sql, '>', \$stdout, '2>', \$stderr,
		IPC::Run::timeout(60));
	my $first = (split /\n/, $sql)[0];
	ok($ok && $stderr !~ /ERROR/, "block " . ($i + 1) . " runs as pasted ($first)")
	  or diag("stderr: $stderr");
	$out{ $i + 1 } = { out => $stdout, secs => time() - $t0, sql => $sql };
}

# What the quick start says it prints.
my ($quick) = grep { $out{$_}{sql} =~ /host-a becomes leader/ } keys %out;
ok(defined $quick, 'the quick start is there');
like($out{$quick}{out}, qr/^host-a:4242\|[1-9][0-9]{17,18}\nt\n\nt\n/,
	'quick start: host-a leads with a generation, host-b gets NULL at once and after waiting, the renewal keeps the generation');
cmp_ok($out{$quick}{secs}, '<', 10, 'and its wait returns after its 2 s timeout');
my ($fenced) = grep { $out{$_}{sql} =~ /invoices_fenced/ } keys %out;
like($out{$fenced}{out}, qr/^t\n/, 'the fencing example releases the term it wrote under');
is($node->safe_psql('readme', 'SELECT count(*) FROM invoices'), '1',
	'and its fenced insert went through');
is($node->safe_psql('readme', q{SELECT count(*) FROM hoplock.hoplock_leases WHERE NOT expired}),
	'0', 'the README leaves no lease held');

# A handover to a waiting follower: within milliseconds of the release.
my @lat;
for my $round (1 .. 5)
{
	$node->safe_psql('readme',
		q{SELECT hoplock.hoplock_acquire('handover', 'leader', '1 min')});
	my $follower = $node->background_psql('readme');
	$follower->query_until(qr/waiting/, q{
		\echo waiting
		SELECT extract(epoch FROM clock_timestamp()) || '|' || generation
		  FROM hoplock.hoplock_wait('handover', 'follower', '1 min', '30 s');
	});
	usleep(200_000);
	my $released = $node->safe_psql('readme', q{
		SELECT extract(epoch FROM clock_timestamp())
		  FROM hoplock.hoplock_release('handover', 'leader') AS r WHERE r});
	my $got = $follower->query_safe('SELECT 1');
	$follower->quit;
	my ($took) = $got =~ /^([0-9.]+)\|/m;
	die "no takeover: $got" unless defined $took && $released ne '';
	push @lat, $took - $released;
	$node->safe_psql('readme', q{SELECT hoplock.hoplock_release('handover', 'follower')});
}
@lat = sort { $a <=> $b } @lat;
cmp_ok($lat[-1], '<', 0.1,
	sprintf('a waiting follower takes over within %.1f ms of the release (worst of 5)', $lat[-1] * 1000));

# A named successor learns of its term from the event.
my $listener = Hoplock::Listener->new($node, 'readme');
$node->safe_psql('readme', q{
	SELECT hoplock.hoplock_acquire('succession', 'host-a', '1 min');
	SELECT hoplock.hoplock_write('succession',
	           (SELECT handle FROM hoplock.hoplock_read('succession')),
	           'host-c', '1 min');
});
my $events = $listener->collect(10, sub {
	grep { $_->{event} eq 'acquired' && $_->{owner} eq 'host-c' } @{ $_[0] } });
my ($mine) = grep { $_->{event} eq 'acquired' && $_->{owner} eq 'host-c' } @$events;
ok($mine, 'the successor hears an "acquired" naming it');
is($node->safe_psql('readme', qq{
	SELECT generation FROM hoplock.hoplock_renew('succession', 'host-c', '1 min', $mine->{generation})}),
	$mine->{generation}, 'and renews the term the event named');
$listener->disconnect;

# A stuck lease: a holder idle in its fenced transaction, cleared by the
# README's recipe as pasted, eight times (the recipe must not race the
# terminated backend's exit).
my ($recipe) = grep { /hoplock_force_release\(/ && /pg_terminate_backend/ } @blocks;
ok(defined $recipe, 'the README has a force-release recipe');
$recipe =~ s/report-runner/stuck/g;
# PostgreSQL 13's pg_terminate_backend cannot wait (the README says so)
my $v13 = $node->safe_psql('readme', 'SHOW server_version_num') < 140000;
$recipe =~ s/pg_terminate_backend\(blocked_by, 5000\)/pg_terminate_backend(blocked_by)/ if $v13;
my $cleared = 0;
my $rounds = 40;
for my $round (1 .. $rounds)
{
	$node->safe_psql('readme', q{SELECT hoplock.hoplock_acquire('stuck', 'hung', '1 min')});
	my $hung = $node->background_psql('readme');
	$hung->query_safe(q{BEGIN; SELECT hoplock.hoplock_fence('stuck', (SELECT generation FROM hoplock.hoplock_read('stuck')))});
	my $hung_pid = $hung->query_safe('SELECT pg_backend_pid()');
	if ($round == 1)
	{
		is($node->safe_psql('readme',
			q{SELECT blocked_by FROM hoplock.hoplock_leases WHERE name = 'stuck'}),
			$hung_pid, 'blocked_by names the session holding it up');
	}
	my ($stdout, $stderr) = ('', '');
	IPC::Run::run([ 'psql', '-X', '-q', '-A', '-t', '-v', 'ON_ERROR_STOP=1',
		'-h', $node->host, '-p', $node->port, '-d', 'readme' ],
		'<', \$recipe, '>', \$stdout, '2>', \$stderr, IPC::Run::timeout(60));
	$cleared++ if $stdout =~ /\nt\n?$/ && $stderr !~ /ERROR/;
	eval { $hung->quit };
	$node->poll_query_until('readme',
		qq{SELECT count(*) = 0 FROM pg_stat_activity WHERE pid = $hung_pid})
	  or die 'the session did not end';
	$node->safe_psql('readme', q{SELECT hoplock.hoplock_force_release('stuck')});
}
SKIP:
{
	skip 'PostgreSQL 13 cannot wait for the terminated backend', 1 if $v13;
	is($cleared, $rounds, "the recipe, as pasted, ends the session and the term ($cleared of $rounds)");
}

$node->stop;
done_testing();
