# hoplock_renew_all after the server's clock stepped back.  A term that
# begins after a step back begins no earlier than the name's last term
# ended (t/015_clock.pl), so its acquired_at may lie ahead of the clock;
# a term's expiry must never come before its beginning.  hoplock_acquire
# and hoplock_renew keep that; so must hoplock_renew_all and a term begun
# while its owner's keepalive runs, which take the keepalive's expiry:
# the keepalive's renewal is moved past its terms' beginnings, and a term
# that begins after its expiry stays off it (docs/many-terms.md).  Found
# by t/017_torture.pl: the term was over before it began, and the history
# recorded it ending before it began.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $libfaketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1';
plan skip_all => "libfaketime is not installed ($libfaketime)" unless -e $libfaketime;

my $node = PostgreSQL::Test::Cluster->new('ra_clock');
$node->init;
# no expiry worker: libfaketime does not reach it (see t/015_clock.pl)
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.databases = 'none_at_all'
});

sub step_clock
{
	my ($offset) = @_;
	local $ENV{LD_PRELOAD} = defined $offset ? $libfaketime : '';
	local $ENV{FAKETIME} = $offset // '';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	$node->stop('fast') if defined $node->{_pid};
	$node->start;
}

# Terms of r1, r2, r3 ended 20 s ahead of the real clock.
step_clock('+20s');
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	SELECT hoplock_acquire('r' || i, 'old', '1 s') FROM generate_series(1, 3) AS i;
	SELECT hoplock_release('r' || i, 'old') FROM generate_series(1, 3) AS i;
});
step_clock(undef);

# The next terms begin where those ended, ahead of the clock.
is($node->safe_psql('postgres', q{
	SELECT bool_and(acquired_at > clock_timestamp() + interval '10 s' AND expires_at > acquired_at)
	  FROM (SELECT (hoplock_acquire('r' || i, 'k', '5 s')).* FROM generate_series(1, 2) AS i) AS a}),
	't', 'after the clock stepped back, new terms begin ahead of it, and expire after they begin');
is($node->safe_psql('postgres', q{
	SELECT expires_at > acquired_at FROM hoplock_renew('r2', 'k', '5 s')}),
	't', 'hoplock_renew of such a term: its expiry after its beginning');

{
	is($node->safe_psql('postgres', q{
		SELECT string_agg(name || ': ' || (expires_at > (SELECT acquired_at FROM hoplock_leases AS l WHERE l.name = r.name)), ', ' ORDER BY name)
		  FROM hoplock_renew_all('k', '1 s') AS r}),
		'r1: true, r2: true', 'hoplock_renew_all: each term expires after it began');
	is($node->safe_psql('postgres', q{
		SELECT expires_at > acquired_at FROM hoplock_acquire('r3', 'k', '1 s')}),
		't', 'a term begun attached to the running keepalive: it expires after it began');
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM hoplock_leases WHERE owner = 'k' AND expires_at <= acquired_at}),
		'0', 'hoplock_leases: no term of the owner expires before it began');
}

# Its end, recorded: the history of a term over before it began.
$node->safe_psql('postgres', q{SELECT pg_sleep(1.5)});
$node->safe_psql('postgres', q{SELECT hoplock_acquire('r' || i, 'other', '1 s') FROM generate_series(1, 3) AS i});
{
	is($node->safe_psql('postgres', q{
		SELECT count(*) FROM hoplock_history WHERE owner = 'k' AND ended_at < acquired_at}),
		'0', 'no term of the history ends before it began');
}

done_testing();
