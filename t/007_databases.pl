# Which databases are served: every one with hoplock installed, including
# one that gets it after the server started (within a second); DROP
# EXTENSION stops the worker; DROP DATABASE of a served database is not
# blocked by its worker; a database created from a template that has
# hoplock is served too.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;

sub served
{
	return $node->safe_psql('postgres',
		q{SELECT coalesce(string_agg(datname, ',' ORDER BY datname), '') FROM hoplock_workers WHERE pid IS NOT NULL});
}

$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_workers WHERE pid IS NOT NULL})
  or die 'postgres not served';
is(served(), 'postgres', 'only the database with the extension has a worker');

# --- A database that gets the extension later --------------------------------
$node->safe_psql('postgres', 'CREATE DATABASE late');
sleep 1;
is(served(), 'postgres', 'a new database without the extension gets no worker');
my $t0 = time();
$node->safe_psql('late', 'CREATE EXTENSION hoplock');
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'late' AND pid IS NOT NULL})
  or die 'late not served';
my $took = time() - $t0;
cmp_ok($took, '<', 1.5, sprintf('CREATE EXTENSION: served %.0f ms later', $took * 1000));
$node->safe_psql('late', q{SELECT hoplock_acquire('x', 'a', '100 ms')});
$node->poll_query_until('late', q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'x'})
  or die 'late: not announced';
pass('and its worker announces its expiries');

# --- DROP EXTENSION ------------------------------------------------------------
$node->safe_psql('late', 'DROP EXTENSION hoplock');
$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM hoplock_workers WHERE datname = 'late'})
  or die 'late still served';
pass('DROP EXTENSION stops the worker');
$node->safe_psql('late', 'CREATE EXTENSION hoplock');
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'late' AND pid IS NOT NULL})
  or die 'late not served again';
pass('CREATE EXTENSION again starts it again');

# --- A rolled-back CREATE EXTENSION starts nothing ----------------------------
$node->safe_psql('postgres', 'CREATE DATABASE undecided');
$node->safe_psql('undecided', 'BEGIN; CREATE EXTENSION hoplock; ROLLBACK;');
sleep 1;
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_workers WHERE datname = 'undecided'}),
	'0', 'a CREATE EXTENSION that rolled back starts no worker');

# --- DROP DATABASE of a served database ---------------------------------------
$t0 = time();
my ($ret, $out, $err) = $node->psql('postgres', 'DROP DATABASE late');
is($ret, 0, 'DROP DATABASE of a served database succeeds') or diag($err);
cmp_ok(time() - $t0, '<', 4, 'without waiting for the worker (it would give up after 5 s)');
$node->poll_query_until('postgres', q{SELECT count(*) = 0 FROM hoplock_workers WHERE datname IS NULL OR datname = 'late'})
  or die 'slot of the dropped database not freed';
pass('and its worker slot is freed');

# --- A failed DROP DATABASE: the worker comes back ----------------------------
$node->safe_psql('postgres', 'CREATE DATABASE kept');
$node->safe_psql('kept', 'CREATE EXTENSION hoplock');
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'kept' AND pid IS NOT NULL})
  or die 'kept not served';
my $user = $node->background_psql('kept');
($ret, $out, $err) = $node->psql('postgres', 'DROP DATABASE kept');
isnt($ret, 0, 'DROP DATABASE fails while a user is connected');
$user->quit;
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'kept' AND pid IS NOT NULL}, 't')
  or die 'kept not served again';
pass('after a failed DROP DATABASE the worker is started again');

# --- Statements that need a served database to themselves ----------------
$node->safe_psql('postgres', 'CREATE DATABASE tmpl');
$node->safe_psql('tmpl', 'CREATE EXTENSION hoplock');
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'tmpl' AND pid IS NOT NULL})
  or die 'tmpl not served';
($ret, $out, $err) = $node->psql('postgres', 'CREATE DATABASE copy TEMPLATE tmpl');
is($ret, 0, 'a served database can be the template of CREATE DATABASE') or diag($err);
$node->poll_query_until('postgres', q{SELECT count(*) = 2 FROM hoplock_workers WHERE datname IN ('tmpl', 'copy') AND pid IS NOT NULL})
  or die 'copy or tmpl not served';
pass('afterwards both the copy and the template are served');

($ret, $out, $err) = $node->psql('postgres', 'ALTER DATABASE copy RENAME TO copied');
is($ret, 0, 'a served database can be renamed') or diag($err);
$node->poll_query_until('postgres', q{SELECT count(*) = 1 FROM hoplock_workers WHERE datname = 'copied' AND pid IS NOT NULL})
  or die 'copied not served';
pass('and is served again under its new name');

$node->stop;
done_testing();
