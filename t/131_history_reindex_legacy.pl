# A term's end inserts its history row, and when the primary key finds a
# row of the term already (one 1.1 wrote as the term began, kept by the
# upgrade or a restored 1.1 dump) updates that row instead.  While REINDEX
# CONCURRENTLY rebuilds the history's primary key (a database owner's
# REINDEX DATABASE CONCURRENTLY does too), the new copy of the index is
# written beside it: the end must find the row there as well, without a
# unique violation -- the term ends as ever, its row updated.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('history_reindex_legacy');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# two running terms with the rows 1.1 would have written as they began
for my $n ('legacy', 'legacy-lapsed')
{
	sql(qq{SELECT hoplock_acquire('$n', 'o', '1 h');
		INSERT INTO hoplock_internal.history (name, generation, owner, role, acquired_at, begin_seq)
		SELECT name, generation, owner, owner_role, acquired_at, 77
		  FROM hoplock_internal.lease WHERE name = '$n'});
}

# An older snapshot holds REINDEX CONCURRENTLY after the new index is
# built and written to, before it replaces the old one.
my $snap = $node->background_psql('postgres');
$snap->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$snap->query_safe('SELECT 1');
my $reindex = $node->background_psql('postgres');
$reindex->query_until(qr/started/,
	"\\echo started\nREINDEX INDEX CONCURRENTLY hoplock_internal.history_pkey;\n");
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 1 FROM pg_index
		   WHERE indrelid = 'hoplock_internal.history'::regclass
		     AND indisready AND NOT indisvalid}),
	'REINDEX CONCURRENTLY has a new index being written');

my ($rc, $out, $err) = $node->psql('postgres', q{SELECT hoplock_release('legacy', 'o')});
is($rc, 0, 'the release of a term 1.1 wrote a row for succeeds meanwhile');
is($err, '', 'without an error') or diag($err);
is($out, 't', 'the term is released');
sql(q{UPDATE hoplock_internal.lease SET expires_at = now() - interval '1 s'
       WHERE name = 'legacy-lapsed'});
($rc, $out, $err) = $node->psql('postgres',
	q{SELECT owner FROM hoplock_acquire('legacy-lapsed', 'p', '1 h')});
is($rc, 0, 'a take-over of a lapsed one succeeds meanwhile') or diag($err);

$snap->query_safe('COMMIT');
$reindex->query_safe('SELECT 1');
$snap->quit;
$reindex->quit;
is(sql(q{SELECT string_agg(name || ':' || how || ':' || begin_seq, ',' ORDER BY name)
	        FROM hoplock_internal.history}),
	'legacy:released:77,legacy-lapsed:taken over:77',
	'each row 1.1 wrote was updated, none added');
is(sql(q{SELECT count(*) FROM hoplock_history WHERE name LIKE 'legacy%'}), '3',
	'two ended terms and the new running one are shown');
is(sql(q{SELECT count(*) FROM pg_index WHERE indrelid = 'hoplock_internal.history'::regclass
	        AND NOT indisvalid}), '0', 'the REINDEX finished');

$node->stop;
done_testing();
