# hoplock_renew_all while another transaction is ending one of the
# keepalive's terms.  A release (or the worker's end of a term whose
# session is gone) changes the term's row, not the keepalive's; the
# renewal changes the keepalive's row, not the term's.  When the end was
# made first and commits first, the renewal must not count the term as
# renewed: its result leaves the term out, and no "renewed" event follows
# the term's "released" (the stream of a name is acquired(g), renewed(g)*,
# then one end).  Found by t/017_torture.pl (a renew_all racing the
# worker's end of a session-bound term after a crash-restart): it
# returned the term as renewed, and hoplock_events(0) held released(g)
# then renewed(g).  hoplock_renew_all now waits, bounded, for a change of
# a term in flight, and reads the term again.
use strict;
use warnings;
use lib 't/lib';
use IPC::Run;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;
use Time::HiRes qw(usleep);

my $node = PostgreSQL::Test::Cluster->new('ra_inflight');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	SELECT hoplock_acquire('t1', 'k', '1 h');
	SELECT hoplock_acquire('t2', 'k', '1 h');
	SELECT count(*) FROM hoplock_renew_all('k', '1 h');
});

sub session
{
	my ($in, $out, $err) = ('', '', '');
	my $h = IPC::Run::start([ 'psql', '-XAtq', '-v', 'ON_ERROR_STOP=1', '-d', $node->connstr('postgres') ],
		'<', \$in, '>', \$out, '2>', \$err);
	return { h => $h, in => \$in, out => \$out, err => \$err };
}

sub run_until
{
	my ($s, $sql, $re) = @_;
	${ $s->{in} } .= $sql;
	my $t0 = time();
	while (${ $s->{out} } !~ $re && time() - $t0 < 30)
	{
		$s->{h}->pump_nb;
		usleep(10_000);
	}
	die "timed out waiting for $re: ${ $s->{out} } ${ $s->{err} }" unless ${ $s->{out} } =~ $re;
}

# The release of t1, in flight; then the renewal, in flight; the release
# commits first, then the renewal.
my $a = session();
my $b = session();
run_until($a, "BEGIN;\nSELECT 'released:' || hoplock_release('t1', 'k');\n", qr/^released:true$/m);
run_until($b, "SET hoplock.notify_renewals = on;\nBEGIN;\n"
	  . "SELECT 'renewed:' || coalesce(string_agg(name, ',' ORDER BY name), '') FROM hoplock_renew_all('k', '1 h');\n",
	qr/^renewed:.*$/m);
my ($renewed) = ${ $b->{out} } =~ /^renewed:(.*)$/m;
run_until($a, "COMMIT;\nSELECT 'a done';\n", qr/^a done$/m);
run_until($b, "COMMIT;\nSELECT 'b done';\n", qr/^b done$/m);
${ $_->{in} } .= "\\q\n" for $a, $b;
$_->{h}->finish for $a, $b;

is($node->safe_psql('postgres', q{SELECT string_agg(name || ':' || state::text, ' ' ORDER BY name) FROM hoplock_internal.lease}),
	't1:r t2:h', 't1 released, t2 running');
my $events = $node->safe_psql('postgres', q{
	SELECT string_agg(event, ' ' ORDER BY seq) FROM hoplock_events(0) WHERE name = 't1'});
{
	is($renewed, 't2', 'hoplock_renew_all left out t1, whose release was in flight');
	unlike($events, qr/released.*renewed/, "t1's events: no renewed after released ($events)");
}

done_testing();
