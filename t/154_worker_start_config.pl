# A worker reads the configuration files as it starts.  A reload signalled
# while the postmaster starts a background worker can be lost: the worker
# ignores SIGHUP until it sets its own handler, and the postmaster forked
# it with the settings it had before the reload.  One worker that lost it
# kept trimming the history to the old hoplock.history_size until it was
# restarted.  That moment cannot be hit on purpose from here, so the test
# checks what closes it: a worker started after postgresql.conf changed,
# with no reload at all, runs with the file's settings.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('worker_start_config');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

$node->poll_query_until('postgres', q{SELECT state = 'sleeping' FROM hoplock_workers})
  or die 'no worker';
my $wpid = $node->safe_psql('postgres', 'SELECT pid FROM hoplock_workers');

# hoplock.naptime = 1 s, written and not reloaded: the postmaster still
# has 60 s, and so would a worker it forks
$node->append_conf('postgresql.conf', 'hoplock.naptime = 1');
is($node->safe_psql('postgres', q{SELECT current_setting('hoplock.naptime')}),
	'1min', 'the server has not read the change');

$node->safe_psql('postgres', "SELECT pg_terminate_backend($wpid)");
$node->poll_query_until('postgres',
	"SELECT pid IS NOT NULL AND pid <> $wpid AND state = 'sleeping' FROM hoplock_workers")
  or die 'worker not replaced';

# idle, with nothing due, it wakes every naptime: within 8 s, not 60
my $woke = 'f';
for (1 .. 80)
{
	$woke = $node->safe_psql('postgres',
		q{SELECT last_wakeup > started_at + interval '2.5 s' FROM hoplock_workers});
	last if $woke eq 't';
	usleep(100_000);
}
is($woke, 't', 'the new worker wakes every second: it read hoplock.naptime from the file');

$node->stop;
done_testing();
