# Durability: a grant survives a crash even under synchronous_commit = off,
# so no generation is handed out twice; the lease state survives pg_dump and
# pg_restore, and generations keep rising after the restore.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
# Asynchronous commits stay in WAL buffers for up to wal_writer_delay.
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
synchronous_commit = off
wal_writer_delay = 10s
wal_writer_flush_after = 0
});
$node->start;
$node->safe_psql('postgres',
	'SET synchronous_commit = on; CREATE EXTENSION hoplock; CREATE TABLE plain (x int)');

# The branch a generation was minted on (its low 11 bits are the tag of a
# row of hoplock_internal.branch, its high bits above that row's floor), and
# the newest branch: "tag reason floor", read from the server.
sub branch_of
{
	my ($db, $g) = @_;
	return $node->safe_psql($db,
		qq{SELECT tag || ' ' || reason || ' ' || floor FROM hoplock_internal.branch
		    WHERE tag = (${g}::bigint & 2047) AND floor <= (${g}::bigint >> 11)
		    ORDER BY floor DESC LIMIT 1});
}

sub newest_branch
{
	my ($db) = @_;
	return $node->safe_psql($db,
		q{SELECT tag || ' ' || reason || ' ' || floor FROM hoplock_internal.branch
		   ORDER BY floor DESC LIMIT 1});
}

# --- Crash right after a grant ---------------------------------------------
my %granted;    # name => generation granted before the crashes
$granted{job} = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('job', 'a', '1 h')});
like($granted{job}, qr/^\d+$/, 'first term granted');
is(branch_of('postgres', $granted{job}), newest_branch('postgres'),
	"its generation ($granted{job}) is minted on the database's branch");
# A grant, then an ordinary asynchronous commit after it as a control: the
# crash loses the control, and the grant survives.  Any synchronous commit in
# between (the expiry worker's, say) flushes the control along with its own
# WAL; such a round proves nothing, so it is repeated with a new name, up to
# five times, until the control is lost.  Every grant must survive.
my ($control_lost, $grants_kept) = (0, 1);
for my $round (1 .. 5)
{
	my $name = $round == 1 ? 'job' : "job-$round";
	$granted{$name} = $node->safe_psql('postgres',
		qq{SELECT generation FROM hoplock_acquire('$name', 'a', '1 h')})
	  if $round > 1;
	$node->safe_psql('postgres', 'INSERT INTO plain VALUES (1)');
	$node->stop('immediate');
	$node->start;
	$grants_kept = 0
	  unless $node->safe_psql('postgres',
		qq{SELECT owner || '/' || generation FROM hoplock_holder('$name')}) eq
	  "a/$granted{$name}";
	if ($node->safe_psql('postgres', 'SELECT count(*) FROM plain') eq '0')
	{
		$control_lost = 1;
		last;
	}
	note "round $round: the control commit was flushed before the crash";
	$node->safe_psql('postgres',
		'SET synchronous_commit = on; TRUNCATE plain');
}
# On PostgreSQL 17 an asynchronous commit's WAL reached the kernel at once
# in every try (without hoplock too), and an immediate stop loses only what
# the server has not written: there the control cannot be shown, only the
# grants' survival.
SKIP:
{
	skip 'this PostgreSQL wrote every asynchronous commit before the stop', 1
	  if !$control_lost
	  && $node->safe_psql('postgres', 'SHOW server_version_num') >= 170000;
	ok($control_lost,
		'control: an asynchronous commit before the crash was lost');
}
ok($grants_kept, 'the grant survived the crash');

# The next term gets a new generation, above the first (never the first
# again), on the branch the crash recovery began.
$node->safe_psql('postgres', q{SELECT hoplock_force_release('job')});
my $before_crash = newest_branch('postgres');
$node->stop('immediate');
$node->start;
my $next = $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('job', 'b', '1 h')});
cmp_ok($next, '>', $granted{job},
	"after a crash the release held and the next term ($next) is above the first ($granted{job})");
my $after_crash = branch_of('postgres', $next);
like($after_crash, qr/^\d+ start \d+$/, 'it is minted on a branch begun by the start');
isnt($after_crash, $before_crash, 'a new branch, not the one before the crash');
cmp_ok((split / /, $after_crash)[2], '>', $granted{$_} >> 11,
	"whose floor is above ${_}'s generation before the crash")
  foreach sort keys %granted;

# Renewals and releases are forced to disk too.
my $expires = $node->safe_psql('postgres',
	q{SELECT expires_at FROM hoplock_renew('job', 'b', '2 h')});
