# pg_dump -Fc and pg_restore of a database using hoplock 1.1.0 (installed
# into the schema hoplock, as the README says): into a new database of the
# same cluster and into another cluster. pg_dump and pg_restore run
# cleanly; the extension comes back as it was (definitions, privileges,
# granted ones too); the lease table, the history, the event sequence and
# the generation floor come back row for row; running terms still hold,
# with their owners and expiry, and the restored database's expiry worker
# announces the one that lapses; event numbers go on above the old ones;
# and every name's next generation is greater than any it had -- in a new
# era, as the floor names the database the dump came from.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(time);
use IPC::Run;
use Hoplock::Listener;
use Hoplock::Schema;

my $conf = q{
shared_preload_libraries = 'hoplock'
};

my $src = PostgreSQL::Test::Cluster->new('source');
$src->init;
$src->append_conf('postgresql.conf', $conf);
$src->start;

$src->safe_psql('postgres', q{
	CREATE ROLE leader LOGIN;
	CREATE DATABASE app;
});
$src->safe_psql('app', q{
	CREATE SCHEMA hoplock;
	CREATE EXTENSION hoplock SCHEMA hoplock;
	GRANT USAGE ON SCHEMA hoplock TO PUBLIC;
	GRANT EXECUTE ON FUNCTION hoplock.hoplock_force_release(text) TO leader;
	-- users' objects that depend on the extension's
	CREATE TABLE public.work_log (generation bigint NOT NULL, done text);
	CREATE TRIGGER fenced BEFORE INSERT OR UPDATE ON public.work_log
		FOR EACH ROW EXECUTE FUNCTION hoplock.hoplock_fenced('scheduler', 'generation');
	CREATE VIEW public.leaders AS SELECT name, owner FROM hoplock.hoplock_leases WHERE NOT expired;
	GRANT SELECT, INSERT ON public.work_log TO leader;
});

# The other cluster, with other roles first, so that leader's OID there is
# not its OID here.
my $dst = PostgreSQL::Test::Cluster->new('target');
$dst->init;
$dst->append_conf('postgresql.conf', $conf);
$dst->start;
$dst->safe_psql('postgres', q{
	CREATE ROLE someone_else;
	CREATE ROLE leader LOGIN;
});

sub as_leader
{
	my ($node, $db, $sql) = @_;
	return $node->safe_psql($db, $sql, extra_params => [ '-U', 'leader' ]);
}

# --- the source's history ----------------------------------------------------
#   scheduler   terms 1 (released) and 2, running for an hour, owned by leader
#   released    terms 1..3, released
#   expired     term 1, lapsed and announced by the worker
#   forgotten   terms 1..4, released and forgotten (its row removed)
#   lapsing     its first term, running at the dump, lapsing 20 s after it
as_leader($src, 'app', q{
	SELECT hoplock.hoplock_acquire('scheduler', 'host-a:1', '1 h');
	SELECT hoplock.hoplock_release('scheduler', 'host-a:1');
	SELECT hoplock.hoplock_acquire('scheduler', 'host-b:2', '1 h');
	INSERT INTO public.work_log VALUES (2, 'fenced write of generation 2');
	SELECT hoplock.hoplock_acquire('released', 'host-c:3', '1 h'), hoplock.hoplock_release('released', 'host-c:3')
	  FROM generate_series(1, 3);
	SELECT hoplock.hoplock_acquire('expired', 'host-d:4', '100 ms');
	SELECT hoplock.hoplock_acquire('forgotten', 'host-e:5', '1 h'), hoplock.hoplock_release('forgotten', 'host-e:5')
	  FROM generate_series(1, 4);
});
$src->safe_psql('app', q{SELECT hoplock.hoplock_forget('forgotten')});
$src->poll_query_until('app', q{SELECT state = 'x' FROM hoplock_internal.lease WHERE name = 'expired'})
  or die 'the worker did not announce the expiry';

