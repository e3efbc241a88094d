# pg_upgrade from an older major version of PostgreSQL with hoplock leases
# to the version running this test (make test-matrix runs it from 13 to 17
# and to 18): the running terms, released names and generations carry over,
# the running term's handle too until it is renewed, after which the old
# handle neither writes nor deletes; the new cluster begins a branch of its
# own (docs/forks-and-events.md), so a name's next term is above its last
# and above every value the old cluster minted, and the event numbers
# continue above the old ones; terms announced as expired before the
# upgrade are not announced again, and the new cluster's expiry worker
# serves the database at once.
#
# HOPLOCK_UPGRADE_FROM names the older installation (a prefix with bin/,
# lib/ and share/, hoplock installed into it, as scripts/pg-build makes
# them); without it the test is skipped.
use strict;
use warnings;
use Cwd ();
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $from = $ENV{HOPLOCK_UPGRADE_FROM};
plan skip_all => 'HOPLOCK_UPGRADE_FROM is not set (make test-matrix sets it)'
  unless defined $from && $from ne '';
BAIL_OUT("HOPLOCK_UPGRADE_FROM=$from has no bin/pg_ctl")
  unless -x "$from/bin/pg_ctl";

# Both with data checksums: PostgreSQL 18's initdb turns them on by default,
# and pg_upgrade wants the two clusters alike.
my $old = PostgreSQL::Test::Cluster->new('old', install_path => $from);
$old->init(extra => ['--data-checksums']);
$old->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$old->start;
my $old_version = $old->safe_psql('postgres', 'SHOW server_version_num');

my $new = PostgreSQL::Test::Cluster->new('new');
$new->init(extra => ['--data-checksums']);
$new->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
my $bindir_new = $new->config_data('--bindir');
note "pg_upgrade from $old_version ($from) to "
  . `$bindir_new/postgres --version`;
cmp_ok(int($old_version / 10000), '<',
	int(PostgreSQL::Test::Utils::slurp_file($new->data_dir . '/PG_VERSION')),
	'the old cluster is of an older major version');

# --- Leases on the old cluster --------------------------------------------
$old->safe_psql('postgres', q{
	CREATE DATABASE app;
});
$old->safe_psql('app', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE leader LOGIN;
	GRANT USAGE ON SCHEMA public TO leader;
});
# 'held': a running term, renewed; 'bumped': three terms; 'released': a
# released name; 'lapsed': a term whose expiry the worker announces before
# the upgrade.
$old->safe_psql('app', q{
	SELECT hoplock_acquire('bumped', 'a', '1 h');
	SELECT hoplock_release('bumped', 'a');
	SELECT hoplock_acquire('bumped', 'b', '1 h');
	SELECT hoplock_release('bumped', 'b');
	SELECT hoplock_acquire('bumped', 'c', '1 h');
	SELECT hoplock_acquire('released', 'a', '1 h');
	SELECT hoplock_release('released', 'a');
	SELECT hoplock_acquire('lapsed', 'a', '200 ms');
}, extra_params => [ '-U', 'leader' ]);
$old->safe_psql('app', q{SELECT hoplock_acquire('held', 'a', '1 h')},
	extra_params => [ '-U', 'leader' ]);
my $held = $old->safe_psql('app',
	q{SELECT generation || '/' || expires_at FROM hoplock_renew('held', 'a', '2 h')},
	extra_params => [ '-U', 'leader' ]);
ok($old->poll_query_until('app',
		q{SELECT count(*) = 1 FROM hoplock_events(0) WHERE name = 'lapsed' AND event = 'expired'}),
	'old cluster: the worker announced the lapsed term');

my %before;
foreach my $name (qw(held bumped released lapsed))
{
	$before{$name} = $old->safe_psql('app',
		qq{SELECT max(generation) FROM hoplock_history WHERE name = '$name'});
}
my $leases_before = $old->safe_psql('app',
	q{SELECT string_agg(name || '/' || coalesce(owner, '-') || '/' || generation || '/' || expires_at, ',' ORDER BY name)
	    FROM hoplock_leases});
my $last_seq = $old->safe_psql('app', q{SELECT max(seq) FROM hoplock_events(0)});
my $history_before = $old->safe_psql('app', q{SELECT count(*) FROM hoplock_history});
my $handle_before = $old->safe_psql('app', q{SELECT handle FROM hoplock_read('held')});
# The greatest value the old cluster minted: generations, row versions,
# event numbers.
my $old_max = $old->safe_psql('app', q{
	SELECT greatest((SELECT max(greatest(generation, version)) FROM hoplock_internal.lease),
	                (SELECT max(greatest(generation, begin_seq, end_seq)) FROM hoplock_internal.history))});
$old->stop;

