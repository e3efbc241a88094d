# Rewrites of the lease table under load: VACUUM FULL, and CLUSTER on the
# primary key and on an index a user added, while clients acquire, renew,
# release, wait on, read and forget names (what is judged:
# Hoplock::Maintenance).
use strict;
use warnings;
use lib 't/lib';
use Test::More;
use Hoplock::Maintenance;

my @cycle = (
	[ 'VACUUM FULL', 'VACUUM FULL hoplock_internal.lease' ],
	[ 'CLUSTER', 'CLUSTER hoplock_internal.lease USING lease_pkey' ],
	[ 'CLUSTER', 'CLUSTER hoplock_internal.lease USING lease_expires_at' ],
);
my $missing = Hoplock::Maintenance::missing(cycle => \@cycle);
plan skip_all => $missing if $missing;
Hoplock::Maintenance::run(name => 'rewrite', cycle => \@cycle, locks_out_writes => 1);
done_testing();
