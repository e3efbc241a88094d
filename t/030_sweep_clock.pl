# The sweep and a clock that disagrees: the expiry worker forgets a name
# only at the generation it raised the floor for.  Between the sweep's scan
# and its delete, a new term of the name may begin and end; if the server
# clock stepped back by more than hoplock.released_retention meanwhile, the
# new term's row looks as old as the one scanned.  Forgetting it with the
# floor raised only to the scanned generation would hand that generation
# out again.
#
# libfaketime puts the sessions an hour behind the worker (it does not
# reach the background workers: see t/015_clock.pl), which is the clock
# step back, and a user's AFTER DELETE trigger holds the sweep between its
# scan and its delete.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $libfaketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1';
plan skip_all => "libfaketime is not installed ($libfaketime)" unless -e $libfaketime;

my $node = PostgreSQL::Test::Cluster->new('sweep_clock');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.released_retention = 1
});
{
	local $ENV{LD_PRELOAD} = $libfaketime;
	local $ENV{FAKETIME} = '-1h';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	$node->start;
}
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE FUNCTION public.slow_forget() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN
		IF OLD.name = 'a-0' THEN
			PERFORM pg_catalog.pg_sleep(3);
		END IF;
		RETURN NULL;
	END $$;
	CREATE TRIGGER slow_forget AFTER DELETE ON hoplock_internal.lease
	   FOR EACH ROW EXECUTE FUNCTION public.slow_forget();
	-- 2 h: the worker, an hour ahead, must not see them lapse before
	-- they are released (with 1 h it did, once, and the release of a-1
	-- found its term over)
	SELECT hoplock_acquire('a-' || i, 'o', '2 h') FROM generate_series(0, 1) i;
	SELECT hoplock_release('a-' || i, 'o') FROM generate_series(0, 1) i;
});

# Each at the generation of its first (and only) term.
my %first = map { split /=/ } split /,/, $node->safe_psql('postgres', q{
	SELECT string_agg(l.name || '=' || l.generation, ',' ORDER BY l.name)
	  FROM hoplock_internal.lease AS l JOIN hoplock_internal.history AS h USING (name)
	 WHERE l.generation = h.generation AND l.generation IS NOT NULL});
is(join(' ', sort keys %first), 'a-0 a-1', 'two released names at the generation of their first term')
  or diag($node->safe_psql('postgres', q{
	SELECT 'lease ' || l.name || ' ' || l.generation || ' ' || l.state FROM hoplock_internal.lease AS l
	UNION ALL
	SELECT 'history ' || h.name || ' ' || h.generation || ' ' || coalesce(h.how, '-') FROM hoplock_internal.history AS h}));
my $g1 = $first{'a-1'} // 0;

# the sweep scanned both, raised the floor to their generations, and is
# forgetting a-0
$node->poll_query_until('postgres', q{
	SELECT count(*) = 1 FROM pg_stat_activity
	 WHERE backend_type = 'hoplock worker' AND wait_event = 'PgSleep'})
  or die 'the sweep never reached a-0';
my $g2 = $node->safe_psql('postgres', q{SELECT (hoplock_acquire('a-1', 'o', '1 h')).generation});
is($g2 =~ /^\d+$/ && $node->safe_psql('postgres', qq{
	SELECT $g2 > $g1;
	SELECT hoplock_release('a-1', 'o');}), "t\nt",
	"meanwhile a-1 has a second term, above its first ($g2 > $g1), ended");
$node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM hoplock_internal.lease WHERE name = 'a-0'})
  or die 'a-0 was never forgotten';
my $floor = $node->safe_psql('postgres', 'SELECT forgotten FROM hoplock_internal.floor');
my $rows = $node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_internal.lease WHERE name = 'a-1'});
diag("after the sweep: floor forgotten $floor, a-1 rows $rows");
is($node->safe_psql('postgres', qq{
	SELECT $rows > 0 OR coalesce((SELECT forgotten FROM hoplock_internal.floor), 0) >= $g2}),
	't', 'a-1 at its second generation was not forgotten with the floor below it');
my ($ret, $gen, $err) = $node->psql('postgres', q{SELECT (hoplock_acquire('a-1', 'o', '1 h')).generation});
is($err, '', 'a-1 can be acquired again');
is($gen =~ /^\d+$/ && $node->safe_psql('postgres', qq{SELECT $gen > $g2}),
	't', "and its next term is above its second generation ($gen > $g2)");

$node->stop;
done_testing();
