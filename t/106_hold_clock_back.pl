# min_hold after the server's clock stepped back.  A term released early
# keeps its name from other owners until acquired_at + min_hold, in the
# server's time; a running term lasts longer when the clock steps back
# (t/015_clock.pl), and so should a hold: another owner's acquire is
# refused until the clock reaches hold_until again.
use strict;
use warnings;
use lib 't/lib';
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $libfaketime = '/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1';
plan skip_all => "libfaketime is not installed ($libfaketime)" unless -e $libfaketime;

my $node = PostgreSQL::Test::Cluster->new('hold_clock');
$node->init;
# no expiry worker: libfaketime does not reach it (see t/015_clock.pl)
$node->append_conf('postgresql.conf', qq{
shared_preload_libraries = 'hoplock'
hoplock.databases = 'none_at_all'
});

sub step_clock
{
	my ($offset) = @_;
	local $ENV{LD_PRELOAD} = defined $offset ? $libfaketime : '';
	local $ENV{FAKETIME} = $offset // '';
	local $ENV{FAKETIME_DONT_FAKE_MONOTONIC} = '1';
	$node->stop('fast') if defined $node->{_pid};
	$node->start;
}

# A term with a hold of 60 s, released at once, 30 s ahead of the clock.
step_clock('+30s');
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	SELECT hoplock_acquire('h', 'a', '2 min', min_hold => '60 s');
	SELECT hoplock_release('h', 'a');
});
is($node->safe_psql('postgres', q{SELECT hoplock_acquire('h', 'b', '1 min') IS NULL}),
	't', 'within the hold, another owner is refused');
step_clock(undef);
is($node->safe_psql('postgres', q{SELECT hold_until > clock_timestamp() + interval '60 s' FROM hoplock_leases WHERE name = 'h'}),
	't', 'after the clock stepped 30 s back, the hold lasts 30 s longer by the clock');
is($node->safe_psql('postgres', q{SELECT hoplock_acquire('h', 'b', '1 min') IS NULL}),
	't', 'and another owner is still refused');

done_testing();
