# A name with slots, forgotten, keeps its generations monotone across the
# forks of the lease state: a dump restored into another database, a
# restart right after the forget (immediate stop), and the promotion of
# an asynchronous standby that replayed the forget but missed the terms
# the primary granted after it.  Each time the name's next slot term has
# a generation above every term the name had, in any slot, on any side
# of the fork that the new side could know of -- and above the missed
# ones too (they were minted earlier on the server clock).
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $primary = PostgreSQL::Test::Cluster->new('slots_forks_primary',
	port => $ENV{HOPLOCK_TAP_PORT});
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION hoplock');

# the greatest generation the name "name" ever had on "node", in any slot
sub greatest
{
	my ($node, $db, $name) = @_;
	return $node->safe_psql($db, qq{
		SELECT max(generation) FROM hoplock_history WHERE name = '$name'});
}

# two slot terms of "name", released; the name forgotten
sub use_and_forget
{
	my ($node, $name) = @_;
	$node->safe_psql('postgres', qq{
		SELECT hoplock_acquire('$name', 'a', '1 h', slots => 2);
		SELECT hoplock_acquire('$name', 'b', '1 h', slots => 2);
		SELECT hoplock_release('$name', 'a');
		SELECT hoplock_release('$name', 'b');});
	is($node->safe_psql('postgres', qq{SELECT hoplock_forget('$name')}), 't',
		"$name forgotten");
	is($node->safe_psql('postgres', qq{
		SELECT count(*) FROM hoplock_internal.lease
		 WHERE split_part(name, E'\\x1f', 1) = '$name'}), '0',
		"... every row of it");
}

sub next_slot_term
{
	my ($node, $db, $name) = @_;
	return $node->safe_psql($db, qq{
		SELECT generation FROM hoplock_acquire('$name', 'c', '1 h', slots => 3)});
}

# -- dump and restore into another database
use_and_forget($primary, 'dumped');
my $before = greatest($primary, 'postgres', 'dumped');
my $dump = $primary->basedir . '/slots.dump';
IPC::Run::run([ 'pg_dump', '-Fc', '-f', $dump, '-d', $primary->connstr('postgres') ])
  or die 'pg_dump failed';
$primary->safe_psql('postgres', 'CREATE DATABASE copy');
IPC::Run::run([ 'pg_restore', '-d', $primary->connstr('copy'), $dump ])
  or die 'pg_restore failed';
cmp_ok(next_slot_term($primary, 'copy', 'dumped'), '>', $before,
	'restored: the forgotten name\'s next term is above its last');

# -- an immediate stop right after the forget
use_and_forget($primary, 'crashed');
$before = greatest($primary, 'postgres', 'crashed');
$primary->stop('immediate');
$primary->start;
cmp_ok(next_slot_term($primary, 'postgres', 'crashed'), '>', $before,
	'after a crash: the forgotten name\'s next term is above its last');

# -- a standby replays the forget, misses what follows, is promoted
$primary->backup('base');
my $standby = PostgreSQL::Test::Cluster->new('slots_forks_standby',
	port => $ENV{HOPLOCK_TAP_PORT} ? $ENV{HOPLOCK_TAP_PORT} + 1 : undef);
$standby->init_from_backup($primary, 'base', has_streaming => 1);
$standby->start;
use_and_forget($primary, 'promoted');
$primary->wait_for_catchup($standby);
is($standby->safe_psql('postgres', q{
	SELECT count(*) FROM hoplock_internal.lease
	 WHERE split_part(name, E'\\x1f', 1) = 'promoted'}), '0',
	'the standby replayed the forget');
$standby->stop;
$primary->safe_psql('postgres', q{
	SELECT hoplock_acquire('promoted', 'd', '1 h', slots => 2);});
my $missed = greatest($primary, 'postgres', 'promoted');
$primary->stop('immediate');
$standby->start;
$standby->promote;
$standby->poll_query_until('postgres', 'SELECT NOT pg_is_in_recovery()')
  or die 'standby did not leave recovery';
is($standby->safe_psql('postgres', q{
	SELECT count(*) FROM hoplock_internal.lease
	 WHERE split_part(name, E'\\x1f', 1) = 'promoted'}), '0',
	'the promoted standby missed the term granted after the forget');
my $after = next_slot_term($standby, 'postgres', 'promoted');
cmp_ok($after, '>', $missed,
	'promoted: the next term is above the one the standby missed');

$standby->stop;
done_testing();
