# A hoplock_renew_all that would move an owner's keepalive to an earlier
# expiry while a new term of the owner is joining it (its acquire not
# committed yet) leaves the expiry where it was.  That acquire returned
# the keepalive's expiry, and the renewal cannot see the term to return
# it: had it shortened the keepalive, the term would have lapsed long
# before the expiry its holder was told, and another owner taken the name
# meanwhile.  Once the acquire committed, a renewal to an earlier expiry
# sees the term, returns it, and shortens it as asked.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('renew_all_shorten');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE ka_a LOGIN;
	CREATE ROLE ka_b LOGIN;
});

sub as_a { return $node->safe_psql('postgres', $_[0], extra_params => [ '-U', 'ka_a' ]); }

as_a(q{SELECT count(*) FROM hoplock_renew_all('y', '1 h')});
as_a(q{SELECT count(*) FROM hoplock_acquire('p0', 'y', '1 h')});

# a new term of the owner, attached, its transaction still open
my $acq = $node->background_psql('postgres', extra_params => [ '-U', 'ka_a' ]);
$acq->query_safe(q{BEGIN});
my $told = $acq->query_safe(q{SELECT expires_at FROM hoplock_acquire('p1', 'y', '1 h')});
is(as_a(qq{SELECT '$told'::timestamptz - clock_timestamp() > '50 min'}), 't',
	'the acquire returns the keepalive\'s expiry, an hour away');

# another session of the owner renews it all to 2 s
is(as_a(q{SELECT string_agg(name || ':' ||
		(expires_at - clock_timestamp() > '50 min'), ',')
	FROM hoplock_renew_all('y', '2 s')}),
	'p0:true', 'the renewal to an earlier expiry leaves the expiry where it was');
$acq->query_safe(q{COMMIT});
$acq->quit;
is(as_a(qq{SELECT expires_at = '$told' FROM hoplock_read('p1')}), 't',
	'the term runs until the expiry its acquire returned');

sleep(3);
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM hoplock_acquire('p1', 'b', '1 h') WHERE generation IS NOT NULL},
	extra_params => [ '-U', 'ka_b' ]),
	'0', 'another owner cannot take it two seconds later');
is(as_a(q{SELECT count(*) FROM hoplock_holder('p1') WHERE owner = 'y'}), '1',
	'its holder still holds it');

# with no term joining, a renewal shortens the terms it returns
is(as_a(q{SELECT string_agg(name || ':' ||
		(expires_at - clock_timestamp() < '3 s'), ',' ORDER BY name)
	FROM hoplock_renew_all('y', '2 s')}),
	'p0:true,p1:true', 'then a renewal to 2 s returns both terms, shortened');
$node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM hoplock_internal.lease WHERE owner = 'y' AND state = 'h'})
  or die 'the shortened terms were not announced';
pass('they lapse and are announced');

done_testing();
