# DISCARD ALL, a pooler's reset, ends the session's bound terms without
# waiting for a synchronous standby, as the session's exit does: with
# synchronous_standby_names naming a standby that is not there, it
# returns at once, and the term is over.  (The session chose
# synchronous_commit = local; DISCARD ALL resets that to "on" before
# hoplock ends the term.)  Other transactions still wait for the standby.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('discard_syncrep');
$node->init(allows_streaming => 1);
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
synchronous_standby_names = 'absent_standby'
});
$node->start;
$node->safe_psql('postgres',
	'SET synchronous_commit = local; CREATE EXTENSION hoplock');

my ($out, $err) = ('', '');
my $timed_out = 0;
$node->psql('postgres', q{
SET synchronous_commit = local;
SELECT hoplock_acquire('sr', 'a', '1 h', session_bound => true) IS NOT NULL;
DISCARD ALL;
SELECT 'discarded';
},
	stdout => \$out, stderr => \$err,
	timeout => 10, timed_out => \$timed_out);
ok(!$timed_out, 'DISCARD ALL does not wait for the absent standby');
like($out, qr/^discarded$/m, 'DISCARD ALL returned');
is($err, '', 'without a warning');
is($node->safe_psql('postgres',
		"SELECT count(*) FROM hoplock_holder('sr') WHERE owner IS NOT NULL"),
	'0', 'the bound term is over');
is($node->safe_psql('postgres',
		"SELECT how FROM hoplock_history WHERE name = 'sr'"),
	'session ended', 'ended as the session');

# The setting is the transaction's own: the session's next transaction
# that writes waits for the standby again.
$timed_out = 0;
$node->psql('postgres', q{
SET synchronous_commit = local;
SELECT hoplock_acquire('sr2', 'a', '1 h', session_bound => true) IS NOT NULL;
DISCARD ALL;
CREATE TABLE waits_for_standby ();
},
	stdout => \$out, stderr => \$err,
	timeout => 5, timed_out => \$timed_out);
ok($timed_out, 'a later write in the session waits for the standby');

$node->stop('immediate');
done_testing();
