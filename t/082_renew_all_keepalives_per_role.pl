# hoplock.max_names_per_role bounds a role's keepalives too.  Each
# hoplock_renew_all of a new owner begins a keepalive -- a row, and an
# entry in the worker's schedule, until it lapses -- even with no term, so
# without a bound a role limited to a few names could still fill the
# keepalive table (100,000 keepalives in one statement of 3.5 s, measured)
# and keep the worker busy announcing their lapse while other roles'
# expiries wait.  While the setting is on, a role may have as many
# keepalives as names (53400 beyond), begun one transaction at a time
# (55P03 meanwhile); renewing one it has is never refused, a lapsed one
# the worker deleted makes room, and superusers are not limited.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('renew_all_per_role');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE ka_a LOGIN;
	ALTER ROLE ka_a SET hoplock.max_names_per_role = 3;
});

# the SQLSTATE of a statement as ka_a, or "ok"
sub as_a
{
	my ($sql) = @_;
	my ($ret, $stdout, $stderr) = $node->psql('postgres', $sql,
		extra_params => [ '-U', 'ka_a', '-v', 'VERBOSITY=verbose' ]);
	return 'ok' if $ret == 0;
	return $stderr =~ /ERROR:\s+(\w{5})/ ? $1 : $stderr;
}

is(as_a(q{SELECT count(*) FROM generate_series(1, 3) AS i,
	hoplock_renew_all('o' || i, '2 s')}), 'ok', 'three keepalives: as many as names');
is(as_a(q{SELECT count(*) FROM hoplock_renew_all('o4', '1 h')}), '53400',
	'a fourth is refused');
is($node->safe_psql('postgres',
		q{SELECT count(*) FROM hoplock_internal.keepalive WHERE owner = 'o4'}),
	'0', '... and nothing was begun');
is(as_a(q{SELECT count(*) FROM hoplock_renew_all('o1', '2 s')}), 'ok',
	'renewing one it has is not refused');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM generate_series(1, 10) AS i,
	  hoplock_renew_all('su' || i, '1 h')}),
	'0', 'a superuser is not limited');

# they lapse, the worker deletes them: room again
$node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM hoplock_internal.keepalive
	 WHERE owner_roleid = 'ka_a'::regrole})
  or die 'the lapsed keepalives were not deleted';
is(as_a(q{SELECT count(*) FROM hoplock_renew_all('o4', '1 h')}), 'ok',
	'once they lapsed and were deleted, another may be begun');

# one transaction of the role begins keepalives at a time
my $open = $node->background_psql('postgres', extra_params => [ '-U', 'ka_a' ]);
$open->query_safe(q{BEGIN});
$open->query_safe(q{SELECT count(*) FROM hoplock_renew_all('o5', '1 h')});
is(as_a(q{SELECT count(*) FROM hoplock_renew_all('o6', '1 h')}), '55P03',
	'another transaction of the role beginning one meanwhile: 55P03');
is(as_a(q{SELECT count(*) FROM hoplock_renew_all('o4', '1 h')}), 'ok',
	'... renewing one it has is not held up');
$open->query_safe(q{ROLLBACK});
$open->quit;
is(as_a(q{SELECT count(*) FROM hoplock_renew_all('o6', '1 h')}), 'ok',
	'after that transaction ends it goes through');

done_testing();
