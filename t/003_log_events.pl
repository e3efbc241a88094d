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
# the name's two terms, in order (their values are hoplock's business)
my @g = split /\n/, $node->safe_psql('postgres',
	q{SELECT generation FROM hoplock_history WHERE name = 'logged' ORDER BY generation});
is(scalar @g, 2, 'two terms of "logged" began');
is_deeply(
	[ map { s/, expires at .*//r } @lines ],
	[
		qq{hoplock: lease "logged" acquired, generation $g[0], owner "host-a:1"},
		qq{hoplock: lease "logged" released, generation $g[0], owner "host-a:1"},
		qq{hoplock: lease "logged" acquired, generation $g[1], owner "host-c:3"},
	],
	'one line per committed event, none for rolled-back ones, in order');

# Names and owners are written as JSON strings: an owner full of quotes
# cannot forge more of the line than itself.
$offset = -s $node->logfile;
my $forger = 'x", generation 99, owner "y';
$node->safe_psql('postgres', qq{SELECT hoplock_acquire('forge', '$forger', '1 h')});
$log = slurp_file($node->logfile, $offset);
my ($line) = ($log =~ /(hoplock: lease "forge" .*)$/m);
my $forge_gen = $node->safe_psql('postgres', q{SELECT generation FROM hoplock_read('forge')});
like($line,
	qr/^hoplock: lease "forge" acquired, generation $forge_gen, owner "x\\", generation 99, owner \\"y", expires at /,
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

# One transaction's events are logged up to a bound, then counted: an
# ordinary role choosing how many events its transaction has (here 10
# terms of each of 5,000 names, 100,000 events: ten times the bound; 1.1
# crashed writing 300,000) neither floods the log nor crashes the server
# writing them.
$node->safe_psql('postgres', q{
	CREATE ROLE plain LOGIN;
	GRANT USAGE ON SCHEMA public TO plain;
});
my $started = $node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()');
$offset = -s $node->logfile;
my ($ret, $out, $err) = $node->psql('postgres', q{
	BEGIN;
	SAVEPOINT s;
	SELECT count(hoplock_acquire('many-' || i, 'plain:0', '1 h')) FROM generate_series(1, 5000) AS i;
	ROLLBACK TO SAVEPOINT s;
	SELECT count(*)
	  FROM generate_series(1, 10) AS r,
	       LATERAL (SELECT hoplock_acquire('many-' || i, 'plain:' || r, '1 h'),
	                       hoplock_release('many-' || i, 'plain:' || r)
	                  FROM generate_series(1, 5000) AS i) AS terms;
	COMMIT;
}, extra_params => [ '-U', 'plain' ]);
is($ret, 0, 'a transaction with 100,000 events commits');
is($node->safe_psql('postgres', 'SELECT pg_postmaster_start_time()'), $started,
	'and the server did not restart');
$log = slurp_file($node->logfile, $offset);
my @many = ($log =~ /^.*(hoplock: lease "many-\d+" (?:acquired|released))/mg);
is(scalar @many, 10000, 'the first 10,000 of its events are logged');
like($log, qr/hoplock: 90000 more events of this transaction were not logged/,
	'and one line counts the rest, without those of the rolled-back savepoint');
unlike($log, qr/terminated by signal/, 'no backend died');

$node->stop;
done_testing();
