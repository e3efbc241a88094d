# The leader loop in Python (examples/python, psycopg2) and Node.js
# (examples/node, node-postgres), run for real: two instances of each on
# one lease; one leads and works behind the fence; its process is killed
# with SIGKILL and the other takes over -- within milliseconds when the
# term is bound to the session, within the ttl otherwise -- with a greater
# generation; the work log never goes back a generation; SIGTERM releases.
# A leader whose term is force-released stops on the event that says so.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('examples');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE SCHEMA hoplock;
	CREATE EXTENSION hoplock SCHEMA hoplock;
	CREATE TABLE work_log (id bigserial PRIMARY KEY, lease text NOT NULL,
	    owner text NOT NULL, generation bigint NOT NULL,
	    at timestamptz NOT NULL DEFAULT clock_timestamp());
});

local $ENV{PGHOST} = $node->host;
local $ENV{PGPORT} = $node->port;
local $ENV{PGDATABASE} = 'postgres';
local $ENV{PGUSER} = scalar getpwuid($<);

my %programs = (
	python => [ '/usr/bin/python3', 'examples/python/leader.py' ],
	node => [ 'node', 'examples/node/leader.js' ],
);

sub holder
{
	my ($lease) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT coalesce(owner || '|' || generation, '') FROM hoplock.hoplock_holder('$lease')});
}

for my $lang (sort keys %programs)
{
	if ($lang eq 'python' && system('/usr/bin/python3 -c "import psycopg2" 2>/dev/null') != 0)
	{
		fail('python: psycopg2 is not installed (python3-psycopg2)');
		next;
	}
	if ($lang eq 'node' && !-d 'examples/node/node_modules/pg')
	{
		fail('node: examples/node has no node_modules (npm ci)');
		next;
	}
	for my $bound (1, 0)
	{
		my $lease = "$lang-" . ($bound ? 'bound' : 'ttl');
		local $ENV{LEADER_TTL} = '2';
		local $ENV{LEADER_SESSION_BOUND} = $bound;
		my (%h, %out, %err);
		for my $i (1, 2)
		{
			($out{$i}, $err{$i}) = ('', '');
			$h{$i} = IPC::Run::start([ @{ $programs{$lang} }, $lease ],
				'>', \$out{$i}, '2>', \$err{$i});
			usleep(300_000);
		}
		$node->poll_query_until('postgres',
			qq{SELECT count(*) >= 3 FROM work_log WHERE lease = '$lease'})
		  or die "$lease: nobody led";
		my ($owner, $gen) = split /\|/, holder($lease);
		my ($pid) = $owner =~ /:(\d+)$/;
		my ($leader) = grep { $h{$_}{KIDS}[0]{PID} == $pid } keys %h;
		ok(defined $leader, "$lease: one instance leads, generation $gen");
		my $follower = $leader == 1 ? 2 : 1;

		my $t0 = time();
		kill 'KILL', $pid;
		$h{$leader}->finish;
		$node->poll_query_until('postgres',
			qq{SELECT count(*) > 0 FROM work_log WHERE lease = '$lease' AND generation > $gen})
		  or die "$lease: the follower never took over";
		my $took = time() - $t0;
		my ($new_owner) = split /\|/, holder($lease);
		like($new_owner, qr/:$h{$follower}{KIDS}[0]{PID}$/,
			"$lease: the follower leads after the leader was killed");
		if ($bound)
		{
			# the follower waits in hoplock_wait, woken when the worker ends
			# the dead session's term; its first unit of work shows it
			cmp_ok($took, '<', 1.5,
				sprintf("$lease: taken over in %.0f ms, before the ttl (2 s) ran out", $took * 1000));
		}
		else
		{
			cmp_ok($took, '>=', 0.5, sprintf("$lease: taken over after the term lapsed (%.2f s)", $took));
			cmp_ok($took, '<', 6, "$lease: within the ttl and a wait");
		}
		is($node->safe_psql('postgres', qq{
			SELECT count(*) FROM work_log AS a JOIN work_log AS b USING (lease)
			 WHERE lease = '$lease' AND a.id < b.id AND a.generation > b.generation}),
			'0', "$lease: no work of an older generation after a newer one");

		$h{$follower}->signal('TERM');
		$h{$follower}->finish;
		is(holder($lease), '', "$lease: SIGTERM released the lease");
		is($err{$follower}, '', "$lease: the follower printed no error");
	}
}