# --- pg_upgrade -----------------------------------------------------------
{
	# pg_upgrade writes its files in the current directory
	my $dir = PostgreSQL::Test::Utils::tempdir();
	my $cwd = Cwd::getcwd();
	chdir $dir or die "chdir $dir: $!";
	command_ok(
		[
			"$bindir_new/pg_upgrade", '--no-sync',
			'-d', $old->data_dir,
			'-D', $new->data_dir,
			'-b', "$from/bin",
			'-B', $bindir_new,
			'-s', $new->host,
			'-p', $old->port,
			'-P', $new->port
		],
		'pg_upgrade of the old cluster');
	chdir $cwd or die "chdir $cwd: $!";
}
$new->start;

# --- What carried over ----------------------------------------------------
is($new->safe_psql('app',
		q{SELECT string_agg(name || '/' || coalesce(owner, '-') || '/' || generation || '/' || expires_at, ',' ORDER BY name)
		    FROM hoplock_leases}),
	$leases_before, 'the leases are the same after the upgrade');
is($new->safe_psql('app', q{SELECT count(*) FROM hoplock_history}),
	$history_before, 'the history of terms is the same');
is($new->safe_psql('app', q{SELECT handle FROM hoplock_read('held')}),
	$handle_before, 'the running term\'s state has the same handle');
is( $new->safe_psql('app',
		q{SELECT generation || '/' || expires_at FROM hoplock_renew('held', 'a', '2 h', (SELECT generation FROM hoplock_holder('held')))},
		extra_params => [ '-U', 'leader' ]) =~ s{/.*}{}r,
	$held =~ s{/.*}{}r,
	'the running term is renewed by its owner, in the same generation');
is($new->safe_psql('app', q{SELECT hoplock_acquire('held', 'b', '1 h') IS NULL}),
	't', 'and is still held against others');
is( $new->safe_psql('app', qq{
		SELECT hoplock_write('held', '$handle_before', 'a', '1 h') IS NULL,
		       hoplock_delete('held', '$handle_before'),
		       (SELECT handle FROM hoplock_read('held')) <> '$handle_before'}),
	't|f|t', 'after the renewal the handle from before the upgrade neither writes nor deletes');

my %next;
foreach my $name (qw(bumped released lapsed))
{
	my $g = $new->safe_psql('app',
		qq{SELECT hoplock_force_release('$name');
		   SELECT generation FROM hoplock_acquire('$name', 'new', '1 h')});
	$g = (split /\n/, $g)[-1];
	$next{$name} = $g;
	cmp_ok($g, '>', $before{$name},
		"$name: the next term's generation is above its last before the upgrade");
}
# ... above every value the old cluster minted, on a branch begun by the
# new cluster (its system identifier; not the mark of a SQL write), whose
# floor is above the old cluster's values.
is( $new->safe_psql('app', qq{
		SELECT count(*) || '|' || bool_and(n.g > $old_max) || '|'
		       || bool_and(EXISTS (
		              SELECT FROM hoplock_internal.branch AS b, pg_control_system() AS s
		               WHERE b.reason <> 'written' AND b.system_identifier = s.system_identifier
		                 AND b.tag = (n.g & 2047) AND (n.g >> 11) >= b.floor
		                 AND b.floor > ($old_max >> 11)))
		  FROM unnest(ARRAY[@{[ join(',', map { $_ =~ /^\d+$/ ? $_ : 0 } @next{qw(bumped released lapsed)}) ]}]::bigint[]) AS n(g)}),
	'3|true|true', 'the next terms are above every value of the old cluster\'s, on a branch the new cluster began')
  or diag($new->safe_psql('app', q{SELECT * FROM hoplock_internal.branch ORDER BY floor}));

# The worker serves the database at once: a term that lapses now is
# announced; the one announced before the upgrade is not announced again.
ok($new->poll_query_until('app',
		q{SELECT state IN ('sleeping', 'announcing', 'scanning') FROM hoplock_workers WHERE datname = 'app'}),
	'the new cluster\'s worker serves the database');
$new->safe_psql('app', q{SELECT hoplock_acquire('after', 'a', '200 ms')});
ok($new->poll_query_until('app',
		q{SELECT count(*) = 1 FROM hoplock_events(0) WHERE name = 'after' AND event = 'expired'}),
	'a term that lapses after the upgrade is announced by the worker');
is($new->safe_psql('app',
		q{SELECT count(*) FROM hoplock_events(0) WHERE name = 'lapsed' AND event = 'expired'}),
	'1', 'the term that lapsed before the upgrade was announced once');
cmp_ok($new->safe_psql('app', q{SELECT min(seq) FROM hoplock_events(0) WHERE name = 'after'}),
	'>', $last_seq, 'event numbers continue above the old cluster\'s');

$new->stop;
done_testing();
