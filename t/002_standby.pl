# Hot standby and promotion: reads work on a standby, writes and fences
# fail with 25006, and an asynchronous standby promoted after missing the
# last grants hands out generations above every one the old primary gave.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION hoplock');
my $first = $primary->safe_psql('postgres',
	q{SELECT (hoplock_acquire('job', 'a', '1 h')).generation,
	         hoplock_acquire('other', 'a', '1 h'), hoplock_acquire('short', 'a', '3 s')});
$first =~ s/\|.*//;

$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
$primary->wait_for_catchup($standby);

# --- Reads on the hot standby ----------------------------------------------
is( $standby->safe_psql(
		'postgres', q{SELECT owner || '/' || generation FROM hoplock_holder('job')}),
	"a/$first",
	'hoplock_holder works on a hot standby');
is( $standby->safe_psql(
		'postgres', q{SELECT count(*) FROM hoplock_leases}),
	'3',
	'hoplock_leases works on a hot standby');
is($standby->safe_psql('postgres', q{SELECT count(*) FROM hoplock_workers}),
	'0', 'a hot standby runs no expiry worker');

# The event stream is the primary's: a standby cannot see which numbers
# the primary's commits under way hold, so it could skip an event for good.
for my $call (q{SELECT count(*) FROM hoplock_watch(0, '1 s')},
	q{SELECT hoplock_position()}, q{SELECT count(*) FROM hoplock_events(0)})
{
	my ($ret, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\n$call");
	like($err, qr/ERROR:  0A000: .* cannot be read on a standby/,
		"$call on a standby fails with 0A000");
}

# --- Writes on the hot standby ---------------------------------------------
foreach my $call (
	q{hoplock_acquire('job', 'b', '1 h')},
	q{hoplock_renew('job', 'a', '1 h')},
	q{hoplock_release('job', 'a')},
	q{hoplock_force_release('job')},
	q{hoplock_write('job', NULL, 'b', '1 h')},
	q{hoplock_delete('job', 'x')},
	qq{hoplock_fence('job', $first)})
{
	my ($ret, $out, $err) = $standby->psql('postgres',
		"\\set VERBOSITY verbose\nSELECT $call");
	like($err, qr/ERROR:  25006: cannot execute hoplock_\w+\(\) (in a read-only transaction|during recovery)/,
		"$call on a standby fails with 25006");
}

# --- Promotion of a standby that missed the last grants --------------------
$standby->stop;
my @on_primary = ($first);
foreach my $owner (qw(b c))
{
	my $prev = $owner eq 'b' ? 'a' : 'b';
	$primary->safe_psql('postgres', qq{SELECT hoplock_release('job', '$prev')});
	push @on_primary, $primary->safe_psql('postgres',
		qq{SELECT generation FROM hoplock_acquire('job', '$owner', '1 h')});
}
my $last_on_primary = $primary->safe_psql('postgres',
	q{SELECT generation FROM hoplock_holder('job')});
ok( $on_primary[0] < $on_primary[1] && $on_primary[1] < $on_primary[2]
	  && $last_on_primary eq $on_primary[2],
	"the old primary granted three terms of job, each above the last (@on_primary)");
# the greatest value the old primary handed out (the lease rows'
# generations and versions), and its branches, read before it dies
my $primary_max = $primary->safe_psql('postgres',
	q{SELECT max(greatest(generation, version)) FROM hoplock_internal.lease});
my $primary_branches = $primary->safe_psql('postgres',
	q{SELECT string_agg(tag || '/' || floor, ' ' ORDER BY floor) FROM hoplock_internal.branch});
$primary->stop('immediate');

$standby->start;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby did not leave recovery';

is( $standby->safe_psql(
		'postgres', q{SELECT owner || '/' || generation FROM hoplock_holder('job')}),
	"a/$first",
	'the promoted standby missed the last grants');
$standby->safe_psql('postgres', q{SELECT hoplock_force_release('job')});
# the worker starts after promotion, and announces what lapsed meanwhile
$standby->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE pid IS NOT NULL})
  or die 'no worker after promotion';
pass('after promotion the expiry worker starts');
$standby->poll_query_until('postgres',
	q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'short'})
  or die 'not announced after promotion';
pass('and announces the term that lapsed while it was a standby');

my $next = $standby->safe_psql('postgres',
	q{SELECT generation FROM hoplock_acquire('job', 'd', '1 h')});
cmp_ok($next, '>', $last_on_primary,
	"the first term after promotion ($next) is above every term of the old primary");
cmp_ok($next, '>', $primary_max,
	'and above every generation and row version the old primary wrote');

# The promotion began a branch: a row with reason 'promotion' on the new
# timeline, child of a branch of the old primary, with a floor above every
# value the old primary minted (those the standby missed too: they were
# minted earlier in real time), and the first term after promotion is
# minted on it.
my ($p_tag, $p_floor, $p_parent, $p_timeline) = split /\|/, $standby->safe_psql('postgres',
	q{SELECT tag, floor, parent_tag, timeline FROM hoplock_internal.branch
	   WHERE reason = 'promotion'});
ok(defined $p_tag, 'the promotion began a branch (reason promotion)');
is($p_timeline // '', 2, 'on the new timeline');
like($primary_branches, qr{(^| )\Q$p_parent\E/}, 'forked from a branch of the old primary')
  if defined $p_parent;
cmp_ok($p_floor // 0, '>', $primary_max >> 11,
	'its floor is above every value of the old primary');
is($next & 2047, $p_tag // -1, 'the first term after promotion carries its tag');
cmp_ok($next >> 11, '>=', $p_floor // 0, 'and is at or above its floor');

# A name the old primary never had is minted on the promotion's branch too;
# later terms on the same timeline go on above, on the same branch.
my $new_name = $standby->safe_psql(
	'postgres', q{SELECT generation FROM hoplock_acquire('new-name', 'd', '1 h')});
ok( ($new_name & 2047) == ($p_tag // -1) && ($new_name >> 11) >= ($p_floor // 0),
	"a new name on the new timeline ($new_name) is minted on the promotion's branch");
cmp_ok($new_name, '>', $primary_max, 'above every value of the old primary');
$standby->safe_psql('postgres', q{SELECT hoplock_release('job', 'd')});
my $after = $standby->safe_psql(
	'postgres', q{SELECT generation FROM hoplock_acquire('job', 'e', '1 h')});
cmp_ok($after, '>', $next, "the next term on the same timeline ($after) is higher");
is($after & 2047, $p_tag // -1, 'on the same branch');
# A fence with the term the standby missed is refused; the running one passes.
my ($ret, $out, $err) = $standby->psql('postgres',
	"\\set VERBOSITY verbose\nBEGIN;\nSELECT hoplock_fence('job', $last_on_primary);\nCOMMIT;");
like($err, qr/ERROR:  55P03: .*\Q$last_on_primary\E/,
	'a fence with the old primary\'s last generation, lost in the promotion, is refused');
is($standby->psql('postgres', "BEGIN; SELECT hoplock_fence('job', $after); COMMIT;", on_error_stop => 1), 0,
	'a fence with the running term passes');
is( $standby->safe_psql('postgres',
		q{SELECT count(*) FROM hoplock_internal.branch WHERE reason = 'promotion'}),
	'1', 'and no other branch was begun on the new timeline');

$standby->stop;
done_testing();
