# DISCARD ALL ends the session's bound terms with hoplock loaded by the
# session that uses it, not preloaded (no shared memory, no worker), as
# it does preloaded: the session's exit ends them either way.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('discard_no_preload');
$node->init;
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

my ($out, $err) = ('', '');
$node->psql('postgres', q{
SELECT hoplock_acquire('np', 'a', '1 h', session_bound => true) IS NOT NULL;
DISCARD ALL;
SELECT coalesce((SELECT owner FROM hoplock_holder('np')), 'none');
SELECT how FROM hoplock_history WHERE name = 'np';
},
	stdout => \$out, stderr => \$err);
is($out, "t\nnone\nsession ended", 'DISCARD ALL ended the bound term');
is($err, '', 'without a warning');

$node->stop;
done_testing();
