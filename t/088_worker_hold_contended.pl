# A lease the worker finds being changed when it falls due, by a
# transaction left open, costs the worker little however long that lasts:
# it looks again only at what the committed state still has due -- a
# lapsed term later and later (10 ms to 1 s), the end of a hold (min_hold)
# alike once it is over and not before, a running term at its expiry, a
# name ended and announced never (what the change begins, it posts itself
# once committed).  So an ordinary role that leaves such changes open,
# costing itself nothing, does not keep the worker polling each of its
# names every 10 ms.  Measured as the worker's reads of the lease table's
# primary key while the role sits idle: a hold over, a name due before its
# hold is over (renewed with a shorter ttl, then released), a released
# name taken again, a running term renewed again.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use IPC::Run;

my $n = 200;
my $node = PostgreSQL::Test::Cluster->new('hold_contended');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock; CREATE ROLE atk LOGIN');

sub as_atk { return $node->safe_psql('postgres', $_[0], extra_params => [ '-U', 'atk' ]); }

# the worker's index scans of the lease table's primary key, flushed
sub scans
{
	sleep 1.5;    # (the worker flushes its statistics every second at most)
	return $node->safe_psql('postgres', q{SELECT pg_stat_force_next_flush();
		SELECT idx_scan FROM pg_stat_user_indexes WHERE indexrelid = 'hoplock_internal.lease_pkey'::regclass});
}

# an idle transaction of atk, with @sql run in it
sub open_xact
{
	my @sql = @_;
	my ($in, $out) = ('', '');
	my $h = IPC::Run::start([ 'psql', '-XAtq', '-U', 'atk', '-d', $node->connstr('postgres'), '-f', '-' ],
		'<', \$in, '>', \$out, '2>&1');
	$in .= "BEGIN;\n" . join('', map { "$_;\n" } @sql) . "SELECT 'open';\n";
	$h->pump until $out =~ /open/;
	return { h => $h, in => \$in };
}

sub close_xact
{
	my ($x) = @_;
	${ $x->{in} } .= "COMMIT;\n\\q\n";
	$x->{h}->finish;
}

# --- 1. holds over, their names being taken again by an open transaction ----
as_atk(qq{SELECT count(hoplock_acquire('h-' || i, 'o', '1 h', min_hold => '1 s')) FROM generate_series(1, $n) AS i});
as_atk(qq{SELECT count(*) FILTER (WHERE hoplock_release('h-' || i, 'o')) FROM generate_series(1, $n) AS i});
my $x = open_xact(qq{SELECT count(hoplock_acquire('h-' || i, 'o', '1 h')) FROM generate_series(1, $n) AS i});
sleep 2;    # the holds are over
my $s0 = scans();
sleep 5;
my $s1 = scans();
close_xact($x);
my $per_name = ($s1 - $s0) / $n;
cmp_ok($per_name, '<', 50,
	"an open change of a name whose hold is over: the worker looked at each $per_name times in 6.5 s");

# --- 2. a name due before its hold is over, being taken again ---------------
as_atk(qq{SELECT count(hoplock_acquire('e-' || i, 'o', '1 h', min_hold => '1 h')) FROM generate_series(1, $n) AS i});
as_atk(qq{SELECT count(hoplock_renew('e-' || i, 'o', '1 s')) FROM generate_series(1, $n) AS i});
as_atk(qq{SELECT count(*) FILTER (WHERE hoplock_release('e-' || i, 'o')) FROM generate_series(1, $n) AS i});
$x = open_xact(qq{SELECT count(hoplock_acquire('e-' || i, 'o', '1 h')) FROM generate_series(1, $n) AS i});
sleep 2;    # the renewed terms' expiries, long before the holds' ends, have come
$s0 = scans();
sleep 5;
$s1 = scans();
close_xact($x);
$per_name = ($s1 - $s0) / $n;
cmp_ok($per_name, '<', 5,
	"an open change of a name due before its hold is over: the worker looked at each $per_name times in 6.5 s");

# --- 3. a released name, due at its old expiry, taken again -----------------
as_atk(qq{SELECT count(hoplock_acquire('r-' || i, 'o', '2 s')) FROM generate_series(1, $n) AS i});
as_atk(qq{SELECT count(*) FILTER (WHERE hoplock_release('r-' || i, 'o')) FROM generate_series(1, $n) AS i});
$x = open_xact(qq{SELECT count(hoplock_acquire('r-' || i, 'o', '1 h')) FROM generate_series(1, $n) AS i});
sleep 2.5;    # the old expiries have come
$s0 = scans();
sleep 5;
$s1 = scans();
close_xact($x);
$per_name = ($s1 - $s0) / $n;
cmp_ok($per_name, '<', 5,
	"an open new term of a released name: the worker looked at each $per_name times in 6.5 s");

# --- 4. a running term, due at its old expiry, renewed again ----------------
as_atk(qq{SELECT count(hoplock_acquire('t-' || i, 'o', '2 s')) FROM generate_series(1, $n) AS i});
as_atk(qq{SELECT count(hoplock_renew('t-' || i, 'o', '1 h')) FROM generate_series(1, $n) AS i});
$x = open_xact(qq{SELECT count(hoplock_renew('t-' || i, 'o', '1 h')) FROM generate_series(1, $n) AS i});
sleep 2.5;    # the old expiries have come
$s0 = scans();
sleep 5;
$s1 = scans();
close_xact($x);
$per_name = ($s1 - $s0) / $n;
cmp_ok($per_name, '<', 5,
	"an open renewal of a running term: the worker looked at each $per_name times in 6.5 s");

# --- 5. changes rolled back: what the committed state has due is announced --
as_atk(q{SELECT hoplock_acquire('rb', 'o', '2 s')});
as_atk(q{SELECT hoplock_renew('rb', 'o', '4 s')});
as_atk(q{SELECT hoplock_acquire('rbh', 'o', '1 h', min_hold => '3 s')});
as_atk(q{SELECT hoplock_release('rbh', 'o')});
my ($in, $out) = ('', '');
my $h = IPC::Run::start([ 'psql', '-XAtq', '-U', 'atk', '-d', $node->connstr('postgres'), '-f', '-' ],
	'<', \$in, '>', \$out, '2>&1');
$in .= "BEGIN;\nSELECT hoplock_renew('rb', 'o', '1 h') IS NOT NULL, hoplock_acquire('rbh', 'o', '1 h') IS NOT NULL;\n";
$h->pump until $out =~ /t\|t/;
sleep 3.5;    # rb's first expiry and rbh's hold's end have come
$in .= "ROLLBACK;\n\\q\n";
$h->finish;
sleep 2;      # rb lapses 4 s after its renewal
is($node->safe_psql('postgres', q{SELECT string_agg(name || ':' || event, ' ' ORDER BY name)
	FROM hoplock_events(0) WHERE name IN ('rb', 'rbh') AND event IN ('expired', 'freed')}),
	'rb:expired rbh:freed', 'once the changes roll back, the expiry and the hold\'s end are announced');

$node->stop;
done_testing();
