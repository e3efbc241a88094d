# pg_dump -Fc and pg_restore of a database using hoplock (the current version, installed
# into the schema hoplock, as the README says): into a new database of the
# same cluster and into another cluster. pg_dump and pg_restore run
# cleanly; the extension comes back as it was (definitions, privileges,
# granted ones too); the lease table (with its row versions), the history,
# the event sequence (unused since 1.2, kept for 1.1's dumps), the floor of
# forgotten names and the branches come back row for row; running terms
# still hold, with their owners, expiry and handles, and the restored
# database's expiry worker announces the one that lapses; the restore's
# writes begin a new branch on each copy (docs/forks-and-events.md), so
# that event numbers go on above the old ones, every name's next generation
# is greater than any it had and than every value the source had minted
# when the copy began minting, and handles of the source's states -- the
# dumped one once the copy moved on, one the source reached after the dump
# -- match nothing on the copy.
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
#   scheduler   two terms, the first released, the second running for an
#               hour, owned by leader
#   released    three terms, released
#   expired     one term, lapsed and announced by the worker
#   forgotten   four terms, released and forgotten (its row removed)
#   lapsing     its first term, running at the dump, lapsing 20 s after it
my $sched_gen = as_leader($src, 'app', q{
	SELECT hoplock.hoplock_acquire('scheduler', 'host-a:1', '1 h') \g /dev/null
	SELECT hoplock.hoplock_release('scheduler', 'host-a:1') \g /dev/null
	SELECT generation FROM hoplock.hoplock_acquire('scheduler', 'host-b:2', '1 h');
});
like($sched_gen, qr/^\d+$/, "scheduler's second term: generation $sched_gen");
as_leader($src, 'app', qq{
	INSERT INTO public.work_log VALUES ($sched_gen, 'fenced write of the second term');
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
	lease => q{SELECT name, state, owner, owner_role, owner_roleid, generation, version, acquired_at,
	                  renewed_at, expires_at, session_pid, session_start
	             FROM hoplock_internal.lease ORDER BY name},
	history => q{SELECT * FROM hoplock_internal.history ORDER BY name, generation},
	events => q{SELECT seq, event, name, owner, generation, at FROM hoplock.hoplock_events(0) ORDER BY seq},
	event_seq => q{SELECT last_value, is_called FROM hoplock_internal.event_seq},
	floor => q{SELECT * FROM hoplock_internal.floor},
	work_log => q{SELECT * FROM public.work_log},
);
# The branches (the table pg_dump keeps): every row as dumped.
my $q_branch = q{SELECT * FROM hoplock_internal.branch ORDER BY started_at, tag};

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
is($max_gen{scheduler}, $sched_gen, 'scheduler\'s greatest generation is its running term\'s');
# Each name's terms, each above the one before it.
is( $src->safe_psql('app', q{
		SELECT string_agg(name || '/' || terms || '/' || ordered, ' ' ORDER BY name)
		  FROM (SELECT name, count(*) AS terms, bool_and(prev IS NULL OR generation > prev) AS ordered
		          FROM (SELECT name, generation,
		                       lag(generation) OVER (PARTITION BY name ORDER BY acquired_at) AS prev
		                  FROM hoplock.hoplock_history) AS h
		         GROUP BY name) AS t}),
	'expired/1/true forgotten/4/true lapsing/1/true released/3/true scheduler/2/true',
	'the source\'s generations: each name\'s terms, each above the one before');

my %before = map { $_ => $src->safe_psql('app', $q{$_}) } keys %q;
my $schema_before = Hoplock::Schema::fingerprint($src, 'app');
my $before_branch = $src->safe_psql('app', $q_branch);
is( $src->safe_psql('app', qq{
		SELECT f.system_identifier = s.system_identifier AND f.database = d.oid
		       AND f.forgotten = $max_gen{forgotten}
		  FROM hoplock_internal.floor AS f, pg_control_system() AS s, pg_database AS d
		 WHERE d.datname = current_database()}),
	't', 'the source\'s floor: its cluster and database, the forgotten name\'s last generation');
# Event numbers: one per event, each minted on one of the source's branches
# (c at or above its floor, its tag).
is( $src->safe_psql('app', q{
		SELECT count(*) >= 14 AND count(DISTINCT e.seq) = count(*)
		       AND bool_and(EXISTS (SELECT FROM hoplock_internal.branch AS b
		                             WHERE b.tag = (e.seq & 2047) AND (e.seq >> 11) >= b.floor))
		  FROM hoplock.hoplock_events(0) AS e}),
	't', 'the source numbered its events');
my $last_seq = (split /\|/, (split /\n/, $before{events})[-1])[0];
my $handle_dumped = $src->safe_psql('app', q{SELECT handle FROM hoplock.hoplock_read('scheduler')});
like($handle_dumped, qr/^h2:\d+:\Q$sched_gen\E$/, "scheduler's handle at the dump: $handle_dumped");

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
	'TABLE DATA hoplock_internal branch', 'SEQUENCE SET hoplock_internal event_seq')
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
	foreach my $what (sort keys %q)
	{
		is($node->safe_psql($db, $q{$what}), $before{$what}, "$where: $what restored as it was");
	}
	# The branches as dumped, every one of them; besides them, the restore's
	# writes left rows marking the branch stale ('written'), and the other
	# cluster's worker, started by the restore's CREATE EXTENSION before the
	# data came in, may have begun a first branch.
	my %restored = map { $_ => 1 } split /\n/, $node->safe_psql($db, $q_branch);
	is(join("\n", grep { $restored{$_} } split /\n/, $before_branch), $before_branch,
		"$where: the branches restored as they were");
	is($node->safe_psql($db, q{SELECT count(*) > 0 FROM hoplock_internal.branch WHERE reason = 'written'}),
		't', "$where: the restore's writes marked the branch stale");
	is($node->safe_psql($db, q{SELECT handle FROM hoplock.hoplock_read('scheduler')}),
		$handle_dumped, "$where: the restored state has the dumped state's handle");
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
		"lapsing/host-f:6/$lapsing_gen/true scheduler/host-b:2/$sched_gen/true",
		"$where: the running terms hold, with their owners, generations and expiry");
	is($node->safe_psql($db, q{SELECT hoplock.hoplock_acquire('scheduler', 'host-z:9', '1 h') IS NULL}),
		't', "$where: another owner is contended");
	is($node->safe_psql($db, q{SELECT string_agg(name || '/' || owner, ' ' ORDER BY name) FROM public.leaders}),
		'lapsing/host-f:6 scheduler/host-b:2', "$where: a user's view over hoplock_leases works");
}

