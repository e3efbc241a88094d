# Hoplock::Listener: a LISTENing client for the TAP tests, on DBD::Pg (a
# real libpq client, as applications use), that collects the JSON events
# of channel "hoplock" with the time each arrived.
package Hoplock::Listener;

use strict;
use warnings;
use DBI;
use IO::Select;
use JSON::PP;
use Time::HiRes qw(time);
use Time::Local qw(timegm);

sub new
{
	my ($class, $node, $dbname, $channel) = @_;
	$channel //= 'hoplock';
	my $dsn = sprintf('dbi:Pg:host=%s;port=%d;dbname=%s',
		$node->host, $node->port, $dbname);
	my $dbh = DBI->connect($dsn, '', '',
		{ AutoCommit => 1, RaiseError => 1, PrintError => 0 });
	$dbh->do("LISTEN $channel");
	my $self = { dbh => $dbh, events => [] };
	return bless $self, $class;
}

# Wait up to $timeout seconds, or until $until->(events so far) is true;
# return the events received (each a hash with the payload's keys plus
# "received_at", epoch seconds).
sub collect
{
	my ($self, $timeout, $until) = @_;
	my $deadline = time() + $timeout;
	my $select = IO::Select->new($self->{dbh}->{pg_socket});
	my $json = JSON::PP->new;

	while (1)
	{
		while (my $n = $self->{dbh}->pg_notifies)
		{
			my $event = $json->decode($n->[2]);
			$event->{received_at} = time();
			push @{ $self->{events} }, $event;
		}
		last if $until && $until->($self->{events});
		my $left = $deadline - time();
		last if $left <= 0;
		# pg_notifies reads whatever arrived meanwhile
		$select->can_read($left > 0.5 ? 0.5 : $left);
	}
	return $self->{events};
}

# Forget what was collected.
sub reset
{
	my ($self) = @_;
	$self->{events} = [];
}

sub disconnect
{
	my ($self) = @_;
	$self->{dbh}->disconnect;
}

# "2026-12-02T10:34:05.474241+00:00" -> epoch seconds
sub epoch
{
	my ($ts) = @_;
	my ($y, $mo, $d, $h, $mi, $s, $frac) =
	  $ts =~ /^(\d+)-(\d+)-(\d+)T(\d+):(\d+):(\d+)(\.\d+)?\+00:00$/
	  or die "unexpected timestamp $ts";
	return timegm($s, $mi, $h, $d, $mo - 1, $y) + ($frac // 0);
}

# The $p-th percentile (0..100) of a list of numbers.
sub percentile
{
	my ($p, @values) = @_;
	my @sorted = sort { $a <=> $b } @values;
	return undef unless @sorted;
	my $i = int(($p / 100) * $#sorted + 0.5);
	return $sorted[$i];
}

1;
