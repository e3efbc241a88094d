# A new term of an owner whose keepalive another transaction is renewing
# right now does not attach to it: that renewal may shorten the keepalive
# (a ttl below what is left) or roll back, so the term could not tell the
# expiry it runs until.  Its acquire is contention (NULL), as when the
# keepalive is being begun; once the renewal ends, the acquire attaches
# and returns the expiry the term really has.  An acquire that attached
# through the old version would return the old, later expiry while the
# committed renewal ends the term sooner: another owner would take the
# name while its holder still believes it holds it.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('renew_all_inflight');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE ka_a LOGIN;
});

sub as_a { return $node->safe_psql('postgres', "SET ROLE ka_a; $_[0]"); }

# a keepalive of owner "x" that runs for an hour, with one term on it
as_a(q{SELECT count(*) FROM hoplock_renew_all('x', '1 h')});
as_a(q{SELECT generation FROM hoplock_acquire('n0', 'x', '1 h')});

# another session of the owner shortens it, and has not committed yet
my $renewer = $node->background_psql('postgres');
$renewer->query_safe(q{SET ROLE ka_a});
$renewer->query_safe(q{BEGIN});
is($renewer->query_safe(q{SELECT count(*) FROM hoplock_renew_all('x', '8 s')}),
	'1', 'the renewal in flight renews the owner\'s term');

is(as_a(q{SELECT coalesce((hoplock_acquire('n1', 'x', '1 h')).generation::text, 'null')}),
	'null', 'a new term of the owner meanwhile is contention');
is(as_a(q{SELECT count(*) FROM hoplock_leases WHERE name = 'n1'}),
	'0', '... and begins nothing');
is($node->safe_psql('postgres', q{
	SELECT count(*) FROM hoplock_acquire('s1', 'x', '1 h') WHERE generation IS NOT NULL}),
	'1', 'another role\'s term of the same owner text is not held up');

$renewer->query_safe(q{COMMIT});
my $n1_expires = as_a(q{SELECT expires_at FROM hoplock_acquire('n1', 'x', '1 h')});
is(as_a(qq{SELECT '$n1_expires'::timestamptz - clock_timestamp() < '9 s'}),
	't', 'after the commit it attaches, with the shortened expiry');
is(as_a(qq{SELECT expires_at = '$n1_expires' FROM hoplock_read('n0')}),
	't', 'the acquire returned the keepalive\'s expiry');

# a renewal that will roll back: the same; then the committed expiry
$renewer->query_safe(q{BEGIN});
$renewer->query_safe(q{SELECT count(*) FROM hoplock_renew_all('x', '1 h')});
is(as_a(q{SELECT coalesce((hoplock_acquire('n2', 'x', '1 h')).generation::text, 'null')}),
	'null', 'a new term during a renewal that will roll back is contention');
$renewer->query_safe(q{ROLLBACK});
is(as_a(qq{SELECT expires_at = '$n1_expires' FROM hoplock_acquire('n2', 'x', '1 h')}),
	't', 'after the rollback it attaches with the committed expiry');

# the owner's own transaction attaches to its own renewal
$renewer->query_safe(q{BEGIN});
my $own = $renewer->query_safe(q{
	SELECT DISTINCT expires_at FROM hoplock_renew_all('x', '8 s') WHERE name = 'n0'});
is($renewer->query_safe(q{SELECT expires_at FROM hoplock_acquire('n3', 'x', '1 h')}),
	$own, 'a term begun in the renewing transaction attaches to its renewal');
$renewer->query_safe(q{COMMIT});
$renewer->quit;

# the keepalive lapses: every term is announced, none after the expiry
# its acquire returned
$node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM hoplock_internal.lease
	 WHERE owner = 'x' AND name ~ '^n' AND state = 'h'})
  or die 'the terms of the shortened keepalive were not announced';
is($node->safe_psql('postgres', qq{
	SELECT count(*) FROM hoplock_events(0)
	 WHERE event = 'expired' AND name IN ('n1', 'n2', 'n3')
	   AND at <= '$own'}),
	'3', 'each term lapsed no later than its acquire said');
is($node->safe_psql('postgres', q{SELECT count(*) FROM hoplock_holder('s1')}),
	'1', 'the other role\'s term runs on');

done_testing();