# The end of a term announced by an event: the leader stops on the event
# (confirmed with the server), not later at its next fence or renewal.
# Generations are above 2^53, where JavaScript's JSON.parse rounds the
# payload's number: a client comparing it with the generation SQL returned
# would never match, and would only find out at the fence. The term is
# force-released just after a unit of work, so that the leader is asleep
# (half a second) when the event comes, and long before its first renewal
# (a third of the 30 s ttl).
for my $lang (sort keys %programs)
{
	next if $lang eq 'python' && system('/usr/bin/python3 -c "import psycopg2" 2>/dev/null') != 0;
	next if $lang eq 'node' && !-d 'examples/node/node_modules/pg';
	my $lease = "$lang-event";
	local $ENV{LEADER_TTL} = '30';
	local $ENV{LEADER_SESSION_BOUND} = '0';
	my ($out, $err) = ('', '');
	my $h = IPC::Run::start([ @{ $programs{$lang} }, $lease ], '>', \$out, '2>', \$err);
	$node->poll_query_until('postgres',
		qq{SELECT count(*) >= 2 FROM work_log WHERE lease = '$lease'})
	  or die "$lease: it never led";
	my ($owner, $gen) = split /\|/, holder($lease);
	$node->safe_psql('postgres', qq{
		DO \$\$
		DECLARE
			last_id bigint := (SELECT max(id) FROM work_log WHERE lease = '$lease');
		BEGIN
			WHILE (SELECT max(id) FROM work_log WHERE lease = '$lease') = last_id LOOP
				PERFORM pg_catalog.pg_sleep(0.005);
			END LOOP;
			PERFORM hoplock.hoplock_force_release('$lease');
		END \$\$});
	for (1 .. 100)
	{
		$h->pump_nb;
		last if $out =~ /^lost: /m;
		usleep(50_000);
	}
	like($out, qr/^leading, generation \Q$gen\E\nlost: the term ended$/m,
		"$lease: the leader of generation $gen stops on the event of its term's end");
	$h->signal('TERM');
	$h->finish;
	is($err, '', "$lease: it printed no error");
}

# Instances started at once, before their work_log exists: they race to
# create it, and none may die of losing (CREATE TABLE IF NOT EXISTS does
# not serialise concurrent creators).  Fresh schemas, three at a time.
for my $lang (sort keys %programs)
{
	next if $lang eq 'python' && system('/usr/bin/python3 -c "import psycopg2" 2>/dev/null') != 0;
	next if $lang eq 'node' && !-d 'examples/node/node_modules/pg';
	local $ENV{LEADER_TTL} = '1';
	my $died = '';
	for my $round (1 .. 3)
	{
		my $schema = "race_${lang}_$round";
		$node->safe_psql('postgres', "CREATE SCHEMA $schema");
		local $ENV{LEADER_WORK_SCHEMA} = $schema;
		my @runs;
		for (1 .. 3)
		{
			my ($out, $err) = ('', '');
			push @runs, [ IPC::Run::start([ @{ $programs{$lang} }, $schema ], '>', \$out, '2>', \$err), \$err ];
		}
		$node->poll_query_until('postgres',
			"SELECT to_regclass('$schema.work_log') IS NOT NULL AND (SELECT count(*) > 0 FROM $schema.work_log)")
		  or die "$schema: nobody led";
		usleep(300_000);
		for my $run (@runs)
		{
			$died .= "$schema exited early: ${$run->[1]}" unless $run->[0]->pumpable;
			$run->[0]->signal('TERM');
			$run->[0]->finish;
			$died .= "$schema: ${$run->[1]}" if ${$run->[1]} ne '';
		}
	}
	is($died, '', "$lang: instances started at once all survive creating work_log");
}

$node->stop;
done_testing();
