# A worker reads every reload, even one whose SIGHUP it lost, and nothing
# else.  A reload signalled while the postmaster starts a background
# worker can be lost to it: the worker ignores SIGHUP until it sets its
# own handler, and the postmaster forked it with the settings it had
# before the reload.  One worker that lost it kept trimming the history
# to the old hoplock.history_size until it was restarted.  The launcher
# counts the reloads it reads, and a worker whose count is behind reads
# the files again.  That moment cannot be hit on purpose from here; a
# SIGHUP sent to the launcher alone is the same to the worker: a reload
# it got no signal for.
#
# And an edit of postgresql.conf that nobody reloaded is not read by a
# worker that starts after it: a worker sending the events on a channel
# no session has yet would split the stream.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('worker_start_config');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub worker_pid
{
	my ($not) = @_;
	$node->poll_query_until('postgres',
		"SELECT pid IS NOT NULL AND pid <> $not AND state = 'sleeping' FROM hoplock_workers")
	  or die 'no worker';
	return $node->safe_psql('postgres', 'SELECT pid FROM hoplock_workers');
}

# idle, with nothing due, a worker wakes every hoplock.naptime: is it
# 1 s or 60 s?  Three wake-ups or more in 4 s, not counting what woke it
# just now (its start, the launcher); its housekeeping, every 10 s, can
# account for one.
sub wakes_every_second
{
	usleep(500_000);
	my $t0 = $node->safe_psql('postgres', 'SELECT clock_timestamp()');
	my %seen;
	my $end = time() + 4;
	while (time() < $end)
	{
		$seen{$_} = 1 for grep { $_ ne '' } $node->safe_psql('postgres',
			qq{SELECT last_wakeup FROM hoplock_workers WHERE last_wakeup > '$t0'});
		usleep(100_000);
	}
	return keys(%seen) >= 3;
}

my $wpid = worker_pid(0);
my $launcher = $node->safe_psql('postgres',
	q{SELECT pid FROM pg_stat_activity WHERE backend_type = 'hoplock launcher'});
ok($launcher =~ /^\d+$/, 'the launcher runs');

# a reload, read by every process (the launcher counts it)
$node->safe_psql('postgres', 'SELECT pg_reload_conf()');
sleep 1;

# hoplock.naptime = 1 s, written and not reloaded
$node->append_conf('postgresql.conf', 'hoplock.naptime = 1');

# The worker exits, and the postmaster starts it again (the launcher, held
# up, does not take its slot back first): the same registration, handed
# the count of before that reload, which the worker had read.
kill 'STOP', $launcher;
$node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
$node->poll_query_until('postgres', qq{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE backend_type = 'hoplock worker' AND pid <> $wpid})
  or die 'the postmaster did not start the worker again';
sleep 1;
kill 'CONT', $launcher;
$wpid = worker_pid($wpid);
ok(!wakes_every_second(), 'a worker the postmaster starts again after an edit nobody reloaded keeps the server\'s settings');

# and one the launcher starts
$node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
$wpid = worker_pid($wpid);
ok(!wakes_every_second(), 'so does a worker the launcher starts');
is($node->safe_psql('postgres', q{SELECT current_setting('hoplock.naptime')}),
	'1min', 'and the server has not read the edit either');

# the reload reaches the launcher only
kill 'HUP', $launcher;
usleep(500_000);
ok(wakes_every_second(), 'a reload the worker got no SIGHUP for, read by the launcher: the worker reads it too');
is($node->safe_psql('postgres', 'SELECT pid FROM hoplock_workers'), $wpid, 'without a restart');

$node->stop;
done_testing();