# The greatest value the source had minted (generations, row versions,
# event numbers) before the copies mint their first: every copy's values
# must be above it (a branch begins at now + margin, above the data).
my $src_max = $src->safe_psql('app', q{
	SELECT greatest((SELECT max(greatest(generation, version)) FROM hoplock_internal.lease),
	                (SELECT max(greatest(generation, begin_seq, end_seq)) FROM hoplock_internal.history))});

# The terms are bound to role OIDs: the same in the same cluster, whatever
# role has the OID in the other (README: only a superuser may change them).
is( as_leader($src, 'copy', qq{SELECT generation FROM hoplock.hoplock_renew('scheduler', 'host-b:2', '1 h', $sched_gen)}),
	$sched_gen, 'a new database of the same cluster: the holder renews its term, in the same generation');
is( as_leader($src, 'copy', qq{BEGIN; SELECT hoplock.hoplock_fence('scheduler', $sched_gen);
	INSERT INTO public.work_log VALUES ($sched_gen, 'after the restore'); COMMIT;}),
	'', '... and its fenced writes go through');
{
	my ($ret, $out, $err) = $dst->psql('app',
		"\\set VERBOSITY verbose\nSELECT hoplock.hoplock_renew('scheduler', 'host-b:2', '1 h', $sched_gen)",
		extra_params => [ '-U', 'leader' ]);
	like($err, qr/ERROR:  42501: permission denied for lease "scheduler"/,
		'another cluster: a role of the same name is another role, and may not renew it');
}
is($dst->safe_psql('app', qq{SELECT generation FROM hoplock.hoplock_renew('scheduler', 'host-b:2', '1 h', $sched_gen)}),
	$sched_gen, '... a superuser may, in the same generation');