$node->stop('immediate');
$node->start;
is( $node->safe_psql(
		'postgres', q{SELECT expires_at FROM hoplock_holder('job')}),
	$expires,
	'a renewal survived the crash');
$node->safe_psql('postgres', q{SELECT hoplock_release('job', 'b')});
$node->stop('immediate');
$node->start;
is($node->safe_psql('postgres', q{SELECT hoplock_read('job') IS NULL}),
	't', 'a release survived the crash');

# --- pg_dump and pg_restore ------------------------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE src');
$node->safe_psql('src', 'CREATE EXTENSION hoplock');
my %src;    # name => every generation src granted, in order
foreach my $call (
	[ 'dumped', 'a' ], [ 'dumped', 'b' ], [ 'held', 'c' ], [ 'gone', 'd' ])
{
	my ($name, $owner) = @$call;
	$node->safe_psql('src', qq{SELECT hoplock_force_release('$name')});
	push @{ $src{$name} }, $node->safe_psql('src',
		qq{SELECT generation FROM hoplock_acquire('$name', '$owner', '1 h')});
}
$node->safe_psql('src', q{SELECT hoplock_release('gone', 'd')});
my $running = $node->safe_psql('src',
	q{SELECT string_agg(name || '/' || owner || '/' || generation, ' ' ORDER BY name) FROM hoplock_leases});
is($running, "dumped/b/$src{dumped}[-1] held/c/$src{held}[-1]",
	'src holds the terms it granted');
my $dump = $node->basedir . '/hoplock.dump';
$node->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $node->connstr('src') ],
	'pg_dump of a database using hoplock');
# src goes on granting after the dump was taken: the restored copy never
# saw these terms
foreach my $name (qw(dumped held gone))
{
	$node->safe_psql('src', qq{SELECT hoplock_force_release('$name')});
	push @{ $src{$name} }, $node->safe_psql('src',
		qq{SELECT generation FROM hoplock_acquire('$name', 'after-dump', '1 h')});
}
$node->safe_psql('postgres', 'CREATE DATABASE dst');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('dst'), $dump ],
	'pg_restore of it');

is( $node->safe_psql(
		'dst', q{SELECT string_agg(name || '/' || owner || '/' || generation, ' ' ORDER BY name) FROM hoplock_leases}),
	$running,
	'running terms restored');
is( $node->safe_psql(
		'dst', q{SELECT hoplock_read('gone') IS NULL}),
	't',
	'a released lease is still released');
$node->safe_psql('dst',
	q{SELECT hoplock_force_release('dumped'), hoplock_force_release('held')});
# The restore's writes of hoplock's tables left a "written" row; the
# restored copy's first term begins a new branch of its own, in dst, above
# every value in the data and above the clock: so above every generation
# the original database handed out, also after the dump was taken.
cmp_ok($node->safe_psql('dst',
		q{SELECT count(*) FROM hoplock_internal.branch WHERE reason = 'written'}),
	'>', 0, 'the restore\'s writes of hoplock\'s tables are marked in the branch table');
my %dst = map { split /\|/ } split /\n/, $node->safe_psql(
	'dst',
	q{SELECT n, (hoplock_acquire(n, 'e', '1 h')).generation FROM unnest(ARRAY['dumped', 'held', 'gone']) AS n});
foreach my $name (qw(dumped held gone))
{
	cmp_ok($dst{$name} // 0, '>', $src{$name}[-1],
		"after the restore $name ($dst{$name}) continues above every generation src granted it (@{ $src{$name} })");
}
note "dst's branches (tag reason floor parent_tag database):\n" . $node->safe_psql('dst',
	q{SELECT tag, reason, floor, parent_tag, database FROM hoplock_internal.branch ORDER BY floor});
my ($dst_tag, $dst_reason, $dst_floor) = split / /, branch_of('dst', $dst{dumped});
is("$dst_tag $dst_reason $dst_floor", newest_branch('dst'),
	'the restored copy grants on its newest branch');
is( $node->safe_psql('dst',
		qq{SELECT database = (SELECT oid FROM pg_database WHERE datname = 'dst')
		     FROM hoplock_internal.branch WHERE tag = $dst_tag AND floor = $dst_floor}),
	't', 'a branch begun in dst, not one of src\'s restored rows');
is( $node->safe_psql('src',
		qq{SELECT count(*) FROM hoplock_internal.branch WHERE tag = $dst_tag AND floor = $dst_floor}),
	'0', 'and src has no such branch');

$node->stop;
done_testing();
