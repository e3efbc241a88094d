# A generation or a handle a client has seen never stands for anything
# else on another copy of the data (issue 17, defects 1, 2 and 5):
#
# - an in-place restore of last night's dump (pg_restore --clean, or the
#   tables emptied and a data-only dump of INSERTs run by psql): the next
#   term of a name gets a generation above every one granted after the dump,
#   and the stale holder's fence is refused;
# - a dump of a database without a floor row, restored elsewhere: the copy
#   grants generations above the source's grants after the dump;
# - an asynchronous standby promoted after missing a renewal: a handle read
#   on the old primary matches nothing on the new one, even when the new
#   primary's renewal gets the same transaction ID.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('fork_values');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE DATABASE app');
$node->safe_psql('app', 'CREATE EXTENSION hoplock');
my $tmp = PostgreSQL::Test::Utils::tempdir;

sub gen
{
	my ($db, $sql) = @_;
	return $node->safe_psql($db, "SELECT generation FROM $sql");
}

# --- an in-place restore of an older dump -------------------------------------
my $g1 = gen('app', q{hoplock_acquire('a', 'night', '1 h')});
$node->safe_psql('app', q{SELECT hoplock_release('a', 'night')});
$node->command_ok([ 'pg_dump', '-Fc', '-f', "$tmp/app.dump", '-d', $node->connstr('app') ],
	'last night\'s dump');
my $g2 = gen('app', q{hoplock_acquire('a', 'stale', '1 h')});
cmp_ok($g2, '>', $g1, 'after the dump a new term of "a" begins');
$node->command_ok([ 'pg_restore', '--clean', '--if-exists', '-d', $node->connstr('app'), "$tmp/app.dump" ],
	'the dump is put back in place (pg_restore --clean)');
my $g3 = gen('app', q{hoplock_acquire('a', 'fresh', '1 h')});
cmp_ok($g3, '>', $g2, "the next term's generation ($g3) is above the one granted after the dump ($g2)");
my ($rc, $out, $err) = $node->psql('app', "BEGIN; SELECT hoplock_fence('a', $g2); COMMIT;");
like($err, qr/ERROR/, 'the stale holder\'s fence is refused');

# --- the same with rows put back by INSERT statements (a data-only dump) ---------
$node->safe_psql('app', q{SELECT hoplock_release('a', 'fresh')});
$node->command_ok([ 'pg_dump', '--data-only', '--inserts', '-f', "$tmp/app.sql", '-d', $node->connstr('app') ],
	'a data-only dump of INSERT statements');
my $g4 = gen('app', q{hoplock_acquire('a', 'stale-2', '1 h')});
$node->safe_psql('app', q{
	DELETE FROM hoplock_internal.lease;
	DELETE FROM hoplock_internal.history;
	DELETE FROM hoplock_internal.floor;
	DELETE FROM hoplock_internal.branch;
	DELETE FROM hoplock_internal.event;
	DELETE FROM hoplock_internal.delivery;
});
$node->command_ok([ 'psql', '-X', '-q', '-v', 'ON_ERROR_STOP=1', '-f', "$tmp/app.sql", '-d', $node->connstr('app') ],
	'the tables emptied and the dump put back by psql');
my $g5 = gen('app', q{hoplock_acquire('a', 'fresh-2', '1 h')});
cmp_ok($g5, '>', $g4, "the next term's generation ($g5) is above the one granted after that dump ($g4)");

# --- a database without a floor row, dumped and restored elsewhere ---------------
$node->safe_psql('postgres', 'CREATE DATABASE nofloor');
$node->safe_psql('nofloor', 'CREATE EXTENSION hoplock');
gen('nofloor', q{hoplock_acquire('b', 'one', '1 h')});
$node->safe_psql('nofloor', 'DELETE FROM hoplock_internal.floor');
is($node->safe_psql('nofloor', 'SELECT count(*) FROM hoplock_internal.floor'), '0',
	'a database whose floor row is gone');
$node->command_ok([ 'pg_dump', '-Fc', '-f', "$tmp/nofloor.dump", '-d', $node->connstr('nofloor') ],
	'its dump');
$node->safe_psql('nofloor', q{SELECT hoplock_release('b', 'one')});
my $after_dump = gen('nofloor', q{hoplock_acquire('b', 'two', '1 h')});
$node->safe_psql('postgres', 'CREATE DATABASE copy');
$node->command_ok([ 'pg_restore', '-d', $node->connstr('copy'), "$tmp/nofloor.dump" ],
	'restored into another database');