# Handles: the source renews too, after the fork. Each copy's renewal gave
# its state a new handle, above the source's greatest value; neither the
# dumped state's handle nor the source's new one matches it, and the
# copies' match nothing on the source.
as_leader($src, 'app', qq{SELECT hoplock.hoplock_renew('scheduler', 'host-b:2', '1 h', $sched_gen)});
my $handle_src = $src->safe_psql('app', q{SELECT handle FROM hoplock.hoplock_read('scheduler')});
isnt($handle_src, $handle_dumped, 'the source\'s renewal gave its state a new handle');
foreach my $t (@targets)
{
	my ($node, $db, $where) = @$t;
	my $handle = $node->safe_psql($db, q{SELECT handle FROM hoplock.hoplock_read('scheduler')});
	my ($version) = $handle =~ /^h2:(\d+):\Q$sched_gen\E$/;
	is( defined $version && $node->safe_psql($db, qq{SELECT $version > $src_max}), 't',
		"$where: the renewal's handle ($handle) is above every value of the source's");
	is( $node->safe_psql($db, qq{
			SELECT hoplock.hoplock_write('scheduler', '$handle_dumped', 'host-b:2', '1 h') IS NULL,
			       hoplock.hoplock_write('scheduler', '$handle_src', 'host-b:2', '1 h') IS NULL,
			       hoplock.hoplock_delete('scheduler', '$handle_dumped'),
			       hoplock.hoplock_delete('scheduler', '$handle_src'),
			       (SELECT handle FROM hoplock.hoplock_read('scheduler')) = '$handle'}),
		't|t|f|f|t', "$where: the dumped handle and the source's new one are stale here: no write, no delete");
	is( $src->safe_psql('app', qq{
			SELECT hoplock.hoplock_write('scheduler', '$handle', 'host-b:2', '1 h') IS NULL,
			       hoplock.hoplock_delete('scheduler', '$handle')}),
		't|f', "$where: its handle is stale on the source");
}

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
	# above every value the source had minted when the copy began minting,
	# on a branch begun here after the restore: this cluster and database,
	# its floor above the data and the source's values, not a 'written' mark
	is( $node->safe_psql($db, qq{
			SELECT count(*) || '|' || bool_and(n.g > $src_max) || '|'
			       || bool_and(EXISTS (
			              SELECT FROM hoplock_internal.branch AS b, pg_control_system() AS s, pg_database AS d
			               WHERE d.datname = current_database() AND b.reason <> 'written'
			                 AND b.tag = (n.g & 2047) AND (n.g >> 11) >= b.floor
			                 AND b.floor > ($src_max >> 11)
			                 AND b.system_identifier = s.system_identifier AND b.database = d.oid))
			  FROM unnest(ARRAY[@{[ join(',', map { $_ // 0 } @next{sort keys %max_gen}) ]}]::bigint[]) AS n(g)}),
		'5|true|true', "$where: the next terms are above every value of the source's, on a branch begun here")
	  or diag($node->safe_psql($db, q{SELECT * FROM hoplock_internal.branch ORDER BY floor}));
	my $events = $node->safe_psql($db, "SELECT min(seq), count(*) FROM hoplock.hoplock_events($last_seq)");
	my ($min, $count) = split /\|/, $events;
	cmp_ok($min // 0, '>', $last_seq, "$where: new events are numbered above the source's last ($last_seq)");
	cmp_ok($count, '>=', 6, "$where: hoplock_events($last_seq) returns the events since the restore");
	is( $node->safe_psql($db, "SELECT count(*) FROM hoplock.hoplock_events(0) WHERE seq <= $last_seq"),
		scalar(() = $before{events} =~ /\n/g) + 1,
		"$where: and the source's events are still there below");
}
is($src->safe_psql('app', q{SELECT owner || '/' || generation || '/' || handle FROM hoplock.hoplock_holder('scheduler')}),
	"host-b:2/$sched_gen/$handle_src", 'the source is untouched by the copies');

$_->disconnect foreach values %listener;
$dst->stop;
$src->stop;
done_testing();
