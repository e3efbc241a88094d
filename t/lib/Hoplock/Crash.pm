# Hoplock::Crash: crash-restarts in the TAP tests.  After a process is
# killed with SIGKILL the postmaster ends every backend and starts again;
# a psql started meanwhile may fail before it reads its query, and
# IPC::Run, writing the query to it, dies of the broken pipe
# (poll_query_until would too).  So wait for the server to say it is
# ready again, in its log, before asking it anything.
package Hoplock::Crash;

use strict;
use warnings;
use Exporter 'import';

our @EXPORT = qw(kill_and_wait_for_restart);

# SIGKILL $pid, a process of $node's server, and return once the server
# has crashed, restarted and accepts connections again.
sub kill_and_wait_for_restart
{
	my ($node, $pid) = @_;
	my $offset = -s $node->logfile;

	kill 'KILL', $pid or die "could not kill $pid: $!";
	$node->wait_for_log(
		qr/all server processes terminated; reinitializing.*database system is ready to accept connections/s,
		$offset);
	return;
}

1;