# What the source holds, as the dump will carry it.
my %q = (
	lease => q{SELECT name, state, owner, owner_role, owner_roleid, generation, acquired_at,
	                  renewed_at, expires_at, session_pid, session_start
	             FROM hoplock_internal.lease ORDER BY name},
	history => q{SELECT * FROM hoplock_internal.history ORDER BY name, generation},
	events => q{SELECT seq, event, name, owner, generation, at FROM hoplock.hoplock_events(0) ORDER BY seq},
	event_seq => q{SELECT last_value, is_called FROM hoplock_internal.event_seq},
	floor => q{SELECT * FROM hoplock_internal.floor},
	work_log => q{SELECT * FROM public.work_log},
);

my ($lapsing_gen, $lapsing_expires) = split /\|/, $src->safe_psql('app', q{
	SELECT generation, extract(epoch FROM expires_at)
	  FROM hoplock.hoplock_acquire('lapsing', 'host-f:6', '20 s')});

# The greatest generation each name ever had here (the forgotten one's only
# in the history).
my %max_gen = map { split /\|/ } split /\n/, $src->safe_psql('app', q{
	SELECT name, max(generation) FROM (
		SELECT name, generation FROM hoplock_internal.lease
		UNION ALL SELECT name, generation FROM hoplock_internal.history) AS g
	GROUP BY name});
is(join(' ', map { "$_/$max_gen{$_}" } sort keys %max_gen),
	"expired/1 forgotten/4 lapsing/$lapsing_gen released/3 scheduler/2",
	'the source\'s generations');

my %before = map { $_ => $src->safe_psql('app', $q{$_}) } keys %q;
my $schema_before = Hoplock::Schema::fingerprint($src, 'app');
like($before{floor}, qr/^\d+\|\d+\|0\|1\|1\|4$/,
	'the source\'s floor: its cluster and database, era 0 from timeline 1, the forgotten generation 4');
cmp_ok((split /\|/, $before{event_seq})[0], '>=', 14, 'the source numbered its events');

# --- pg_dump -------------------------------------------------------------------
my $dump = $src->basedir . '/app.dump';
my ($stdout, $stderr) = ('', '');
my $ok = IPC::Run::run([ 'pg_dump', '-Fc', '-f', $dump, '-d', $src->connstr('app') ],
	'>', \$stdout, '2>', \$stderr);
ok($ok, 'pg_dump -Fc succeeds');
is($stderr, '', 'pg_dump prints no error or warning');

my $toc = '';
IPC::Run::run([ 'pg_restore', '-l', $dump ], '>', \$toc) or die 'pg_restore -l failed';
foreach my $entry ('EXTENSION - hoplock', 'TABLE DATA hoplock_internal lease',
	'TABLE DATA hoplock_internal history', 'TABLE DATA hoplock_internal floor',
	'SEQUENCE SET hoplock_internal event_seq')
{
	like($toc, qr/\Q$entry\E/, "the dump holds $entry");
}

# --- restore into a new database of the same cluster, and into another cluster --
# Into the new database in one go; into the other cluster section by section
# (as a staged restore does), with the database's expiry worker started by
# CREATE EXTENSION already running when the data comes in.
my @targets = ([ $src, 'copy', 'a new database of the same cluster' ],
	[ $dst, 'app', 'another cluster' ]);
sub restore
{
	my ($node, $db, $where, @options) = @_;
	my ($stdout, $stderr) = ('', '');
	my $ok = IPC::Run::run([ 'pg_restore', @options, '-d', $node->connstr($db), $dump ],
		'>', \$stdout, '2>', \$stderr);
	my $what = join(' ', 'pg_restore', @options);
	ok($ok, "$what into $where exits 0");
	is($stderr, '', "$what into $where prints no error or warning");
}
$src->safe_psql('postgres', 'CREATE DATABASE copy');
restore($src, 'copy', $targets[0][2]);
$dst->safe_psql('postgres', 'CREATE DATABASE app');
restore($dst, 'app', $targets[1][2], '--section=pre-data');
$dst->poll_query_until('app', q{
	SELECT state = 'sleeping' FROM hoplock.hoplock_workers WHERE datname = current_database()})
  or die 'no worker started by the restore\'s CREATE EXTENSION';
