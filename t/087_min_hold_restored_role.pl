# A hold (min_hold) restored into another cluster, where the OID of the
# role that began the term belongs to another role: the hold keeps that
# other role out as it keeps out every role but the term's -- the term's
# role is told by OID and name together, as for every other change of a
# term (a renewal there is refused but to a superuser) -- and the hold's
# owner may take the name again there only as a superuser.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $conf = "shared_preload_libraries = 'hoplock'\n";

# the source: "leader" is the first role created
my $src = PostgreSQL::Test::Cluster->new('hold_src');
$src->init;
$src->append_conf('postgresql.conf', $conf);
$src->start;
$src->safe_psql('postgres', q{CREATE ROLE leader LOGIN; CREATE EXTENSION hoplock});
$src->safe_psql('postgres', q{SELECT hoplock_acquire('tick', 'node-a', '1 h', min_hold => '1 h')},
	extra_params => [ '-U', 'leader' ]);
$src->safe_psql('postgres', q{SELECT hoplock_release('tick', 'node-a')},
	extra_params => [ '-U', 'leader' ]);
my $dump = $src->basedir . '/hold.dump';
$src->command_ok([ 'pg_dump', '-Fc', '-f', $dump, '-d', $src->connstr('postgres') ], 'pg_dump');

# the target: "intruder" is created first, and gets leader's OID
my $dst = PostgreSQL::Test::Cluster->new('hold_dst');
$dst->init;
$dst->append_conf('postgresql.conf', $conf);
$dst->start;
$dst->safe_psql('postgres', q{CREATE ROLE intruder LOGIN; CREATE ROLE leader LOGIN; CREATE DATABASE app});
my $oid = $src->safe_psql('postgres', q{SELECT oid FROM pg_roles WHERE rolname = 'leader'});
is($dst->safe_psql('postgres', q{SELECT rolname FROM pg_roles WHERE oid = } . $oid),
	'intruder', "the target's intruder has the OID leader has on the source");
$dst->command_ok([ 'pg_restore', '-d', $dst->connstr('app'), $dump ], 'pg_restore');
is($dst->safe_psql('app', q{SELECT owner FROM hoplock_leases WHERE hold_until IS NOT NULL}),
	'node-a', 'the restored database lists the hold');

sub try_as
{
	my ($role, $sql) = @_;
	my ($ret, $out, $err) = $dst->psql('app', $sql, extra_params => [ '-U', $role ]);
	return $ret == 0 ? $out : "error: $err";
}

is(try_as('intruder', q{SELECT coalesce((hoplock_acquire('tick', 'node-a', '1 h')).owner, 'kept')}),
	'kept', 'the role that has the OID there, under another name, is kept out by the hold');
is(try_as('leader', q{SELECT coalesce((hoplock_acquire('tick', 'node-a', '1 h')).owner, 'kept')}),
	'kept', 'so is the role of the same name, another role there');
is(try_as('postgres', q{SELECT coalesce((hoplock_acquire('tick', 'node-a', '1 h')).owner, 'kept')}),
	'node-a', 'a superuser, with the owner of the hold, may take the name again');

$src->stop;
$dst->stop;
done_testing();
