# The examples of examples/ against the other roles of their database.
#
# Forged events: any role may NOTIFY hoplock with any payload.  While a
# leader and a follower of examples/python and examples/node run, as an
# ordinary role, another ordinary role sends payloads that are not
# hoplock's events ('[]', 'null', '"x"', objects with fields missing or of
# the wrong type, non-numeric generations) and events that claim the
# leader's term was released or expired; then the same claim while the
# leader cannot confirm it (hoplock_holder raises).  Both instances
# survive, the leader leads on in the same term, the follower does not take
# over, and SIGTERM still ends both cleanly.
#
# Captured calls: a role that can create in hoplock's schema (a database
# owner who created it before the install) plants overloads that a call
# with untyped arguments prefers -- hoplock_wait(text, text, text, text,
# boolean), and the like.  examples/leader.sh, examples/python and
# examples/node, run as an ordinary role, lead, work, renew and release
# without ever calling one: every call is typed exactly.
#
# The pg_cron gates (examples/pg_cron) run by a role that is not a
# superuser, with the grants gate.sql documents: cron_gate.run in the
# lease's database, and cron_gate.run_via from another database through a
# foreign server whose user mapping holds the password -- which never
# appears in pg_stat_activity, where a pg_read_all_stats member would read
# it.  A connection string with a password in it is refused.
#
# Planted schemas: a database owner makes the schemas the recipes use
# before the install; the README's recipe, CREATE EXTENSION into them or
# into public, and examples/pg_cron/gate.sql refuse them.
#
# The work table: the examples name its schema (LEADER_WORK_SCHEMA), and
# never find it through search_path, where a work_log planted in public by
# its owner (the database owner) would come first for a role without a
# schema of its own.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;
use Time::HiRes qw(time usleep);

my $node = PostgreSQL::Test::Cluster->new('examples_attacks');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE SCHEMA hoplock;
	CREATE EXTENSION hoplock SCHEMA hoplock;
	GRANT USAGE ON SCHEMA hoplock TO PUBLIC;
	CREATE ROLE app LOGIN;
	CREATE ROLE mallory LOGIN;
	CREATE TABLE public.work_log (id bigserial PRIMARY KEY, lease text NOT NULL,
	    owner text NOT NULL, generation bigint NOT NULL,
	    at timestamptz NOT NULL DEFAULT clock_timestamp());
	ALTER TABLE public.work_log OWNER TO app;
	GRANT CREATE ON SCHEMA public TO app;
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

# mallory sends a payload on the channel
sub forge
{
	my ($payload) = @_;
	$node->safe_psql('postgres', qq{SELECT pg_catalog.pg_notify('hoplock', \$f\$$payload\$f\$)},
		extra_params => [ '-U', 'mallory' ]);
}

