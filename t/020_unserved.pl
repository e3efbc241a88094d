# A database hoplock should serve but cannot (no background worker slot
# left in max_worker_processes, or all hoplock.max_databases slots taken) is
# listed in hoplock_workers with the reason, is warned about once (not at
# every retry), and gets its worker within seconds of one becoming free.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('unserved');
$node->init;
# the launcher and three workers
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
max_worker_processes = 4
max_parallel_workers = 0
max_logical_replication_workers = 0
});
$node->start;

my @dbs = map { "db$_" } 1 .. 5;
for my $db (@dbs)
{
	$node->safe_psql('postgres', "CREATE DATABASE $db");
	$node->safe_psql($db, 'CREATE EXTENSION hoplock');
}

sub states
{
	return $node->safe_psql('db1', q{
		SELECT count(*) FILTER (WHERE pid IS NOT NULL AND state <> 'unserved'),
		       count(*) FILTER (WHERE state = 'unserved'),
		       count(DISTINCT datname)
		  FROM hoplock_workers WHERE datname LIKE 'db%'});
}

$node->poll_query_until('db1', q{
	SELECT count(*) = 5 FROM hoplock_workers WHERE datname LIKE 'db%'})
  or die 'not every database is listed';
# the probe of "postgres" (no extension) may hold a slot for a moment
$node->poll_query_until('db1', q{
	SELECT count(*) = 3 FROM hoplock_workers
	 WHERE datname LIKE 'db%' AND pid IS NOT NULL})
  or die 'three databases should have workers';
is(states(), '3|2|5',
	'five databases listed: three served, two unserved');
like($node->safe_psql('db1', q{
	SELECT string_agg(DISTINCT reason, '; ') FROM hoplock_workers
	 WHERE state = 'unserved'}),
	qr/no background worker slot free \(max_worker_processes = 4\)/,
	'the reason names max_worker_processes');

# The launcher retries every few seconds, but warns once per database.
sleep(12);
my $log = slurp_file($node->logfile);
my $warnings = () = $log =~ /hoplock could not start a worker for database/g;
cmp_ok($warnings, '<=', 4, "warned once per database, not per retry ($warnings)");
cmp_ok($warnings, '>=', 2, 'warned for each unserved database');

# A worker frees up: an unserved database is served within seconds.
my $served = $node->safe_psql('db1', q{
	SELECT datname FROM hoplock_workers
	 WHERE datname LIKE 'db%' AND pid IS NOT NULL ORDER BY datname DESC LIMIT 1});
my @waiting = split /\n/, $node->safe_psql('db1', q{
	SELECT datname FROM hoplock_workers WHERE state = 'unserved' ORDER BY 1});
my $t0 = time();
$node->safe_psql($served, 'DROP EXTENSION hoplock');
my $other = (grep { $_ ne $served } @dbs)[0];
my $in = join(',', map { "'$_'" } @waiting);
$node->poll_query_until($other, qq{
	SELECT count(*) = 1 FROM hoplock_workers
	 WHERE datname IN ($in) AND pid IS NOT NULL AND state <> 'starting'})
  or die 'the freed worker was not given to an unserved database';
cmp_ok(time() - $t0, '<=', 15, 'one of them is served within seconds');
is($node->safe_psql($other, q{
	SELECT count(*) FILTER (WHERE state = 'unserved'),
	       count(*) FILTER (WHERE pid IS NOT NULL)
	  FROM hoplock_workers WHERE datname LIKE 'db%'}),
	'1|3', 'the other still waits, listed');

# The same with hoplock.max_databases as the limit.
$node->append_conf('postgresql.conf', qq{
max_worker_processes = 10
hoplock.max_databases = 2
});
$node->restart;
my @with = grep { $_ ne $served } @dbs;
my $with_in = join(',', map { "'$_'" } @with);
$node->poll_query_until($other, qq{
	SELECT count(*) = 2 FROM hoplock_workers
	 WHERE datname IN ($with_in) AND pid IS NOT NULL})
  or die 'two databases should be served';
# After a restart the launcher cannot tell, without a slot to look, which
# databases use hoplock; a database that uses it says so.
like($node->safe_psql($other, q{
	SELECT string_agg(DISTINCT reason, '; ') FROM hoplock_workers
	 WHERE state = 'unserved'}),
	qr/^not yet known to use hoplock; all 2 hoplock.max_databases slots are in use$/,
	'databases not looked at are listed, as such');
for my $db (@with)
{
	$node->safe_psql($db, q{SELECT hoplock_acquire('use', 'a', '1 min')});
}
$node->poll_query_until($other, qq{
	SELECT count(*) = 2 FROM hoplock_workers
	 WHERE datname IN ($with_in) AND state = 'unserved'
	   AND reason = 'all 2 hoplock.max_databases slots are in use'})
  or die 'the two databases using hoplock should be listed as unserved';
pass('the databases that use hoplock are listed with the reason');
ok($node->log_contains('Its leases lapse without being announced until a worker starts: all 2 hoplock.max_databases slots are in use'),
	'and warned about');

# Leases in an unserved database still work; they lapse unannounced.
my $unserved = $node->safe_psql($other, qq{
	SELECT datname FROM hoplock_workers
	 WHERE state = 'unserved' AND datname IN ($with_in)
	 ORDER BY datname LIMIT 1});
# The first term of a name: a generation minted on the database's current
# branch (c above its floor, the branch's tag), held as granted.
my $granted = $node->safe_psql($unserved,
	q{SELECT generation FROM hoplock_acquire('x', 'a', '1 min')});
is($node->safe_psql($unserved, qq{
	SELECT h.owner = 'a' AND h.generation = $granted
	       AND ($granted >> 11) >= b.floor AND ($granted & 2047) = b.tag
	  FROM hoplock_holder('x') AS h,
	       (SELECT floor, tag FROM hoplock_internal.branch
	         WHERE reason <> 'written' ORDER BY floor DESC LIMIT 1) AS b}),
	't', 'an unserved database still grants leases');
ok(!$node->log_contains('hoplock could not start a worker for database "postgres"'),
	'no warning for a database without hoplock');

# A database its owner takes out of service (a template, no connections) is
# listed with the reason, and served again when it is back.
$node->safe_psql('postgres', "ALTER DATABASE $unserved IS_TEMPLATE true");
$node->poll_query_until($other, qq{
	SELECT reason = 'the database is a template' FROM hoplock_workers
	 WHERE datname = '$unserved'})
  or die 'a template database is not listed';
pass('a database made a template is listed as unserved, with the reason');
$node->safe_psql('postgres', "ALTER DATABASE $unserved IS_TEMPLATE false");
$node->poll_query_until($other, qq{
	SELECT count(*) = 1 FROM hoplock_workers
	 WHERE datname = '$unserved' AND (state <> 'unserved' OR reason <> 'the database is a template')})
  or die 'the database was not looked at again';
pass('and looked at again when it is not a template any more');

$node->stop;
done_testing();
