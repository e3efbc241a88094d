# min_hold across the forks of the lease state: a hold whose release a
# standby received, then promoted, keeps the name on the new primary until
# the hold is over, and the new primary announces its end ('freed') once,
# after the 'released'; a hold whose end the old primary announced before
# the promotion is not announced again; a hold restored by pg_dump into
# another database keeps the name there and ends there.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('hold_primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION hoplock');
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('hold_standby');
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;

# 'done': a hold that ends on the old primary, before the promotion
$primary->safe_psql('postgres', q{SELECT hoplock_acquire('done', 'A', '1 h', min_hold => '1 s')});
$primary->safe_psql('postgres', q{SELECT hoplock_release('done', 'A')});
$primary->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_events(0) WHERE name = 'done' AND event = 'freed'})
  or die 'the hold of done did not end';

# 'kept': a hold that runs across the promotion
$primary->safe_psql('postgres', q{SELECT hoplock_acquire('kept', 'A', '1 h', min_hold => '8 s')});
$primary->safe_psql('postgres', q{SELECT hoplock_release('kept', 'A')});
my $hold_until = $primary->safe_psql('postgres',
	q{SELECT hold_until FROM hoplock_leases WHERE name = 'kept'});
$primary->wait_for_catchup($standby);
my $dump = $primary->safe_psql('postgres', q{SELECT count(*) FROM hoplock_events(0)});
$primary->stop('immediate');
$standby->promote;

sub q1 { return $standby->safe_psql('postgres', $_[0]); }

is(q1(q{SELECT hold_until FROM hoplock_leases WHERE name = 'kept'}), $hold_until,
	'the new primary lists the hold, until when the old one said');
is(q1(q{SELECT coalesce((hoplock_acquire('kept', 'B', '1 h')).owner, 'kept')}), 'kept',
	'the hold keeps the name from another owner on the new primary');
$standby->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_events(0) WHERE name = 'kept' AND event = 'freed'}, 't')
  or die 'the new primary did not announce the end of the hold';
is(q1(q{SELECT string_agg(event, ' ' ORDER BY seq) FROM hoplock_events(0) WHERE name = 'kept'}),
	'acquired released freed', 'released, then freed once, in number order');
is(q1(q{SELECT at = '} . $hold_until . q{' FROM hoplock_events(0) WHERE name = 'kept' AND event = 'freed'}),
	't', 'freed at the hold\'s end');
is(q1(q{SELECT count(*) FROM hoplock_events(0) WHERE name = 'done' AND event = 'freed'}), '1',
	'a hold that ended before the promotion is not announced again');
is(q1(q{SELECT owner FROM hoplock_acquire('kept', 'B', '1 h')}), 'B', 'the name is free after it');

# restart the new primary: nothing is announced twice
$standby->restart;
sleep 1;
is(q1(q{SELECT count(*) FROM hoplock_events(0) WHERE event = 'freed'}), '2',
	'after a restart, no freed event is repeated');

# pg_dump of a database in a hold, restored into another one
q1(q{SELECT hoplock_acquire('dumped', 'A', '1 h', min_hold => '6 s')});
q1(q{SELECT hoplock_release('dumped', 'A')});
my $until = q1(q{SELECT hold_until FROM hoplock_leases WHERE name = 'dumped'});
my $file = $standby->basedir . '/hold.dump';
$standby->command_ok([ 'pg_dump', '-Fc', '-f', $file, '-d', $standby->connstr('postgres') ], 'pg_dump');
$standby->safe_psql('postgres', 'CREATE DATABASE restored');
$standby->command_ok([ 'pg_restore', '-d', $standby->connstr('restored'), $file ], 'pg_restore');
is($standby->safe_psql('restored', q{SELECT hold_until FROM hoplock_leases WHERE name = 'dumped'}), $until,
	'the restored database lists the hold');
is($standby->safe_psql('restored',
		q{SELECT coalesce((hoplock_acquire('dumped', 'B', '1 h')).owner, 'kept')}), 'kept',
	'and keeps the name from another owner');
$standby->poll_query_until('restored',
	q{SELECT count(*) = 1 FROM hoplock_events(0) WHERE name = 'dumped' AND event = 'freed'})
  or die 'the restored database did not announce the end of the hold';
is($standby->safe_psql('restored',
		q{SELECT count(*) FROM hoplock_events(0) WHERE name = 'dumped' AND event = 'freed'}),
	'1', 'the restored database announces the end of the hold, once');

$standby->stop;
done_testing();