$node->safe_psql('copy', q{SELECT hoplock_force_release('b')});
my $in_copy = gen('copy', q{hoplock_acquire('b', 'three', '1 h')});
cmp_ok($in_copy, '>', $after_dump,
	"the copy's next generation ($in_copy) is above the source's grant after the dump ($after_dump)");

# --- rows written by SQL while a session stays connected -----------------------
# The statement's commit leaves a "written" marker; a session that had
# already found the branch must mint on the branch begun after it, not on
# the one it cached (a number of that one above the fork point would be
# taken for lost by hoplock_events).
my $kept = $node->background_psql('app');
$kept->query_safe(q{SELECT hoplock_acquire('w0', 'o', '1 h')});
$kept->query_safe(q{SELECT hoplock_acquire('w1', 'o', '1 h')});
$node->safe_psql('app', 'UPDATE hoplock_internal.floor SET forgotten = forgotten');
my $tag = $kept->query_safe(q{SELECT generation & 2047 FROM hoplock_acquire('w2', 'o', '1 h')});
is($tag, $node->safe_psql('app',
		q{SELECT tag FROM hoplock_internal.branch WHERE reason <> 'written' AND floor >
			(SELECT max(floor) FROM hoplock_internal.branch WHERE reason = 'written')}),
	'a session connected across an SQL write mints on the branch begun after it');
my $seq = $kept->query_safe(q{SELECT max(seq) FROM hoplock_events(0)});
is($kept->query_safe("SELECT count(*) FROM hoplock_events($seq)"), '0',
	'and hoplock_events resumes from its newest event number');
$kept->quit;

# --- an asynchronous standby promoted after missing a renewal -----------------------
$node->safe_psql('app', q{SELECT hoplock_acquire('h', 'leader', '1 h')});
$node->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($node, 'base', has_streaming => 1);
$standby->start;
$node->wait_for_catchup($standby);
$standby->stop('fast');
# Transactions the standby misses, then the renewal it misses, and its
# handle and transaction ID.
$node->safe_psql('app', join('', map { "SELECT txid_current();\n" } 1 .. 50));
$node->safe_psql('app', q{SELECT hoplock_renew('h', 'leader', '1 h')});
my $stale = $node->safe_psql('app', q{SELECT handle FROM hoplock_read('h')});
my $stale_xid = $node->safe_psql('app', q{SELECT xmin FROM hoplock_internal.lease WHERE name = 'h'});
$node->stop('immediate');
$standby->start;
$standby->promote;
$standby->poll_query_until('app', 'SELECT NOT pg_is_in_recovery()') or die 'no promotion';
# the new primary renews until its renewal has that transaction ID
my $xid = 0;
for (1 .. 100)
{
	$standby->safe_psql('app', q{SELECT hoplock_renew('h', 'leader', '1 h')});
	$xid = $standby->safe_psql('app', q{SELECT xmin FROM hoplock_internal.lease WHERE name = 'h'});
	last if $xid >= $stale_xid;
}
is($xid, $stale_xid, "the new primary's renewal reuses the old primary's transaction ID $stale_xid");
my $fresh = $standby->safe_psql('app', q{SELECT handle FROM hoplock_read('h')});
isnt($fresh, $stale, 'the promoted standby\'s state has another handle than the one read on the old primary');
is($standby->safe_psql('app', qq{SELECT hoplock_write('h', '$stale', 'intruder', '1 h') IS NULL}),
	't', 'a write with the old primary\'s handle is refused');
is($standby->safe_psql('app', q{SELECT owner FROM hoplock_read('h')}), 'leader',
	'and the running term stays its owner\'s');

# --- pg_upgrade's own runs of a server write nothing ------------------------------
# (it starts the old and the new cluster in binary-upgrade mode, -b): no
# launcher, so no worker that would begin a branch or announce an expiry
$standby->stop;
$standby->start;
my $branches = $standby->safe_psql('app', 'SELECT count(*) FROM hoplock_internal.branch');
$standby->stop;
system_or_bail('pg_ctl', '-w', '-D', $standby->data_dir, '-l', $standby->logfile,
	'-o', '-b', 'start');
sleep 2;
is($standby->safe_psql('app', q{
	SELECT count(*) FROM pg_stat_activity WHERE backend_type LIKE 'hoplock%'}),
	'0', 'in binary-upgrade mode no hoplock worker runs');
is($standby->safe_psql('app', 'SELECT count(*) FROM hoplock_internal.branch'), $branches,
	'and no branch begins');
system_or_bail('pg_ctl', '-w', '-D', $standby->data_dir, 'stop');
done_testing();
