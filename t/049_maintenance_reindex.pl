# Maintenance of the lease table's indexes under load: REINDEX INDEX CONCURRENTLY
# of the primary key and of an index a user added, with ANALYZE and VACUUM
# between, while clients acquire, renew, release, wait on, read and forget
# names (what is judged: Hoplock::Maintenance).
use strict;
use warnings;
use lib 't/lib';
use Test::More;
use Hoplock::Maintenance;

my @cycle = (
	[ 'REINDEX INDEX CONCURRENTLY lease_pkey',
		'REINDEX INDEX CONCURRENTLY hoplock_internal.lease_pkey' ],
	[ 'ANALYZE', 'ANALYZE hoplock_internal.lease' ],
	[ 'REINDEX INDEX CONCURRENTLY lease_expires_at',
		'REINDEX INDEX CONCURRENTLY hoplock_internal.lease_expires_at' ],
	[ 'VACUUM', 'VACUUM hoplock_internal.lease' ],
);
my $missing = Hoplock::Maintenance::missing(cycle => \@cycle);
plan skip_all => $missing if $missing;
Hoplock::Maintenance::run(name => 'reindex', cycle => \@cycle);
done_testing();
