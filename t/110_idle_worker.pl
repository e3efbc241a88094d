# The expiry worker at rest: with many leases held and none changing, it
# reads neither the lease table nor the history.  Its housekeeping (the
# sweep that forgets released names, the trimming of the history) reads a
# whole table, so it runs again only when a term began or ended since its
# last whole run, when a released name it saw then has passed
# hoplock.released_retention, or when that run left something behind.
# Measured with the tables' own counters (pg_stat_user_tables) over three
# housekeeping intervals: no timing figure is compared.  Then the rest
# still ends: a name released while the worker rests is forgotten once
# its retention has passed, with nothing else happening, and a term that
# lapses is announced.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use FindBin;
use lib "$FindBin::RealBin/lib";
use Hoplock::Rest;

# held leases
my $n = 20_000;

my $node = PostgreSQL::Test::Cluster->new('idle_worker');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
hoplock.history_size = 30000
autovacuum = off
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub q1 { return $node->safe_psql('postgres', $_[0]); }

hold_leases($node, $n);
$node->safe_psql('postgres', q{
-- names released, kept for hoplock.released_retention (1 day): ended terms
-- for the trimming to count (with the running ones, read from the lease
-- table: fewer than hoplock.history_size), names the sweep leaves for
-- later
SELECT count(hoplock_acquire('gone-' || i, 'holder', '1 day')) FROM generate_series(1, 100) AS i;
SELECT count(hoplock_release('gone-' || i, 'holder')) FROM generate_series(1, 100) AS i;
});

# A worker at rest, its first reads of the full tables counted
# (Hoplock::Rest): the lease table has $n + 100 rows, the history the 100
# ended terms (a running term's row is written when it ends).  A trimming
# reads both: the history, and the lease table for the running terms.
restart_worker_and_settle($node, $n + 100, 100);
is(q1(q{SELECT count(*) FROM hoplock_internal.history WHERE ended_at IS NOT NULL}),
	100, 'the first trimming kept the ended terms within hoplock.history_size');

# Three housekeeping intervals (10 s each) at rest
my ($lease1, $history1) = (table_reads($node, 'lease'), table_reads($node, 'history'));
my $pid = q1(q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'});
sleep 32;
my ($lease2, $history2) = (table_reads($node, 'lease'), table_reads($node, 'history'));
is(q1(q{SELECT pid FROM hoplock_workers WHERE datname = 'postgres'}), $pid,
	'the same worker throughout');
cmp_ok($lease2 - $lease1, '<', $n / 100,
	"at rest, the worker reads no more than a few rows of the lease table ($n held)");
cmp_ok($history2 - $history1, '<', 100,
	"at rest, the worker reads fewer rows of the history than one trimming does (100 ended terms)");

# A name released now is forgotten once hoplock.released_retention has
# passed, with nothing else happening: the sweep that follows the release
# finds it too young, and the next sweep is due when it is old enough.
$node->append_conf('postgresql.conf', 'hoplock.released_retention = 12');
$node->reload;
q1(q{SELECT hoplock_acquire('released', 'holder', '1 day')});
q1(q{SELECT hoplock_release('released', 'holder')});
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM hoplock_internal.lease WHERE name = 'released'}),
	'a name released at rest is forgotten after its retention');
ok( $node->poll_query_until('postgres',
		q{SELECT count(*) = 0 FROM hoplock_internal.lease WHERE name LIKE 'gone-%'}),
	'and so are the names released before, now past the shorter retention');

# A term that lapses at rest is announced
q1(q{SELECT hoplock_acquire('short', 'holder', '1 s')});
ok( $node->poll_query_until('postgres',
		q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'short'}),
	'a term lapsing at rest is announced');
is(q1(q{SELECT count(*) FROM hoplock_internal.lease WHERE state = 'h'}),
	$n, 'the held terms are left alone');

$node->stop;
done_testing();
