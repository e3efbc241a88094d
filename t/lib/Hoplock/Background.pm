# Hoplock::Background: psql sessions run in the background of a TAP test
# (a call that waits, a transaction held open), and the wait for a lease's
# candidates to show.
package Hoplock::Background;
use strict;
use warnings;
use Exporter 'import';
use IPC::Run;

our @EXPORT = qw(start_psql finish_psql wait_candidates);

# A psql running "sql" on database postgres of $node, in the background
sub start_psql
{
	my ($node, $sql) = @_;
	my $out = '';
	my $h = IPC::Run::start(
		[ 'psql', '-XAtq', '-d', $node->connstr('postgres'), '-c', $sql ],
		'>', \$out, '2>&1');
	return { h => $h, out => \$out };
}

# Wait for it to end; what it printed
sub finish_psql
{
	my ($p) = @_;
	$p->{h}->finish;
	return ${ $p->{out} };
}

# Return once lease $name has $n candidates
sub wait_candidates
{
	my ($node, $name, $n) = @_;
	$node->poll_query_until('postgres',
		"SELECT count(*) = $n FROM hoplock_candidates WHERE name = '$name'")
	  or die "no $n candidates of $name";
	return;
}

1;
