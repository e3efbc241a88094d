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
# pg_repack takes the table away only for the moment of its swap: in a
# short load no call need meet it busy (as REINDEX CONCURRENTLY's), so
# that is not asserted here; t/050's VACUUM FULL and CLUSTER do it.
Hoplock::Maintenance::run(name => 'repack', cycle => \@cycle);
done_testing();
