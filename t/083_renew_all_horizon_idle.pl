# A transaction that cannot be beginning a term does not keep an owner's
# hoplock_renew_all scanning the whole lease table.  When a keepalive
# begins, a term begun by a transaction already running may have missed
# it, so renew_all scans again at each call until those have ended
# (attach.c: the horizon).  Only a transaction holding a term lock can be
# beginning a term; another role's idle transaction that holds none (or a
# long report) used to keep every renew_all of the owner scanning the
# table for as long as it stayed open: 17 ms a call instead of 2.7 ms for
# 1,000 terms in a table of 120,000 names, measured.  Now it keeps no
# horizon; a transaction with a term lock still does (it may be the
# owner's), and its term is found once it commits.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('renew_all_horizon');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE ka_a LOGIN;
	CREATE ROLE ka_b LOGIN;
});

sub as_a { return $node->safe_psql('postgres', $_[0], extra_params => [ '-U', 'ka_a' ]); }
sub horizon
{
	return $node->safe_psql('postgres', qq{
		SELECT attach_horizon IS NOT NULL FROM hoplock_internal.keepalive
		 WHERE owner = '$_[0]'});
}

as_a(q{SELECT count(hoplock_acquire('a' || i, 'o1', '1 h')) FROM generate_series(1, 20) AS i});

# another role's idle transaction, with an id and no term lock
my $idle = $node->background_psql('postgres', extra_params => [ '-U', 'ka_b' ]);
$idle->query_safe(q{BEGIN});
$idle->query_safe(q{SELECT pg_current_xact_id()});

is(as_a(q{SELECT count(*) FROM hoplock_renew_all('o1', '1 h')}), '20',
	'the keepalive begins and attaches the owner\'s terms');
is(horizon('o1'), 'f',
	'no horizon is kept for the idle transaction: it holds no term lock');
is(as_a(q{SELECT count(*) FROM hoplock_renew_all('o1', '1 h')}), '20',
	'the next call renews them');
is(horizon('o1'), 'f', '... and scans for none');
$idle->query_safe(q{COMMIT});

# a transaction beginning a term (of the owner, as it happens) when the
# keepalive begins keeps the horizon until it ends; its term is found then
my $acq = $node->background_psql('postgres', extra_params => [ '-U', 'ka_a' ]);
$acq->query_safe(q{BEGIN});
$acq->query_safe(q{SELECT count(*) FROM hoplock_acquire('late', 'o2', '1 h')});
is(as_a(q{SELECT count(*) FROM hoplock_renew_all('o2', '1 h')}), '0',
	'a term in flight is not seen when the keepalive begins');
is(as_a(q{SELECT count(*) FROM hoplock_renew_all('o2', '1 h')}), '0',
	'nor while its transaction runs');
is(horizon('o2'), 't', 'the horizon stays while it holds its term lock');
$acq->query_safe(q{COMMIT});
$acq->quit;
is(as_a(q{SELECT name FROM hoplock_renew_all('o2', '1 h')}), 'late',
	'once it committed, the next call finds and attaches the term');
is(horizon('o2'), 'f', '... and drops the horizon');
is($node->safe_psql('postgres',
		q{SELECT keepalive > 0 FROM hoplock_internal.lease WHERE name = 'late'}),
	't', 'the term is attached');

# a transaction of another role that holds a term lock keeps it too (it
# cannot be told from the owner's), until it ends
my $other = $node->background_psql('postgres', extra_params => [ '-U', 'ka_b' ]);
$other->query_safe(q{BEGIN});
$other->query_safe(q{SELECT count(*) FROM hoplock_acquire('b1', 'b', '1 h')});
as_a(q{SELECT count(*) FROM hoplock_renew_all('o3', '1 h')});
as_a(q{SELECT count(*) FROM hoplock_renew_all('o3', '1 h')});
is(horizon('o3'), 't', 'a transaction holding a term lock keeps the horizon');
$other->query_safe(q{COMMIT});
$other->quit;
as_a(q{SELECT count(*) FROM hoplock_renew_all('o3', '1 h')});
is(horizon('o3'), 'f', 'dropped once it ended');
$idle->quit;

done_testing();
