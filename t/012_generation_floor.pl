# The generation floor across chains of restores, upgrades and promotions:
# no generation of a name is ever handed out twice, and every new one is
# greater than every generation the name had before, anywhere in its
# history -- also on a copy of the data that missed the last grants.
#
#  (a) restore, then promotion of an asynchronous standby: the source is
#      itself a promoted standby (grants on timelines 1, 2 and 3); its
#      dump, with the application's own data, is restored by pg_restore
#      into a new cluster, which gets an asynchronous standby; the standby
#      misses the restored cluster's last grants (of names it had, of a
#      name new there, of a name forgotten before the dump) and is
#      promoted.
#  (b) promotion, restore, promotion: an asynchronous standby that missed
#      the primary's last grants is promoted; its dump is restored (in a
#      single transaction) into a new cluster with a standby made before
#      any grant there, which is promoted after missing all of them.
#  (c) pg_upgrade (15 to 15) of a promoted standby, then promotion of a
#      synchronous standby of the upgraded cluster, which misses nothing.
#
# Every grant is recorded per name, in the order of the real history; each
# must be above every earlier one of its name, and none may repeat.  A
# generation is c << 11 | tag (docs/forks-and-events.md): each is minted
# on a row of hoplock_internal.branch (its tag, c at or above its floor);
# each fork the server sees begins a branch, with the reason it saw
# ('first', 'promotion', 'moved' for another cluster, 'start' for a server
# start or after SQL wrote hoplock's tables, which leaves a 'written' row
# first); the first term on a new branch is above every generation granted
# before it anywhere in the history, of any name.
use strict;
use warnings;
use lib 't/lib';
use Cwd ();
use List::Util qw(max);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my %history;    # name => [ [ generation, where ], ... ] in the order granted
my @floors;     # "where: branch rows", in order
my %seen_branch;    # "node tag/floor" => 1: branches grants were minted on
my $max_granted = 0;    # the greatest generation granted so far, any name

# generation = c << 11 | tag
sub fmt
{
	my ($g) = @_;
	return sprintf('%d (c %d, tag %d)', $g, $g >> 11, $g & 2047);
}

# The branch $g was minted on, as $node's database $db has it: the minting
# branch with its tag and the greatest floor at or below $g's c ('written'
# rows mint nothing).
sub branch_of
{
	my ($node, $db, $g) = @_;
	my $row = $node->safe_psql(
		$db, qq{
		SELECT b.tag, b.floor, b.reason, b.timeline, b.system_identifier, b.database,
		       coalesce(p.reason, '-'), coalesce(p.tag || '/' || p.floor, '-')
		  FROM hoplock_internal.branch AS b
		  LEFT JOIN hoplock_internal.branch AS p
		    ON p.tag = b.parent_tag AND p.started_at = b.parent_started_at
		 WHERE b.tag = (${g}::bigint & 2047) AND b.floor <= (${g}::bigint >> 11)
		   AND b.reason <> 'written'
		 ORDER BY b.floor DESC LIMIT 1});
	my %b;
	@b{qw(tag floor reason timeline system_identifier database parent_reason parent)} = split /\|/, $row;
	return \%b;
}

# $node's identity: "system_identifier|database oid"
sub identity
{
	my ($node, $db) = @_;
	return $node->safe_psql($db,
		q{SELECT (SELECT system_identifier FROM pg_control_system()) || '|' ||
		         (SELECT oid FROM pg_database WHERE datname = current_database())});
}

# The newest branch row $node has: "tag/floor"
sub newest
{
	my ($node, $db) = @_;
	return $node->safe_psql($db,
		q{SELECT tag || '/' || floor FROM hoplock_internal.branch ORDER BY floor DESC LIMIT 1});
}

