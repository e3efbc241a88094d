# hoplock_renew_all renews only terms it may renew, and returns every term
# it renews.  A term belongs to the role that began it by OID and by name
# (hoplock_renew of it by a renamed role, or by another role that has the
# OID after a restore into another cluster, is refused); a keepalive row
# knows its role by OID alone.  A keepalive that carries terms of another
# role name is not the caller's: hoplock_renew_all leaves it to lapse with
# those terms, and moves the caller's own terms on it to a keepalive of
# its own.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('renew_all_renamed');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE rr LOGIN;
});

sub as_rr
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', "SET ROLE rr; $sql");
}

as_rr(q{SELECT hoplock_acquire('old1', 'RN', '1 h')});
is(as_rr(q{SELECT string_agg(name, ',') FROM hoplock_renew_all('RN', '1 h')}),
	'old1', 'the role renews its term');

$node->safe_psql('postgres', 'ALTER ROLE rr RENAME TO rr_new');
$node->safe_psql('postgres', 'ALTER ROLE rr_new RENAME TO rr');
is(as_rr(q{SELECT string_agg(name, ',') FROM hoplock_renew_all('RN', '1 h')}),
	'old1', 'renamed back: still its term');

$node->safe_psql('postgres', 'ALTER ROLE rr RENAME TO rr2');
sub as_rr2
{
	my ($sql) = @_;
	return $node->safe_psql('postgres', "SET ROLE rr2; $sql");
}

# a term the renamed role begins now attaches to the keepalive, as before
as_rr2(q{SELECT hoplock_acquire('new1', 'RN', '1 h')});

my $old_expiry = $node->safe_psql('postgres',
	q{SELECT expires_at FROM hoplock_leases WHERE name = 'old1'});
my ($ret, $stdout, $stderr) = $node->psql('postgres',
	q{SET ROLE rr2; SELECT hoplock_renew('old1', 'RN', '2 h')});
like($stderr, qr/permission denied for lease "old1"/,
	'the renamed role may not renew the old term');

is(as_rr2(q{SELECT string_agg(name, ',' ORDER BY name)
	          FROM hoplock_renew_all('RN', '2 h')}),
	'new1', 'hoplock_renew_all returns the term of the new name');
is( $node->safe_psql('postgres',
		qq{SELECT expires_at = '$old_expiry' FROM hoplock_leases
		    WHERE name = 'old1'}),
	't', '... and does not renew the old one');
is( $node->safe_psql('postgres',
		q{SELECT expires_at > clock_timestamp() + interval '119 min'
		    FROM hoplock_leases WHERE name = 'new1'}),
	't', '... the new one runs on');
is(as_rr2(q{SELECT string_agg(name, ',' ORDER BY name)
	          FROM hoplock_renew_all('RN', '2 h')}),
	'new1', 'and again');

# a term of the new name begun now attaches to the new keepalive
as_rr2(q{SELECT hoplock_acquire('new2', 'RN', '1 h')});
is(as_rr2(q{SELECT string_agg(name, ',' ORDER BY name)
	          FROM hoplock_renew_all('RN', '2 h')}),
	'new1,new2', 'a later term is renewed with it');
is( $node->safe_psql('postgres',
		qq{SELECT expires_at = '$old_expiry' FROM hoplock_leases
		    WHERE name = 'old1'}),
	't', 'the old term is still not renewed');

$node->stop;
done_testing();