restore($dst, 'app', $targets[1][2], '--section=data');
restore($dst, 'app', $targets[1][2], '--section=post-data');
isnt($dst->safe_psql('postgres', q{SELECT oid FROM pg_roles WHERE rolname = 'leader'}),
	$src->safe_psql('postgres', q{SELECT oid FROM pg_roles WHERE rolname = 'leader'}),
	'the other cluster\'s role leader has another OID');

my %listener;
foreach my $t (@targets)
{
	my ($node, $db, $where) = @$t;
	$listener{$where} = Hoplock::Listener->new($node, $db);
	foreach my $what (sort grep { $_ ne 'floor' } keys %q)
	{
		is($node->safe_psql($db, $q{$what}), $before{$what}, "$where: $what restored as it was");
	}
	# The floor as dumped -- or, if the expiry worker started after it was
	# copied in, already moved on to this cluster and database, above the
	# greatest era used where it came from (0).
	my $moved = $node->safe_psql($db, q{
		SELECT s.system_identifier || '|' || d.oid || '|0|0|1|4'
		  FROM pg_control_system() AS s, pg_database AS d WHERE d.datname = current_database()});
	my $floor = $node->safe_psql($db, $q{floor});
	ok($floor eq $before{floor} || $floor eq $moved, "$where: floor restored as it was")
	  or diag("floor: $floor\nas dumped: $before{floor}\nor moved on: $moved");
	my $schema = Hoplock::Schema::fingerprint($node, $db);
	my $diff = Hoplock::Schema::diff($schema_before, $schema, 'source', 'restored');
	ok($diff eq '', "$where: the extension is restored as it was, granted privileges too")
	  or diag($diff);
	is( $node->safe_psql($db, q{
			SELECT string_agg(l.name || '/' || l.owner || '/' || l.generation || '/'
			                  || (l.expires_at = r.expires_at), ' ' ORDER BY l.name)
			  FROM hoplock_internal.lease AS r,
			       LATERAL hoplock.hoplock_holder(r.name) AS l
			 WHERE l.name IS NOT NULL}),
		"lapsing/host-f:6/$lapsing_gen/true scheduler/host-b:2/2/true",
		"$where: the running terms hold, with their owners, generations and expiry");
	is($node->safe_psql($db, q{SELECT hoplock.hoplock_acquire('scheduler', 'host-z:9', '1 h') IS NULL}),
		't', "$where: another owner is contended");
	is($node->safe_psql($db, q{SELECT string_agg(name || '/' || owner, ' ' ORDER BY name) FROM public.leaders}),
		'lapsing/host-f:6 scheduler/host-b:2', "$where: a user's view over hoplock_leases works");
}

# The terms are bound to role OIDs: the same in the same cluster, whatever
# role has the OID in the other (README: only a superuser may change them).
is( as_leader($src, 'copy', q{SELECT generation FROM hoplock.hoplock_renew('scheduler', 'host-b:2', '1 h', 2)}),
	'2', 'a new database of the same cluster: the holder renews its term, in the same generation');
is( as_leader($src, 'copy', q{BEGIN; SELECT hoplock.hoplock_fence('scheduler', 2);
	INSERT INTO public.work_log VALUES (2, 'after the restore'); COMMIT;}),
	'', '... and its fenced writes go through');
{
	my ($ret, $out, $err) = $dst->psql('app',
		"\\set VERBOSITY verbose\nSELECT hoplock.hoplock_renew('scheduler', 'host-b:2', '1 h', 2)",
		extra_params => [ '-U', 'leader' ]);
	like($err, qr/ERROR:  42501: permission denied for lease "scheduler"/,
		'another cluster: a role of the same name is another role, and may not renew it');
}
is($dst->safe_psql('app', q{SELECT generation FROM hoplock.hoplock_renew('scheduler', 'host-b:2', '1 h', 2)}),
	'2', '... a superuser may, in the same generation');

