# An ordinary role against the history of terms: hoplock_history reads
# the lease table as well as the history, so a role that may read the view
# can hold both locked (LOCK TABLE on the view locks what it reads, in
# ACCESS SHARE mode, the only one SELECT allows) and keep a snapshot open
# meanwhile.  Neither stops another role's term from ending (its row
# written), nor the worker's trimming, which reads the lease table to
# count the running terms.  Stronger locks, and row locks through the
# views, are refused; hoplock.history_size, which decides whether running
# terms show, cannot be changed by the role in any way.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('history_lock_attacks');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
hoplock.history_size = 4
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE mallory LOGIN;
	CREATE ROLE victim LOGIN;
});

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub as_role
{
	my ($role, $query) = @_;
	my ($stdout, $stderr);
	my $rc = $node->psql('postgres', "SET ROLE $role; $query",
		stdout => \$stdout, stderr => \$stderr);
	return ($rc, $stdout, $stderr);
}

# Stronger locks than ACCESS SHARE, and row locks, are refused.
for my $mode ('ROW SHARE', 'ROW EXCLUSIVE', 'SHARE', 'ACCESS EXCLUSIVE')
{
	my ($rc, undef, $err) = as_role('mallory',
		"BEGIN; LOCK TABLE hoplock_history IN $mode MODE; COMMIT;");
	like($err, qr/permission denied/, "LOCK TABLE hoplock_history IN $mode MODE refused");
}
for my $view ('hoplock_history', 'hoplock_leases')
{
	my ($rc, undef, $err) = as_role('mallory', "SELECT * FROM $view FOR KEY SHARE");
	like($err, qr/permission denied|not allowed/, "SELECT FROM $view FOR KEY SHARE refused");
}
for my $set ('SET hoplock.history_size = 0',
	q{SELECT set_config('hoplock.history_size', '0', false)},
	'ALTER ROLE mallory SET hoplock.history_size = 0')
{
	my ($rc, undef, $err) = as_role('mallory', $set);
	like($err, qr/cannot be changed now|permission denied/, "refused: $set");
}

# mallory holds what SELECT allows: the view, hence the history and the
# lease table, in ACCESS SHARE mode, with a snapshot open.
my $mallory = $node->background_psql('postgres');
my $mallory_pid = $mallory->query_safe('SELECT pg_backend_pid()');
$mallory->query_safe('SET ROLE mallory');
$mallory->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$mallory->query_safe('LOCK TABLE hoplock_history IN ACCESS SHARE MODE');
$mallory->query_safe('SELECT count(*) FROM hoplock_history');
is(sql(qq{SELECT string_agg(relation::regclass::text, ',' ORDER BY relation::regclass::text)
           FROM pg_locks AS l JOIN pg_class AS c ON c.oid = l.relation
          WHERE l.pid = $mallory_pid AND l.locktype = 'relation' AND l.granted
            AND c.relkind = 'r'
            AND l.relation::regclass::text LIKE 'hoplock_internal.%'}),
	'hoplock_internal.history,hoplock_internal.lease',
	'mallory holds the history and the lease table');

# The victim's terms begin and end meanwhile, each end writing its row
# (one transaction each: the trimming keeps the newest ends).
my ($rc, $out, $err) = as_role('victim', q{SELECT hoplock_acquire('v-run', 'v', '1 h') IS NOT NULL});
my $ends = 0;
for my $i (1 .. 8)
{
	($rc, $out, $err) = as_role('victim',
		qq{SELECT hoplock_acquire('v$i', 'v', '1 h') IS NOT NULL AND hoplock_release('v$i', 'v')});
	$ends++ if $rc == 0 && $out =~ /^t$/m;
	diag($err) if $rc != 0;
}
is($ends, 8, 'the victim begins and ends terms while mallory holds the locks');
is(sql(q{SELECT count(*) FROM hoplock_internal.history WHERE name ~ '^v[0-9]'}), '8',
	'each end wrote its row');

# The worker trims to 4 terms, the running one counted, all the same.
ok($node->poll_query_until('postgres',
		q{SELECT count(*) = 4 FROM hoplock_history WHERE owner = 'v'}),
	'the worker trims the history while mallory holds the locks');
is(sql(q{SELECT string_agg(name, ',' ORDER BY name) FROM hoplock_history WHERE owner = 'v'}),
	'v-run,v6,v7,v8', 'the running term and the 3 newest ended ones kept');
$mallory->query_safe('COMMIT');
$mallory->quit;

$node->stop;
done_testing();
