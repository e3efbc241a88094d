# hoplock_stats between installing the 1.2 library and ALTER EXTENSION
# UPDATE: the SQL of 1.1.0 declares eight counters and then stats_reset,
# where 1.2 has four counters more before it.  stats_reset is the time of
# the last reset under both (it used to show 1.2's fifth counter, read as a
# timestamp, until the update).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('stats_1_1');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{CREATE EXTENSION hoplock VERSION '1.1.0'});

sub q1 { return $node->safe_psql('postgres', $_[0]); }

$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_stats WHERE datname = current_database()})
  or die 'no counters for the database';

my $reset_now = q{
	SELECT stats_reset BETWEEN now() - interval '1 min' AND now() + interval '1 min'
	  FROM hoplock_stats WHERE datname = current_database()};

# (under the SQL of 1.1.0 the 1.2 library refuses lease calls until the
# update: the counters stay as the reset left them)
q1(q{SELECT hoplock_stats_reset()});
is(q1($reset_now), 't', 'under the SQL of 1.1.0: stats_reset is the reset\'s time');

q1(q{ALTER EXTENSION hoplock UPDATE});
q1(q{SELECT hoplock_stats_reset()});
q1(q{SELECT hoplock_acquire('s', 'a', '1 h')});
q1(q{SELECT hoplock_release('s', 'a')});
is(q1($reset_now), 't', 'under the SQL of 1.2.0: stats_reset is the reset\'s time');
is(q1(q{SELECT terms_begun FROM hoplock_stats WHERE datname = current_database()}),
	'1', '... and terms_begun counts');

$node->stop;
done_testing();
