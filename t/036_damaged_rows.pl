# Damaged rows never crash the server: each column of each of hoplock's
# tables in turn is made NULL in every row (its NOT NULL constraint lifted
# in the catalog for the moment, as a damaged table or a careless superuser
# could leave it), and then every function, view and the expiry worker meet
# it.  An error is fine; a crashed backend or worker (the server restarting)
# is not.  Run with and without hoplock.log_events.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('damaged');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.released_retention = 1
hoplock.history_size = 3
restart_after_crash = on
});
$node->start;

my %columns;
for my $table (qw(lease floor history))
{
	$node->safe_psql('postgres', 'CREATE EXTENSION IF NOT EXISTS hoplock');
	$columns{$table} = [ split /\n/, $node->safe_psql('postgres', qq{
		SELECT attname FROM pg_attribute
		 WHERE attrelid = 'hoplock_internal.$table'::regclass
		   AND attnum > 0 AND NOT attisdropped ORDER BY attnum}) ];
}
cmp_ok(scalar(map { @$_ } values %columns), '>=', 26, 'every column of the three tables');

# Leases in every state, and history rows for them.
my $setup = q{
SELECT hoplock_acquire('held', 'o1', '1 h');
SELECT hoplock_acquire('bound', 'o1', '1 h', session_bound => true);
SELECT hoplock_acquire('released', 'o1', '1 h');
SELECT hoplock_release('released', 'o1');
SELECT hoplock_acquire('lapsing', 'o1', '100 ms');
SELECT hoplock_acquire('expired', 'o1', '10 ms');
SELECT pg_sleep(0.15);
};

# Everything a role can call, each statement on its own (errors allowed),
# then a moment for the expiry worker to meet the damage too (a crash it
# has later still shows: in the next column's check, and in the server log
# at the end).
my $battery = q{
SELECT hoplock_acquire('held', 'o1', '1 h');
SELECT hoplock_acquire('held', 'o2', '1 h');
SELECT hoplock_acquire('released', 'o2', '1 h');
SELECT hoplock_acquire('expired', 'o2', '1 h');
SELECT hoplock_acquire('fresh', 'o2', '1 h');
SELECT hoplock_acquire('fresh-bound', 'o2', '1 h', session_bound => true);
SELECT hoplock_renew('held', 'o1', '1 h');
SELECT hoplock_renew('held', 'o1', '1 h', 1);
SELECT hoplock_release('held', 'o1');
SELECT hoplock_release('held', 'o1', 1);
SELECT hoplock_holder('held');
SELECT hoplock_read('held');
SELECT hoplock_read('released');
SELECT hoplock_write('held', (SELECT handle FROM hoplock_read('held')), 'o3', '1 h');
SELECT hoplock_write('nothing', NULL, 'o3', '1 h');
SELECT hoplock_delete('held', (SELECT handle FROM hoplock_read('held')));
BEGIN; SELECT hoplock_fence('bound', 1); COMMIT;
BEGIN; SELECT hoplock_fence('held', 1); COMMIT;
SELECT * FROM hoplock_leases;
SELECT * FROM hoplock_events(0);
SELECT * FROM hoplock_history;
SELECT * FROM hoplock_stats;
SELECT * FROM hoplock_workers;
SELECT hoplock_wait('expired', 'o4', '1 h', '100 ms');
SELECT hoplock_wait('lapsing', 'o4', '1 h', '100 ms');
SELECT hoplock_force_release('bound');
SELECT hoplock_forget('released');
SELECT hoplock_forget('expired');
SELECT pg_sleep(0.1);
};

sub psql_script
{
	my ($sql, $opts) = @_;
	my ($stdout, $stderr) = ('', '');
	$node->psql('postgres', $sql, stdout => \$stdout, stderr => \$stderr,
		on_error_stop => 0, %{ $opts // {} });
	return $stderr;
}

my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
for my $log_events ('off', 'on')
{
	for my $table (qw(lease floor history))
	{
		for my $column (@{ $columns{$table} })
		{
			# (one psql for the reinstall and the setup, whose session then
			# exits, ending the term of 'bound', before the damage)
			$node->safe_psql('postgres', qq{
				DROP EXTENSION IF EXISTS hoplock CASCADE;
				CREATE EXTENSION hoplock;
				$setup
			});
			$node->safe_psql('postgres', qq{
				UPDATE pg_attribute SET attnotnull = false
				 WHERE attrelid = 'hoplock_internal.$table'::regclass AND attname = '$column';
				ALTER TABLE hoplock_internal.$table DISABLE TRIGGER USER;
				UPDATE hoplock_internal.$table SET $column = NULL;
				ALTER TABLE hoplock_internal.$table ENABLE TRIGGER USER;
				UPDATE pg_attribute SET attnotnull = true
				 WHERE attrelid = 'hoplock_internal.$table'::regclass AND attname = '$column'
				   AND attname NOT IN ('session_pid', 'session_start', 'ended_at', 'end_seq', 'how');
			});
			psql_script("SET hoplock.log_events = $log_events;\n$battery");
			# a session-bound term, ended as its backend exits
			psql_script("SET hoplock.log_events = $log_events;\n"
				  . q{SELECT hoplock_acquire('exiting', 'o5', '1 h', session_bound => true);});
			usleep(100_000);
			my ($ok, $now) = (0, '');
			for (1 .. 100)
			{
				my ($rc, $out) = $node->psql('postgres', 'SELECT pg_postmaster_start_time()');
				if ($rc == 0) { $ok = 1; $now = $out; last; }
				usleep(100_000);
			}
			ok($ok && $now eq $started,
				"$table.$column NULL (log_events $log_events): no backend or worker crashed");
			$started = $now if $ok;
		}
	}
}
my $log = slurp_file($node->logfile);
unlike($log, qr/terminated by signal|server process .* was terminated/,
	'no server process was terminated by a signal');

$node->stop;
done_testing();
