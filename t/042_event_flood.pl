# An ordinary role floods the event log with renewals
# (hoplock.notify_renewals is any session's to set): the worker must keep
# the log to hoplock.event_retention however fast events come.  (It
# dropped at most 10,000 events every 10 s, while one session alone
# records about 20,000 a second: past retention, the log grew without
# bound.)  Now it drops batch after batch while there are more.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('event_flood');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.event_retention = 1
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');
$node->safe_psql('postgres', 'CREATE ROLE flooder LOGIN');

# 60,000 renewal events, in transactions of 5,000, by an ordinary role
$node->safe_psql('postgres',
	q{SELECT hoplock_acquire('flood', 'f', '1 h')},
	extra_params => [ '-U', 'flooder' ]);
for (1 .. 12)
{
	$node->safe_psql('postgres', q{
		SET hoplock.notify_renewals = on;
		SELECT count(hoplock_renew('flood', 'f', '1 h')) FROM generate_series(1, 5000);
	}, extra_params => [ '-U', 'flooder' ]);
}
my $newest = $node->safe_psql('postgres', 'SELECT hoplock_position()');

# all sent
$node->poll_query_until('postgres',
	"SELECT delivered >= $newest FROM hoplock_internal.delivery")
  or die 'the events were not sent';

# 14 s after the last event was recorded -- past retention (1 s) and a
# housekeeping round (10 s), with slack -- no event older than 2 s may be
# left.  (Before, at most 20,000 of the 60,000 were gone by then.)
my $last_age = $node->safe_psql('postgres', q{
	SELECT extract(epoch FROM pg_catalog.clock_timestamp() - max(at))
	  FROM hoplock_internal.event});
usleep(int(1_000_000 * (14 - $last_age))) if $last_age < 14;
my $left = $node->safe_psql('postgres', q{
	SELECT count(*) FROM hoplock_internal.event
	 WHERE at < pg_catalog.clock_timestamp() - interval '2 s'});
note "events older than 2 s left 14 s after the last was recorded: $left";
is($left, '0', 'the log is kept to hoplock.event_retention under a flood of renewals');

$node->stop;
done_testing();