# The last grant on $node was minted on a branch begun for $reason, on
# $timeline, in this cluster and database; $parent, if given: the reason
# of the branch it forked from, or (as "tag/floor") that branch itself.
sub branch_is
{
	my ($node, $db, $where, $reason, $timeline, $parent) = @_;
	my $b = $node->{hl_last_branch} // {};
	is($b->{reason} // 'none', $reason, "$where: its grants are on a branch begun by '$reason'");
	is($b->{timeline} // -1, $timeline, "$where: begun on timeline $timeline");
	is(($b->{system_identifier} // '') . '|' . ($b->{database} // ''),
		identity($node, $db), "$where: begun in this cluster and database");
	if (defined $parent && $parent =~ m{/})
	{
		is($b->{parent}, $parent, "$where: forked from the newest branch it had ($parent)");
	}
	elsif (defined $parent)
	{
		is($b->{parent_reason}, $parent, "$where: forked from a '$parent' row");
	}
	return;
}

sub history_of
{
	my ($name) = @_;
	return "$name: "
	  . join(', ', map { fmt($_->[0]) . " on $_->[1]" } @{ $history{$name} // [] });
}

sub new_primary
{
	my ($name) = @_;
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init(allows_streaming => 1);
	$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
	return $node;
}

# A streaming standby of $primary, started and caught up.
sub new_standby
{
	my ($primary, $name) = @_;
	$primary->backup("$name-base");
	my $node = PostgreSQL::Test::Cluster->new($name);
	$node->init_from_backup($primary, "$name-base", has_streaming => 1);
	$node->start;
	$primary->wait_for_catchup($node);
	return $node;
}

sub promote
{
	my ($node) = @_;
	$node->promote;
	$node->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
	  or die $node->name . ' did not leave recovery';
	return;
}

# The timeline WAL is being written on.
sub timeline
{
	my ($node) = @_;
	return hex substr(
		$node->safe_psql('postgres',
			'SELECT pg_walfile_name(pg_current_wal_insert_lsn())'),
		0, 8);
}

# Record the branch rows of $db on $node (a standby too: it is read-only).
sub floor
{
	my ($node, $db, $where) = @_;
	my $row = $node->safe_psql(
		$db, q{
		SELECT coalesce(string_agg(format(
		         'tag=%s floor=%s reason=%s parent_tag=%s timeline=%s system_identifier=%s database=%s',
		         tag, floor, reason, parent_tag, timeline, system_identifier, database), '; ' ORDER BY floor),
		       'no row')
		       || format(' [this node: system_identifier=%s database=%s]',
		                 (SELECT system_identifier FROM pg_control_system()),
		                 (SELECT oid FROM pg_database WHERE datname = current_database()))
		  FROM hoplock_internal.branch});
	note("branches on $where: $row");
	push @floors, "$where: $row";
	return;
}

# The restore's writes of hoplock's tables left 'written' rows.
sub written
{
	my ($node, $db, $where) = @_;
	cmp_ok($node->safe_psql($db,
			q{SELECT count(*) FROM hoplock_internal.branch WHERE reason = 'written'}),
		'>', 0, "$where: the restore's writes of hoplock's tables are marked ('written')");
	return;
}

# One new term of each name, each checked against the name's whole history.
sub grant
{
	my ($node, $db, $where, @names) = @_;
	foreach my $name (@names)
	{
		my ($ret, $out, $err) = $node->psql(
			$db, qq{
			SELECT hoplock_force_release('$name');
			SELECT generation FROM hoplock_acquire('$name', '$where', '1 h');},
			on_error_stop => 1);
		my $g = (split /\n/, $out)[-1];
		unless ($ret == 0 && defined $g && $g =~ /^\d+$/)
		{
			fail("$where: $name gets a new generation");
			diag("the acquire failed: $err");
			diag(history_of($name));
			next;
		}
		my $before = max(map { $_->[0] } @{ $history{$name} // [] }) // 0;
		cmp_ok($g, '>', $before,
			"$where: $name gets " . fmt($g) . ', above every earlier generation of it')
		  or diag(history_of($name));
		my $b = branch_of($node, $db, $g);
		ok(defined $b->{tag}, "$where: " . fmt($g) . ' is minted on a branch of this database')
		  or diag($node->safe_psql($db, 'TABLE hoplock_internal.branch'));
		my $key = $node->name . ' ' . ($b->{tag} // '?') . '/' . ($b->{floor} // '?');
		unless ($seen_branch{$key}++)
		{
			# the first grant on a branch: its floor is above every
			# generation granted before, of any name, on any copy
			cmp_ok($b->{floor} // 0, '>', $max_granted >> 11,
				"$where: the branch it begins (tag $b->{tag}, $b->{reason}) starts above every earlier generation ("
				  . fmt($max_granted) . ')');
		}
		$node->{hl_last_branch} = $b;
		$max_granted = $g if $g > $max_granted;
		push @{ $history{$name} }, [ $g, $where ];
	}
	return;
}

# What a copy of the data has as the last generation of $name.
sub stored
{
	my ($node, $db, $name) = @_;
	return $node->safe_psql($db,
		qq{SELECT coalesce((hoplock_read('$name')).generation, 0)});
}

sub last_granted
{
	my ($name) = @_;
	return $history{$name}[-1][0];
}

# --- (a) restore, then promotion of an asynchronous standby ----------------
my $a0 = new_primary('a0');
$a0->start;
$a0->safe_psql('postgres', 'CREATE EXTENSION hoplock');
# the application's own data, dumped and restored along with the leases
$a0->safe_psql(
	'postgres', q{
	CREATE SCHEMA billing;
	CREATE TABLE billing.invoice AS
	  SELECT i AS id, md5(i::text) AS body FROM generate_series(1, 50000) AS i;
	ALTER TABLE billing.invoice ADD PRIMARY KEY (id);
});
grant($a0, 'postgres', 'a0 (timeline 1)', qw(a-job a-job a-forgot));
branch_is($a0, 'postgres', 'a0', 'first', 1);

my $a1 = new_standby($a0, 'a1');
$a0->stop;
my $a1_had = newest($a1, 'postgres');
promote($a1);
is(timeline($a1), 2, 'a1 was promoted to timeline 2');
grant($a1, 'postgres', 'a1 (timeline 2)', qw(a-job a-job a-tl2 a-tl2 a-forgot));
branch_is($a1, 'postgres', 'a1', 'promotion', 2, $a1_had);

my $a2 = new_standby($a1, 'a2');
grant($a1, 'postgres', 'a1 (timeline 2)', qw(a-job a-tl2));
$a1->wait_for_catchup($a2);
$a1->stop;
my $a2_had = newest($a2, 'postgres');
promote($a2);
is(timeline($a2), 3, 'a2 was promoted to timeline 3');
grant($a2, 'postgres', 'a2 (timeline 3)', qw(a-job a-forgot));
branch_is($a2, 'postgres', 'a2', 'promotion', 3, $a2_had);
is( $a2->safe_psql(
		'postgres',
		q{SELECT hoplock_force_release('a-forgot'), hoplock_forget('a-forgot')}),
	't|t',
	'a2: a-forgot released and forgotten before the dump');
floor($a2, 'postgres', 'a2 before the dump');

my $dump_a = PostgreSQL::Test::Utils::tempdir() . '/a.dump';
$a2->command_ok([ 'pg_dump', '-Fc', '-f', $dump_a, '-d', $a2->connstr('postgres') ],
	'a: pg_dump -Fc of a2');

my $ar = new_primary('ar');
$ar->start;
$ar->safe_psql('postgres', 'CREATE DATABASE app');
$ar->command_ok([ 'pg_restore', '-d', $ar->connstr('app'), $dump_a ],
	'a: pg_restore into a new cluster');
floor($ar, 'app', 'ar after the restore');
written($ar, 'app', 'ar');
is($ar->safe_psql('app', 'SELECT count(*) FROM billing.invoice'),
	'50000', 'a: the application data was restored');
is(stored($ar, 'app', 'a-job'), last_granted('a-job'),
	'a: the restored database has the last generation of a-job');

my $as = new_standby($ar, 'as');
grant($ar, 'app', 'ar (timeline 1)', qw(a-job a-tl2));
branch_is($ar, 'app', 'ar', 'start', 1, 'written');
$ar->wait_for_catchup($as);
floor($as, 'app', 'as (standby) after ar\'s first grants');
$as->stop;
# grants the asynchronous standby will never see
grant($ar, 'app', 'ar (timeline 1), missed by as',
	qw(a-job a-job a-tl2 a-late a-late a-forgot));
floor($ar, 'app', 'ar after its last grants');
$ar->stop('immediate');

$as->start;
my $as_had = newest($as, 'app');
promote($as);
floor($as, 'app', 'as after its promotion');
cmp_ok(stored($as, 'app', 'a-job'), '<', last_granted('a-job'),
	'a: the promoted standby missed the last grants of the restored cluster');
grant($as, 'app', 'as (timeline 2)',
	qw(a-job a-tl2 a-late a-forgot a-job a-tl2 a-late a-forgot));
branch_is($as, 'app', 'as', 'promotion', 2, $as_had);
floor($as, 'app', 'as after its grants');
$as->stop;

# --- (b) promotion, restore, promotion --------------------------------------
my $b0 = new_primary('b0');
$b0->start;
$b0->safe_psql('postgres', 'CREATE EXTENSION hoplock');
grant($b0, 'postgres', 'b0 (timeline 1)', qw(b-job b-job b-old));
branch_is($b0, 'postgres', 'b0', 'first', 1);
my $b1 = new_standby($b0, 'b1');
$b1->stop;
grant($b0, 'postgres', 'b0 (timeline 1), missed by b1', qw(b-job b-job b-late));
$b0->stop('immediate');

$b1->start;
my $b1_had = newest($b1, 'postgres');
promote($b1);
cmp_ok(stored($b1, 'postgres', 'b-job'), '<', last_granted('b-job'),
	'b: the promoted standby missed the last grants of its primary');
grant($b1, 'postgres', 'b1 (timeline 2)', qw(b-job b-late b-old b-job));
branch_is($b1, 'postgres', 'b1', 'promotion', 2, $b1_had);
floor($b1, 'postgres', 'b1 before the dump');

my $dump_b = PostgreSQL::Test::Utils::tempdir() . '/b.dump';
$b1->command_ok([ 'pg_dump', '-Fc', '-f', $dump_b, '-d', $b1->connstr('postgres') ],
	'b: pg_dump -Fc of b1');
$b1->stop;

my $br = new_primary('br');
$br->start;
$br->safe_psql('postgres', 'CREATE DATABASE restored');
$br->command_ok(
	[ 'pg_restore', '--single-transaction', '-d', $br->connstr('restored'), $dump_b ],
	'b: pg_restore --single-transaction into a new cluster');
floor($br, 'restored', 'br after the restore');
written($br, 'restored', 'br');

# a standby made before any term began in the restored database
my $bs = new_standby($br, 'bs');
$bs->stop;
grant($br, 'restored', 'br (timeline 1), missed by bs',
	qw(b-job b-job b-late b-old b-new));
branch_is($br, 'restored', 'br', 'start', 1, 'written');
floor($br, 'restored', 'br after its grants');
$br->stop('immediate');

$bs->start;
floor($bs, 'restored', 'bs (standby) before its promotion');
my $bs_had = newest($bs, 'restored');
promote($bs);
cmp_ok(stored($bs, 'restored', 'b-job'), '<', last_granted('b-job'),
	'b: the promoted standby missed the grants of the restored cluster');
grant($bs, 'restored', 'bs (timeline 2)', qw(b-job b-late b-old b-new b-job));
branch_is($bs, 'restored', 'bs', 'promotion', 2, $bs_had);
floor($bs, 'restored', 'bs after its grants');
$bs->stop;

# --- (c) pg_upgrade, then promotion of a synchronous standby -----------------
my $c0 = new_primary('c0');
$c0->start;
$c0->safe_psql('postgres', 'CREATE EXTENSION hoplock');
grant($c0, 'postgres', 'c0 (timeline 1)', qw(c-job c-job c-forgot));
branch_is($c0, 'postgres', 'c0', 'first', 1);
my $c1 = new_standby($c0, 'c1');
$c0->stop;
my $c1_had = newest($c1, 'postgres');
promote($c1);
grant($c1, 'postgres', 'c1 (timeline 2)', qw(c-job c-tl2 c-forgot c-job));
branch_is($c1, 'postgres', 'c1', 'promotion', 2, $c1_had);
is( $c1->safe_psql(
		'postgres',
		q{SELECT hoplock_force_release('c-forgot'), hoplock_forget('c-forgot')}),
	't|t',
	'c1: c-forgot released and forgotten before the upgrade');
floor($c1, 'postgres', 'c1 before the upgrade');
my $c1_identity = identity($c1, 'postgres');
$c1->stop;

my $cu = new_primary('cu');
# (PostgreSQL 13's PostgresNode has no config_data: the pg_config on PATH is
# the same installation)
my $bindir = $cu->can('config_data') ? $cu->config_data('--bindir') : `pg_config --bindir`;
chomp $bindir;
{
	# pg_upgrade writes its files in the current directory
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $cwd = Cwd::getcwd();
	chdir $dir or die "chdir $dir: $!";
	command_ok(
		[
			"$bindir/pg_upgrade",
			# --no-sync came with PostgreSQL 15
			(`$bindir/pg_upgrade --help` =~ /--no-sync/ ? ('--no-sync') : ()),
			'-d', $c1->data_dir,
			'-D', $cu->data_dir,
			'-b', $bindir,
			'-B', $bindir,
			'-s', $cu->host,
			'-p', $c1->port,
			'-P', $cu->port
		],
		'c: pg_upgrade of c1 into a new cluster');
	chdir $cwd or die "chdir $cwd: $!";
}
$cu->start;
floor($cu, 'postgres', 'cu after the upgrade');
is(stored($cu, 'postgres', 'c-job'), last_granted('c-job'),
	'c: the upgraded cluster has the last generation of c-job');

my $cs = new_standby($cu, 'cs');
$cu->append_conf('postgresql.conf', "synchronous_standby_names = 'cs'");
$cu->reload;
$cu->poll_query_until('postgres',
	q{SELECT sync_state = 'sync' FROM pg_stat_replication WHERE application_name = 'cs'})
  or die 'cs is not a synchronous standby';
grant($cu, 'postgres', 'cu (timeline 1)',
	qw(c-job c-tl2 c-forgot c-new c-job c-forgot));
# pg_upgrade copies the files, and its own runs of the clusters (binary
# upgrade mode) write nothing: the first branch in the new cluster, begun
# by its first grant, says it moved from c1's newest (its promotion's)
branch_is($cu, 'postgres', 'cu', 'moved', 1, 'promotion');
is( $cu->safe_psql(
		'postgres', q{
		SELECT m.system_identifier || '|' || m.database || ' from ' || p.system_identifier || '|' || p.database
		  FROM hoplock_internal.branch AS m
		  JOIN hoplock_internal.branch AS p ON p.tag = m.parent_tag AND p.started_at = m.parent_started_at
		 WHERE m.reason = 'moved'}),
	identity($cu, 'postgres') . " from $c1_identity",
	'cu: one branch moved, into this cluster from c1\'s');
floor($cu, 'postgres', 'cu after its grants');
$cu->stop('immediate');

my $cs_had = newest($cs, 'postgres');
promote($cs);
is(stored($cs, 'postgres', 'c-job'), last_granted('c-job'),
	'c: the promoted synchronous standby has every grant of the upgraded cluster');
grant($cs, 'postgres', 'cs (timeline 2)', qw(c-job c-tl2 c-forgot c-new c-job));
branch_is($cs, 'postgres', 'cs', 'promotion', 2, $cs_had);
floor($cs, 'postgres', 'cs after its grants');
$cs->stop;

# --- The whole history -------------------------------------------------------
foreach my $name (sort keys %history)
{
	my @g = map { $_->[0] } @{ $history{$name} };
	my %count;
	$count{$_}++ for @g;
	my @repeated = grep { $count{$_} > 1 } sort { $a <=> $b } keys %count;
	is("@repeated", '', "$name: no generation handed out twice")
	  or diag(history_of($name));
	my $ok = 1;
	for my $i (1 .. $#g)
	{
		$ok = 0 if $g[$i] <= max(@g[ 0 .. $i - 1 ]);
	}
	ok($ok, "$name: every generation above all earlier ones, in the order granted ("
		  . scalar(@g) . ' grants)')
	  or diag(history_of($name));
}

unless (Test::More->builder->is_passing)
{
	diag("history of every name:");
	diag(history_of($_)) foreach sort keys %history;
	diag("branch rows:");
	diag($_) foreach @floors;
}

done_testing();
