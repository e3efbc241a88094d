# A standby promoted while terms run and one ends in flight on the
# primary: on the promoted server each term shows once in hoplock_history
# (the running ones from their lease rows, replicated with them), the end
# in flight never happened, the terms end there with one row each, and a
# new term of a name gets a generation above every one it had.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $primary = PostgreSQL::Test::Cluster->new('primary');
$primary->init(allows_streaming => 1);
$primary->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$primary->start;
$primary->safe_psql('postgres', 'CREATE EXTENSION hoplock');
$primary->backup('b');
my $standby = PostgreSQL::Test::Cluster->new('standby');
$standby->init_from_backup($primary, 'b', has_streaming => 1);
$standby->start;

$primary->safe_psql('postgres', q{
	SELECT hoplock_acquire('a', 'o1', '1 h');
	SELECT hoplock_acquire('b', 'o1', '1 h');
	SELECT hoplock_release('b', 'o1');
	SELECT hoplock_acquire('b', 'o2', '1 h');
	SELECT hoplock_acquire('s', 'w1', '1 h', slots => 2);
	SELECT hoplock_acquire('s', 'w2', '1 h', slots => 2)});
my $s = $primary->background_psql('postgres');
$s->query_safe('BEGIN');
$s->query_safe(q{SELECT hoplock_release('a', 'o1')});
$primary->wait_for_catchup($standby);

sub view
{
	my ($node) = @_;
	return $node->safe_psql('postgres', q{
		SELECT string_agg(name || coalesce(':' || slot, '') || ':' || coalesce(how, 'running'),
		                  ',' ORDER BY name, generation)
		  FROM hoplock_history});
}
my $before = view($standby);
is($before, 'a:running,b:released,b:running,s:1:running,s:2:running',
	'the standby shows each term once, the end in flight not at all');
my $gens = $standby->safe_psql('postgres', q{SELECT max(generation) FROM hoplock_history WHERE name = 'a'});

$standby->promote;
$s->quit;
$primary->stop('immediate');

is(view($standby), $before, 'the promoted server shows the same');
$standby->safe_psql('postgres', q{
	SELECT hoplock_release('a', 'o1');
	SELECT hoplock_release('b', 'o2');
	SELECT hoplock_release('s', 'w1');
	SELECT hoplock_release('s', 'w2')});
is(view($standby), 'a:released,b:released,b:released,s:1:released,s:2:released',
	'the terms end there, one row each');
is($standby->safe_psql('postgres', q{
	SELECT (hoplock_acquire('a', 'o3', '1 h')).generation > } . $gens),
	't', 'a new term gets a greater generation');
is($standby->safe_psql('postgres', q{
	SELECT count(*) = count(DISTINCT (name, generation)) FROM hoplock_history}),
	't', 'no term shown twice');

$standby->stop;
done_testing();
