# hoplock.log_events: every event becomes a server log line, written when
# the transaction commits and never for one that rolls back; names and
# owners are quoted as JSON strings, so none can forge a line.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use JSON::PP;

my $node = PostgreSQL::Test::Cluster->new('main');
$node->init;
$node->append_conf(
	'postgresql.conf', q{
shared_preload_libraries = 'hoplock'
hoplock.log_events = on
});
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

my $offset = -s $node->logfile;
$node->safe_psql('postgres', q{SELECT hoplock_acquire('logged', 'host-a:1', '1 h')});
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT hoplock_release('logged', 'host-a:1');
	ROLLBACK;
});
$node->safe_psql('postgres', q{
	BEGIN;
	SELECT hoplock_release('logged', 'host-a:1');
	SAVEPOINT s;
	SELECT hoplock_acquire('logged', 'host-b:2', '1 h');
	ROLLBACK TO SAVEPOINT s;
	SELECT hoplock_acquire('logged', 'host-c:3', '1 h');
	COMMIT;
});

my $log = slurp_file($node->logfile, $offset);
my @lines = ($log =~ /(hoplock: lease .*)$/mg);
is_deeply(
	[ map { s/, expires at .*//r } @lines ],
	[
		'hoplock: lease "logged" acquired, generation 1, owner "host-a:1"',
		'hoplock: lease "logged" released, generation 1, owner "host-a:1"',
		'hoplock: lease "logged" acquired, generation 2, owner "host-c:3"',
	],
	'one line per committed event, none for rolled-back ones, in order');

# Names and owners are written as JSON strings: an owner full of quotes
# cannot forge more of the line than itself.
$offset = -s $node->logfile;
my $forger = 'x", generation 99, owner "y';
$node->safe_psql('postgres', qq{SELECT hoplock_acquire('forge', '$forger', '1 h')});
$log = slurp_file($node->logfile, $offset);
my ($line) = ($log =~ /(hoplock: lease "forge" .*)$/m);
like($line,
	qr/^hoplock: lease "forge" acquired, generation 1, owner "x\\", generation 99, owner \\"y", expires at /,
	'a forged owner stays one quoted, escaped string');
my ($quoted) = ($line =~ /owner ("(?:[^"\\]|\\.)*"), expires at/);
is(JSON::PP->new->allow_nonref->decode($quoted), $forger, 'which decodes to the owner given');

# Only superusers may turn it off for their session; it is on here.
$offset = -s $node->logfile;
$node->safe_psql('postgres', q{
	SET hoplock.log_events = off;
	SELECT hoplock_renew('logged', 'host-c:3', '1 h');
	SELECT hoplock_release('logged', 'host-c:3');
});
$log = slurp_file($node->logfile, $offset);
unlike($log, qr/hoplock: lease/, 'no lines with hoplock.log_events = off');

$node->stop;
done_testing();
