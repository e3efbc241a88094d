# hoplock_renew_all's horizon: a term begun by a transaction that was in
# flight when the owner's keepalive began may have missed it; the owner's
# calls look for it (a scan of the lease table) until that transaction
# ends -- and no more often than it can matter: while the transactions
# below the horizon all still run, a session scans once, not at every
# call.  The term is found by the first call after its commit.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $node = PostgreSQL::Test::Cluster->new('renew_all_horizon');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

# the worker has found no keepalive: a new term does not look one up
ok( $node->poll_query_until('postgres', q{
	\set QUIET on
	BEGIN;
	SELECT hoplock_acquire('probe', 'nobody', '1 h') IS NOT NULL;
	SELECT pg_stat_get_xact_numscans(
	         'hoplock_internal.keepalive_by_owner'::regclass);
	ROLLBACK;
}, "t\n0"), 'no keepalive yet');

# a transaction begins a term of "H" (not attached: no keepalive) and
# stays open
my ($in, $out) = ('', '');
my $h = IPC::Run::start(
	[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-f', '-' ],
	'<', \$in, '>', \$out, '2>&1');
$in .= "BEGIN;\nSELECT hoplock_acquire('h1', 'H', '1 h') IS NOT NULL;\n";
$in .= "SELECT 'acquired';\n";
$h->pump until $out =~ /acquired/;

# the owner's keepalive begins meanwhile: h1 is not visible yet
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_renew_all('H', '1 h')}),
	'0', 'the keepalive begins without h1');

# later calls of one session, while that transaction runs: the first
# scans the lease table, the others do not (counted in one transaction,
# whose counts are not flushed meanwhile)
my $calls = $node->safe_psql('postgres', q{
	CREATE TEMP TABLE scans (i int, n bigint);
	BEGIN;
	SELECT count(*) FROM hoplock_renew_all('H', '1 h');
	INSERT INTO scans SELECT 1, pg_stat_get_xact_numscans('hoplock_internal.lease'::regclass);
	SELECT count(*) FROM hoplock_renew_all('H', '1 h');
	INSERT INTO scans SELECT 2, pg_stat_get_xact_numscans('hoplock_internal.lease'::regclass);
	SELECT count(*) FROM hoplock_renew_all('H', '1 h');
	INSERT INTO scans SELECT 3, pg_stat_get_xact_numscans('hoplock_internal.lease'::regclass);
	COMMIT;
	SELECT string_agg(n::text, ',' ORDER BY i) FROM scans;
});
my @lines = split /\n/, $calls;
is($lines[-1], '1,1,1', 'one scan while the transaction runs, not one a call');

# the transaction commits: the next call finds h1 and attaches it
$in .= "COMMIT;\nSELECT 'committed';\n";
$h->pump until $out =~ /committed/;
$in .= "\\q\n";
$h->finish;
is($node->safe_psql('postgres', q{SELECT string_agg(name, ',') FROM hoplock_renew_all('H', '1 h')}),
	'h1', 'the term is found once its transaction has ended');
is( $node->safe_psql('postgres',
		q{SELECT attach_horizon IS NULL FROM hoplock_internal.keepalive
		   WHERE owner = 'H'}),
	't', 'the horizon is closed');

$node->stop;
done_testing();