# the leader works on in the term of generation $gen, for another $secs
# seconds (longer than the ttl of 2 s: a dead leader's term would lapse,
# and the follower take over)
sub leads_on
{
	my ($lease, $gen, $secs, $what) = @_;
	my $id = $node->safe_psql('postgres', qq{SELECT coalesce(max(id), 0) FROM work_log});
	usleep($secs * 1_000_000);
	is(holder($lease) =~ s/^.*\|//r, $gen, "$lease: $what: the term of generation $gen still holds");
	is($node->safe_psql('postgres', qq{
		SELECT count(*) > 0 AND bool_and(generation = $gen) FROM work_log
		 WHERE lease = '$lease' AND id > $id}),
		't', "$lease: $what: the leader worked on in it, nobody else did");
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
	my $lease = "$lang-forged";
	my (%h, %out, %err);
	{
		local $ENV{PGUSER} = 'app';
		local $ENV{LEADER_TTL} = '2';
		local $ENV{LEADER_SESSION_BOUND} = '0';
		for my $i (1, 2)
		{
			($out{$i}, $err{$i}) = ('', '');
			$h{$i} = IPC::Run::start([ @{ $programs{$lang} }, $lease ],
				'>', \$out{$i}, '2>', \$err{$i});
			usleep(300_000);
		}
	}
	for (my $t = 0; ; $t++)
	{
		last if $node->safe_psql('postgres',
			qq{SELECT count(*) >= 3 FROM work_log WHERE lease = '$lease'}) eq 't';
		$_->pump_nb for values %h;
		die "$lease: nobody led:\n" . join('', map { "$out{$_}$err{$_}" } 1, 2) if $t > 100;
		usleep(100_000);
	}
	my ($owner, $gen) = split /\|/, holder($lease);

	# not events at all, or not of the shape hoplock sends
	forge($_) for ('[]', 'null', '"x"', '42', 'true', '{', '{"event":"expired"}',
		'{"name": 5}', qq{{"name": "$lease"}},
		qq{{"name": "$lease", "event": "expired", "generation": "x", "generation_text": "x"}},
		qq{{"name": "$lease", "event": "expired", "generation": [1], "generation_text": 5}},
		qq{{"name": "$lease", "event": "expired", "generation": 1e999}},
		qq{{"name": ["$lease"], "event": "expired", "generation": $gen, "generation_text": "$gen"}},
		qq{{"name": "$lease", "event": {}, "generation": $gen, "generation_text": "$gen"}});
	# well-formed claims that the leader's term ended: false
	forge(qq{{"seq": 1, "seq_text": "1", "event": "$_", "name": "$lease", "owner": "$owner",
		"generation": $gen, "generation_text": "$gen", "expires_at": "2000-01-01T00:00:00+00:00"}})
	  for ('expired', 'released');
	leads_on($lease, $gen, 3, 'after forged events');

	# the same claim, while the leader cannot confirm it
	$node->safe_psql('postgres',
		q{REVOKE EXECUTE ON FUNCTION hoplock.hoplock_holder(text) FROM PUBLIC});
	forge(qq{{"event": "expired", "name": "$lease", "owner": "$owner",
		"generation": $gen, "generation_text": "$gen"}});
	leads_on($lease, $gen, 1, 'after a forged event it could not confirm');
	$node->safe_psql('postgres',
		q{GRANT EXECUTE ON FUNCTION hoplock.hoplock_holder(text) TO PUBLIC});

	for my $i (1, 2)
	{
		kill 'TERM', $h{$i}{KIDS}[0]{PID};
		$h{$i}->finish;
		is($h{$i}->full_result(0), 0, "$lease: instance $i was alive and ended cleanly on SIGTERM");
		unlike($err{$i}, qr/Traceback|Error|error/, "$lease: instance $i printed no error");
	}
	is(holder($lease), '', "$lease: the leader released on SIGTERM");
	note("$lease: instance $_ printed:\n$out{$_}$err{$_}") for (1, 2);
}

# Overloads planted next to hoplock's functions, each counting its calls
# (a sequence: the count survives a rolled-back call) and passing them on.
my %planted = (
	wait => [ 'name text, owner text, ttl text, timeout text, session_bound boolean DEFAULT false',
		'hoplock.hoplock_lease', '$1, $2, $3::interval, $4::interval, $5' ],
	renew => [ 'name text, owner text, ttl text, generation bigint',
		'hoplock.hoplock_lease', '$1, $2, $3::interval, $4' ],
	fence => [ 'name text, generation text', 'void', '$1, $2::bigint' ],
	release => [ 'name text, owner text, generation text', 'boolean', '$1, $2, $3::bigint' ],
);
for my $f (sort keys %planted)
{
	my ($args, $returns, $pass) = @{ $planted{$f} };
	$node->safe_psql('postgres', qq{
		CREATE SEQUENCE public.captured_$f;
		GRANT USAGE ON SEQUENCE public.captured_$f TO PUBLIC;
		CREATE FUNCTION hoplock.hoplock_$f($args) RETURNS $returns LANGUAGE sql
		AS \$\$ SELECT pg_catalog.nextval('public.captured_$f');
		        SELECT hoplock.hoplock_$f($pass) \$\$;
	});
}

sub captured
{
	return join ' ', grep {
		$node->safe_psql('postgres', qq{SELECT is_called FROM public.captured_$_}) eq 't'
	} sort keys %planted;
}

$programs{sh} = [ 'sh', 'examples/leader.sh' ];
for my $lang (sort keys %programs)
{
	next if $lang eq 'python' && system('/usr/bin/python3 -c "import psycopg2" 2>/dev/null') != 0;
	next if $lang eq 'node' && !-d 'examples/node/node_modules/pg';
	$node->safe_psql('postgres', "ALTER SEQUENCE public.captured_$_ RESTART") for keys %planted;
	my $lease = "$lang-typed";
	my ($out, $err) = ('', '');
	my $h;
	{
		local $ENV{PGUSER} = 'app';
		local $ENV{LEADER_TTL} = '1';
		$h = IPC::Run::start([ @{ $programs{$lang} }, $lease ], '>', \$out, '2>', \$err);
	}
	# leads, works, renews (at a third of the ttl) and works on
	for (my $t = 0; ; $t++)
	{
		last if $node->safe_psql('postgres',
			qq{SELECT max(at) - min(at) > '0.8 s' FROM work_log WHERE lease = '$lease'}) eq 't';
		$h->pump_nb;
		die "$lease: it never led:\n$out$err" if $t > 100;
		usleep(100_000);
	}
	kill 'TERM', $h->{KIDS}[0]{PID};
	$h->finish;
	is(holder($lease), '', "$lease: it released on SIGTERM");
	is(captured(), '', "$lease: no call went to a planted overload");
}

# public.work_log stands for the planted one: a trigger records each row
$node->safe_psql('postgres', q{
	CREATE SCHEMA appwork AUTHORIZATION app;
	CREATE TABLE public.planted_seen (lease text);
	GRANT INSERT ON public.planted_seen TO PUBLIC;
	CREATE FUNCTION public.planted() RETURNS trigger LANGUAGE plpgsql AS $$
	BEGIN INSERT INTO public.planted_seen VALUES (NEW.lease); RETURN NEW; END $$;
	CREATE TRIGGER planted BEFORE INSERT ON public.work_log
	    FOR EACH ROW EXECUTE FUNCTION public.planted();
});
for my $lang (sort keys %programs)
{
	next if $lang eq 'python' && system('/usr/bin/python3 -c "import psycopg2" 2>/dev/null') != 0;
	next if $lang eq 'node' && !-d 'examples/node/node_modules/pg';
	my $lease = "$lang-work";
	my ($out, $err) = ('', '');
	my $h;
	{
		local $ENV{PGUSER} = 'app';
		local $ENV{LEADER_TTL} = '1';
		local $ENV{LEADER_WORK_SCHEMA} = 'appwork';
		$h = IPC::Run::start([ @{ $programs{$lang} }, $lease ], '>', \$out, '2>', \$err);
	}
	my $rows = q{SELECT (SELECT count(*) FROM appwork.work_log WHERE lease = '%1$s') || '/' ||
	                    (SELECT count(*) FROM public.work_log WHERE lease = '%1$s') || '/' ||
	                    (SELECT count(*) FROM public.planted_seen WHERE lease = '%1$s')};
	for (my $t = 0; ; $t++)
	{
		my $n = $node->safe_psql('postgres',
			q{SELECT pg_catalog.to_regclass('appwork.work_log') IS NOT NULL});
		last if $n eq 't' && $node->safe_psql('postgres', sprintf($rows, $lease)) =~ /^[3-9]|^\d\d/;
		last if $node->safe_psql('postgres',
			qq{SELECT count(*) >= 3 FROM public.work_log WHERE lease = '$lease'}) eq 't';
		$h->pump_nb;
		die "$lease: it never worked:\n$out$err" if $t > 100;
		usleep(100_000);
	}
	kill 'TERM', $h->{KIDS}[0]{PID};
	$h->finish;
	my $exists = $node->safe_psql('postgres',
		q{SELECT pg_catalog.to_regclass('appwork.work_log') IS NOT NULL});
	is($exists, 't', "$lease: work_log was created in appwork");
	like($exists eq 't' ? $node->safe_psql('postgres', sprintf($rows, $lease)) : 'none', qr{^\d+/0/0$},
		"$lease: every unit of work went to appwork.work_log, none through the planted table");
}

SKIP:
{
	my $pkglibdir = $node->config_data('--pkglibdir');
	skip 'dblink is not installed', 7 unless -f "$pkglibdir/dblink.so";
	my ($host, $port) = ($node->host, $node->port);
	# the job owner's connections through dblink authenticate with a
	# password; the test's own (SET ROLE) do not
	my $hba = slurp_file($node->data_dir . '/pg_hba.conf');
	open my $fh, '>', $node->data_dir . '/pg_hba.conf' or die;
	print $fh "local all jobowner scram-sha-256\n$hba";
	close $fh;
	$node->reload;
	$node->safe_psql('postgres', q{
		CREATE ROLE jobowner LOGIN PASSWORD 'sesame-4e1d';
		CREATE ROLE monitor LOGIN IN ROLE pg_read_all_stats;
		CREATE DATABASE jobs;
	});
	$node->safe_psql('postgres', slurp_file('examples/pg_cron/gate.sql'));
	# the grants gate.sql documents for the roles that own the jobs
	$node->safe_psql('postgres', q{
		GRANT USAGE ON SCHEMA cron_gate TO jobowner;
		GRANT SELECT, INSERT, UPDATE ON cron_gate.log TO jobowner;
		GRANT USAGE ON SEQUENCE cron_gate.log_id_seq TO jobowner;
	});
	$node->safe_psql('jobs', slurp_file('examples/pg_cron/gate_remote.sql'));
	# the foreign server and user mapping gate_remote.sql documents
	$node->safe_psql('jobs', qq{
		CREATE SERVER lease_db FOREIGN DATA WRAPPER dblink_fdw
		    OPTIONS (host '$host', port '$port', dbname 'postgres');
		CREATE USER MAPPING FOR jobowner SERVER lease_db
		    OPTIONS (user 'jobowner', password 'sesame-4e1d');
		GRANT USAGE ON FOREIGN SERVER lease_db TO jobowner;
		GRANT USAGE ON SCHEMA cron_gate TO jobowner;
	});

	my ($ret, $out, $err) = $node->psql('postgres', q{
		SET ROLE jobowner;
		CALL cron_gate.run('local-job', '1 min', 'SELECT 1');
	});
	is("$ret $err", '0 ', 'cron_gate.run as a job owner with the documented grants');
	is($node->safe_psql('postgres', q{
		SELECT string_agg(outcome, ',') FROM cron_gate.log WHERE lease = 'local-job'}),
		'ran', 'local-job: ran, and released');

	# the run behind dblink, watched by a pg_read_all_stats member
	my ($rout, $rerr) = ('', '');
	my $run = IPC::Run::start([ 'psql', '-X', '-d', $node->connstr('jobs'),
		'-c', 'SET ROLE jobowner',
		'-c', q{CALL cron_gate.run_via('lease_db', 'remote-job', '1 min', 'SELECT pg_catalog.pg_sleep(2)')} ],
		'>', \$rout, '2>', \$rerr);
	my @seen;
	for (1 .. 30)
	{
		push @seen, $node->safe_psql('postgres', q{
			SELECT string_agg(query, E'\n') FROM pg_catalog.pg_stat_activity
			 WHERE pid <> pg_catalog.pg_backend_pid()},
			extra_params => [ '-U', 'monitor' ]);
		usleep(100_000);
	}
	$run->finish;
	is($rerr, '', 'cron_gate.run_via through a foreign server as a job owner');
	ok((grep { /run_via/ } @seen) && (grep { /hoplock_fence/ } @seen),
		'the monitoring role saw the run in both databases');
	is(join('', grep { /sesame/ } @seen), '', 'and never the password');
	is($node->safe_psql('postgres', q{
		SELECT string_agg(outcome, ',') FROM cron_gate.log WHERE lease = 'remote-job'}),
		'ran', 'remote-job: ran, and released');

	($ret, $out, $err) = $node->psql('jobs', qq{
		SET ROLE jobowner;
		CALL cron_gate.run_via('host=$host port=$port dbname=postgres user=jobowner password=sesame-4e1d',
		                       'remote-job-2', '1 min', 'SELECT 1');
	});
	like($err, qr/password/, 'a connection string with a password is refused');
}

# --- Planted schemas: the install recipes refuse them ----------------------
# A database owner who is not a superuser makes, before the install, the
# schemas the recipes use (hoplock, cron_gate): the README's recipe, a
# CREATE EXTENSION into them or into public (which that owner owns), and
# the pg_cron gate fail rather than use them.
$node->safe_psql('postgres', q{
	CREATE ROLE dbowner LOGIN;
	CREATE DATABASE owned OWNER dbowner;
});
$node->safe_psql('owned', q{SET ROLE dbowner; CREATE SCHEMA hoplock; CREATE SCHEMA cron_gate;});
my ($pret, $pout, $perr) = $node->psql('owned',
	q{CREATE SCHEMA hoplock; CREATE EXTENSION hoplock SCHEMA hoplock;});
isnt($pret, 0, "the README's install fails where the database owner made schema hoplock");
($pret, $pout, $perr) = $node->psql('owned', q{CREATE EXTENSION hoplock SCHEMA hoplock});
like($perr, qr/hoplock cannot be installed in schema "hoplock".*\n.*Role "dbowner"/,
	'CREATE EXTENSION refuses a schema the database owner owns');
($pret, $pout, $perr) = $node->psql('owned', q{CREATE EXTENSION hoplock});
like($perr, qr/hoplock cannot be installed in schema "public"/,
	'and public, which the database owner owns');
is($node->safe_psql('owned', q{SELECT count(*) FROM pg_extension WHERE extname = 'hoplock'}),
	'0', 'nothing installed');
($pret, $pout, $perr) = $node->psql('owned', slurp_file('examples/pg_cron/gate.sql'));
like($perr, qr/schema cron_gate exists and a role that is not a superuser owns it/,
	'gate.sql refuses a cron_gate the database owner made');
is($node->safe_psql('owned', q{SELECT count(*) FROM pg_proc WHERE pronamespace = 'cron_gate'::regnamespace}),
	'0', 'and creates nothing in it');

$node->stop;
done_testing();
