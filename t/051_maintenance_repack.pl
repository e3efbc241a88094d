# pg_repack of the lease table and the event log under load, while clients
# acquire, renew, release, wait on, read and forget names (what is judged:
# Hoplock::Maintenance).  Skipped where pg_repack is not installed for the
# server under test (Debian's postgresql-15-repack: Debian's 15 only).
use strict;
use warnings;
use lib 't/lib';
use Test::More;
use Hoplock::Maintenance;

my @cycle = (
	[ 'pg_repack', 'pg_repack' ],
);
my $missing = Hoplock::Maintenance::missing(cycle => \@cycle);
plan skip_all => $missing if $missing;
Hoplock::Maintenance::run(name => 'repack', cycle => \@cycle, locks_out_writes => 1);
done_testing();
