# The ttl bounds a hung holder of a keepalive too.  A session that renewed
# an owner's keepalive (hoplock_renew_all) in a transaction it leaves open
# makes every term of the keepalive "in flight" to everyone else: once the
# keepalive lapses, another role's acquire of those names is contention.
# As for an uncommitted hoplock_renew of one term (t/014_holders.pl), the
# worker ends that session hoplock.hung_holder_timeout after the lapse,
# announces the terms, and the names can be taken; a session whose role
# lacks the privileges of the keepalive's role is left alone.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('renew_all_hung');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.hung_holder_timeout = '1s'
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE ka_a LOGIN;
	CREATE ROLE ka_b LOGIN;
});
$node->poll_query_until('postgres',
	q{SELECT count(*) = 1 FROM hoplock_workers WHERE state = 'sleeping'})
  or die 'no worker';

$node->safe_psql('postgres', q{
	SET ROLE ka_a;
	SELECT count(hoplock_acquire('h' || i, 'ho', '1 h')) FROM generate_series(1, 3) AS i;
	SELECT count(*) FROM hoplock_renew_all('ho', '2 s');
});

# a renewal of the keepalive, left uncommitted
my $hung = $node->background_psql('postgres', on_error_stop => 0,
	extra_params => [ '-U', 'ka_a' ]);
my $hung_pid = $hung->query_safe(q{SELECT pg_backend_pid()});
$hung->query_safe(q{BEGIN});
is($hung->query_safe(q{SELECT count(*) FROM hoplock_renew_all('ho', '2 s')}),
	'3', 'the renewal left open renews the three terms');
my $expires = $node->safe_psql('postgres',
	q{SELECT expires_at FROM hoplock_internal.keepalive WHERE owner = 'ho'});

# another role tries to take a name until it can
my $start = time;
my $took;
while (time - $start < 30)
{
	my $g = $node->safe_psql('postgres', q{
		SET ROLE ka_b;
		SELECT coalesce((hoplock_acquire('h1', 'taker', '1 h')).generation::text, '')});
	if ($g ne '')
	{
		$took = time - $start;
		last;
	}
	usleep(100_000);
}
ok(defined $took, 'another role takes a name of the keepalive');
cmp_ok($took // 99, '<', 8,
	sprintf('%.1f s later (ttl 2 s + hung_holder_timeout 1 s)', $took // 99));
ok(!$node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $hung_pid"),
	'the hung session was ended');
ok($node->log_contains(
		qr/terminating process $hung_pid, which holds up the keepalive of owner 'ho' after it lapsed/),
	'the log says why');
$node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM hoplock_internal.lease WHERE owner = 'ho' AND state = 'h'})
  or die 'the terms were not announced';
is($node->safe_psql('postgres', qq{
	SELECT count(*) FROM hoplock_events(0)
	 WHERE event = 'expired' AND name ~ '^h[123]\$' AND at = '$expires'}),
	'3', 'each term expired at the committed expiry of the keepalive');
eval { $hung->quit };

# a session of a role without the keepalive role's privileges is left
# alone (SECURITY DEFINER code of ka_a, run by ka_b, renewed it)
$node->safe_psql('postgres', q{
	CREATE FUNCTION renew_ho() RETURNS bigint LANGUAGE sql SECURITY DEFINER
	  AS $$ SELECT count(*) FROM hoplock_renew_all('ho', '2 s') $$;
	ALTER FUNCTION renew_ho() OWNER TO ka_a;
	SET ROLE ka_a;
	SELECT count(hoplock_acquire('d' || i, 'ho', '1 h')) FROM generate_series(1, 2) AS i;
	SELECT count(*) FROM hoplock_renew_all('ho', '2 s');
});
my $definer = $node->background_psql('postgres', on_error_stop => 0,
	extra_params => [ '-U', 'ka_b' ]);
my $definer_pid = $definer->query_safe(q{SELECT pg_backend_pid()});
$definer->query_safe(q{BEGIN});
is($definer->query_safe(q{SELECT renew_ho()}), '2',
	'another role renews the keepalive through SECURITY DEFINER code');
# past the lapse (2 s) and hung_holder_timeout (1 s), with room
sleep(5);
is($node->safe_psql('postgres',
		"SELECT count(*) FROM pg_stat_activity WHERE pid = $definer_pid"),
	'1', 'the session of the other role is not ended');
ok($node->log_contains(qr/not ending process $definer_pid, which holds up the keepalive of owner 'ho'/),
	'the log says why not');
$definer->query_safe(q{COMMIT});
$definer->quit;

done_testing();