# --- the expiry worker of each restored database announces the lapse ----------
foreach my $t (@targets)
{
	my ($node, $db, $where) = @$t;
	ok( $node->poll_query_until($db, q{
			SELECT pid IS NOT NULL AND state IN ('sleeping', 'announcing', 'scanning')
			  FROM hoplock.hoplock_workers WHERE datname = current_database()}),
		"$where: the restored database has an expiry worker");
}
foreach my $t (@targets)
{
	my ($node, $db, $where) = @$t;
	my $events = $listener{$where}->collect($lapsing_expires - time() + 10,
		sub { grep { $_->{event} eq 'expired' } @{ $_[0] } });
	my @expired = grep { $_->{event} eq 'expired' } @$events;
	is(join(' ', map { "$_->{name}/$_->{generation}" } @expired), "lapsing/$lapsing_gen",
		"$where: the worker announces the restored term that lapses, and only it");
	SKIP:
	{
		skip 'no expired event', 1 unless @expired;
		my $lag = $expired[0]{received_at} - Hoplock::Listener::epoch($expired[0]{expires_at});
		ok($lag >= -0.05 && $lag < 2, "$where: announced promptly at its expires_at")
		  or diag("lag $lag s");
	}
}

# --- event numbers and generations go on ------------------------------------------
my ($last_seq) = split /\|/, $before{event_seq};
foreach my $t (@targets)
{
	my ($node, $db, $where) = @$t;
	$node->safe_psql($db, q{SELECT hoplock.hoplock_force_release('scheduler')});
	my $next = $node->safe_psql($db, q{
		SELECT string_agg(n || '/' || (hoplock.hoplock_acquire(n, 'host-n:1', '1 h')).generation, ' ' ORDER BY n)
		  FROM unnest(ARRAY['expired', 'forgotten', 'lapsing', 'released', 'scheduler']) AS n});
	my %next = map { split m{/} } split / /, $next;
	foreach my $name (sort keys %max_gen)
	{
		cmp_ok($next{$name} // 0, '>', $max_gen{$name}, "$where: $name\'s next generation is greater than its last");
	}
	# in a new era: above every generation the source could still hand out
	is(join(' ', map { "$_/" . ($next{$_} >> 40) } sort keys %next),
		'expired/1 forgotten/1 lapsing/1 released/1 scheduler/1',
		"$where: the next terms begin era 1 (generation 2^40 + n)");
	is( $node->safe_psql($db, q{
			SELECT f.system_identifier = s.system_identifier AND f.database = d.oid,
			       f.base_era, f.base_timeline, f.last_timeline, f.forgotten
			  FROM hoplock_internal.floor AS f, pg_control_system() AS s, pg_database AS d
			 WHERE d.datname = current_database()}),
		't|0|0|1|4', "$where: the floor now names this cluster and database, above era 0");
	my $events = $node->safe_psql($db, "SELECT min(seq), count(*) FROM hoplock.hoplock_events($last_seq)");
	my ($min, $count) = split /\|/, $events;
	cmp_ok($min // 0, '>', $last_seq, "$where: new events are numbered above the source's last ($last_seq)");
	cmp_ok($count, '>=', 6, "$where: hoplock_events($last_seq) returns the events since the restore");
	is( $node->safe_psql($db, "SELECT count(*) FROM hoplock.hoplock_events(0) WHERE seq <= $last_seq"),
		scalar(() = $before{events} =~ /\n/g) + 1,
		"$where: and the source's events are still there below");
}
is($src->safe_psql('app', q{SELECT owner || '/' || generation FROM hoplock.hoplock_holder('scheduler')}),
	'host-b:2/2', 'the source is untouched by the copies');

$_->disconnect foreach values %listener;
$dst->stop;
$src->stop;
done_testing();
