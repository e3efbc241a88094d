# hoplock_renew_all racing the ends of its terms, from many clients.  An
# end (here a release) writes the term's row, a renewal the keepalive's;
# whichever order they meet in, a term's events must never read a
# "renewed" after its end: the stream of a (name, generation) is
# acquired, renewed*, then one end.  t/105 holds one order (the end's
# write before the renewal's scan) deterministically; this one races them
# to reach the other too (an end that read the keepalive before the
# renewal wrote it, and writes the term's row after the renewal's scan
# passed it: the end, looking at the keepalive again once its row is
# written, waits for the renewal).  That window is narrow: a stress test,
# which may pass by luck where the order is not kept.
use strict;
use warnings;
use lib 't/lib';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $seconds = 8;
my $node = PostgreSQL::Test::Cluster->new('ra_end_race');
$node->init;
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.notify_renewals = on
});
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	SELECT count(*) FROM hoplock_renew_all('k', '1 h');
});

my $dir = $node->basedir;
append_to_file("$dir/end.sql", q{
\set n random(1, 8)
SELECT hoplock_acquire('e' || :n, 'k', '1 h');
SELECT hoplock_release('e' || :n, 'k');
});
append_to_file("$dir/renew.sql", q{
SELECT count(*) FROM hoplock_renew_all('k', '1 h');
});
my @conn = ('-h', $node->host, '-p', $node->port, 'postgres');
my ($out1, $err1, $out2, $err2) = ('', '', '', '');
my $enders = IPC::Run::start([ 'pgbench', '-n', '-c', '4', '-j', '2', '-T', $seconds, '-f', "$dir/end.sql", @conn ],
	'>', \$out1, '2>', \$err1);
my $renewer = IPC::Run::start([ 'pgbench', '-n', '-c', '1', '-T', $seconds, '-f', "$dir/renew.sql", @conn ],
	'>', \$out2, '2>', \$err2);
$enders->finish;
$renewer->finish;
my ($ends) = $out1 =~ /number of transactions actually processed: (\d+)/;
my ($renewals) = $out2 =~ /number of transactions actually processed: (\d+)/;
cmp_ok($ends // 0, '>', 10, "terms begun and released (" . ($ends // "none: $err1") . ")");
cmp_ok($renewals // 0, '>', 10, "renewals of all of them (" . ($renewals // "none: $err2") . ")");

my $renewed = $node->safe_psql('postgres', q{
	SELECT count(*) FROM hoplock_events(0) WHERE event = 'renewed' AND name LIKE 'e%'});
cmp_ok($renewed, '>', 0, "renewed events of the terms ($renewed)");
is($node->safe_psql('postgres', q{
	SELECT string_agg(e.name || '/g' || e.generation, ' ')
	  FROM hoplock_events(0) AS e
	  JOIN hoplock_events(0) AS r
	    ON r.name = e.name AND r.generation = e.generation AND r.seq > e.seq
	 WHERE e.event IN ('released', 'expired') AND r.event = 'renewed'}),
	'', 'no term renewed after its end');

$node->stop;
done_testing();
