# A crash (immediate stop) at each point of a term's end, and of an acquire
# over a lapsed term, then a restart: the term's history row and its lease
# row are written in one transaction, so after the restart each term shows
# once in hoplock_history (running, or ended with its row), none is lost,
# and no generation is used twice.  A transaction that ended a term cannot
# be prepared (PREPARE TRANSACTION), and an end rolled back to a savepoint
# leaves the term running, once.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('history_end_crash');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
max_prepared_transactions = 4
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# each term of the name once in the view, generations distinct; returns
# "running,how,..." in generation order
sub terms
{
	my ($name) = @_;
	is(sql(qq{SELECT count(*) = count(DISTINCT generation) FROM hoplock_history WHERE name = '$name'}),
		't', "$name: no term shown twice");
	return sql(qq{SELECT string_agg(coalesce(how, 'running'), ',' ORDER BY generation)
	                FROM hoplock_history WHERE name = '$name'});
}

sub crash_restart
{
	$node->stop('immediate');
	$node->start;
}

# a release in flight at the crash
sql(q{SELECT hoplock_acquire('a', 'o1', '1 h')});
my $gen_a = sql(q{SELECT generation FROM hoplock_leases WHERE name = 'a'});
my $s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('BEGIN');
$s->query_safe(q{SELECT hoplock_release('a', 'o1')});
crash_restart();
$s->quit;
is(terms('a'), 'running', 'a release in flight at a crash: the term runs, once');
is(sql(q{SELECT hoplock_release('a', 'o1')}), 't', 'and is released after the restart');
is(terms('a'), 'released', 'its row, once');

# a release committed just before the crash
sql(q{SELECT hoplock_acquire('b', 'o1', '1 h')});
sql(q{SELECT hoplock_release('b', 'o1')});
crash_restart();
is(terms('b'), 'released', 'a committed release survives the crash, once');

# an acquire over a lapsed term, in flight, then committed, at the crash
sql(q{SELECT hoplock_acquire('c', 'o1', '1 s')});
sleep(2);
$s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('BEGIN');
$s->query_safe(q{SELECT hoplock_acquire('c', 'o2', '1 h')});
crash_restart();
$s->quit;
my $after = terms('c');
ok($after eq 'running' || $after eq 'expired',
	"an acquire over a lapsed term in flight at a crash: its old term once ($after)");
sql(q{SELECT hoplock_acquire('c', 'o2', '1 h')});
crash_restart();
like(terms('c'), qr/^(taken over|expired),running$/,
	'after the committed acquire and a crash: the old term ended, the new one runs');
is(sql(q{SELECT count(DISTINCT generation) FROM hoplock_history WHERE name = 'c'}), '2',
	'two generations');

# a generation is not reused after a crash that lost an acquire
sql(q{SELECT hoplock_acquire('d', 'o1', '1 h')});
sql(q{SELECT hoplock_release('d', 'o1')});
$s = $node->background_psql('postgres', on_error_stop => 0);
$s->query_safe('BEGIN');
$s->query_safe(q{SELECT hoplock_acquire('d', 'o2', '1 h')});
crash_restart();
$s->quit;
sql(q{SELECT hoplock_acquire('d', 'o3', '1 h')});
sql(q{SELECT hoplock_release('d', 'o3')});
is(terms('d'), 'released,released', 'two terms of d, each once');

# PREPARE TRANSACTION of an end is refused, and so ends nothing
sql(q{SELECT hoplock_acquire('p', 'o1', '1 h')});
my ($rc, $out, $err) = $node->psql('postgres', q{
	BEGIN; SELECT hoplock_release('p', 'o1'); PREPARE TRANSACTION 'p1'});
is(sql(q{SELECT count(*) FROM pg_prepared_xacts}), '0', 'an end cannot be prepared');
crash_restart();
is(terms('p'), 'running', 'the term runs, once');

# an end rolled back to a savepoint, then done again
sql(q{SELECT hoplock_acquire('r', 'o1', '1 h')});
sql(q{BEGIN;
      SAVEPOINT s1;
      SELECT hoplock_release('r', 'o1');
      ROLLBACK TO s1;
      SELECT hoplock_release('r', 'o1');
      COMMIT});
is(terms('r'), 'released', 'an end rolled back to a savepoint and done again: once');
is(sql(q{SELECT count(*) FROM hoplock_internal.history WHERE name = 'r'}), '1',
	'one row of it');

$node->stop;
done_testing();
