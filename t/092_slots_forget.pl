# A name's slots bind only while the name is in use.  Once any role gave a
# name slots => N, every caller must give N while a slot's term runs (or
# its hold keeps it); once every slot is free the name is a released name
# like any other: the next acquire may give it another number of slots
# (or none), hoplock_forget forgets it, and so does the worker after
# hoplock.released_retention -- the row recording N and every slot's row
# together.  Generations stay above every earlier one of the name across
# all of it, and across a restart.  (Without this, a role that may
# acquire could take a name of another role's application for good with
# a term of a millisecond.)
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('slots_forget');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', q{
	CREATE EXTENSION hoplock;
	CREATE ROLE app LOGIN;
	CREATE ROLE squatter LOGIN;});

# the rows of a name: its own and its slots'
sub rows
{
	my ($name) = @_;
	return $node->safe_psql('postgres', qq{
		SELECT count(*) FROM hoplock_internal.lease
		 WHERE split_part(name, E'\\x1f', 1) = '$name'});
}

# the greatest generation the name ever had, as the history has it
sub greatest
{
	my ($name) = @_;
	return $node->safe_psql('postgres',
		qq{SELECT max(generation) FROM hoplock_history WHERE name = '$name'});
}

sub squat
{
	my ($name) = @_;
	is($node->safe_psql('postgres', qq{
		SET ROLE squatter;
		SELECT owner FROM hoplock_acquire('$name', 'x', '1 ms', slots => 2);}),
		'x', "another role gives the released name \"$name\" slots");
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = 0 FROM hoplock_history
		 WHERE name = '$name' AND ended_at IS NULL})
	  or die 'the slot term did not end';
	# the worker announced its expiry
	$node->poll_query_until('postgres', qq{
		SELECT count(*) = 0 FROM hoplock_internal.lease
		 WHERE split_part(name, E'\\x1f', 1) = '$name' AND state = 'h'})
	  or die 'the expiry was not announced';
}

# -- the application's name, squatted on, comes back at its next acquire
$node->safe_psql('postgres', q{
	SET ROLE app;
	SELECT hoplock_acquire('jobs', 'leader', '1 h');
	SELECT hoplock_release('jobs', 'leader');});
squat('jobs');
my $before = greatest('jobs');
my ($ret, $out, $err) = $node->psql('postgres', q{
	SET ROLE app;
	SELECT owner, generation FROM hoplock_acquire('jobs', 'leader', '1 h');});
like($out, qr/^leader\|\d+$/, 'the application has its name back at once');
is($err, '', '... with no error');
my ($owner, $gen) = split /\|/, $out;
cmp_ok($gen, '>', $before, '... at a generation above the slots\' terms');
is(rows('jobs'), 1, 'the slots\' rows went with the old number');

# -- while a slot term runs, the number binds: 22023, and no forget
$node->safe_psql('postgres', q{
	SET ROLE app;
	SELECT hoplock_release('jobs', 'leader');
	SELECT hoplock_acquire('jobs', 'w1', '1 h', slots => 3);});
($ret, $out, $err) = $node->psql('postgres',
	q{SELECT hoplock_acquire('jobs', 'y', '1 h')});
like($err, qr/lease "jobs" has 3 slots, not 1/, 'a running slot term binds N');
($ret, $out, $err) = $node->psql('postgres',
	q{SELECT hoplock_acquire('jobs', 'y', '1 h', slots => 2)});
like($err, qr/lease "jobs" has 3 slots, not 2/, '... for every other N');
is($node->safe_psql('postgres', q{SELECT hoplock_forget('jobs')}), 'f',
	'a name with a running slot term is not forgotten');

# ... nor while a released slot's hold (min_hold) keeps it
$node->safe_psql('postgres', q{
	SET ROLE app;
	SELECT hoplock_release('jobs', 'w1');
	SELECT hoplock_acquire('jobs', 'w2', '1 h', slots => 3, min_hold => '1 h');
	SELECT hoplock_release('jobs', 'w2');});
($ret, $out, $err) = $node->psql('postgres',
	q{SELECT hoplock_acquire('jobs', 'y', '1 h')});
like($err, qr/lease "jobs" has 3 slots, not 1/, 'a slot\'s hold binds N');
is($node->safe_psql('postgres', q{SELECT hoplock_forget('jobs')}), 'f',
	'a name kept by a slot\'s hold is not forgotten');
$node->safe_psql('postgres', q{SELECT hoplock_force_release('jobs')});
$node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM hoplock_internal.lease
	 WHERE split_part(name, E'\x1f', 1) = 'jobs' AND hold_until IS NOT NULL})
  or die 'the hold\'s end was not announced';

# -- all free: another N is taken at once, above every generation
$before = greatest('jobs');
is($node->safe_psql('postgres', q{
	SET ROLE app;
	SELECT generation > } . $before . q{ FROM hoplock_acquire('jobs', 'w1', '1 h', slots => 2);}),
	't', 'all slots free: another N is taken, above every generation');
$node->safe_psql('postgres', q{SELECT hoplock_release('jobs', 'w1')});

# -- all free: hoplock_forget forgets the name, every row of it, for a
# superuser even when another role gave it its slots
squat('jobs2');
$before = greatest('jobs2');
cmp_ok(rows('jobs2'), '>=', 2, 'the name has its row and a slot\'s');
is($node->safe_psql('postgres', q{SELECT hoplock_forget('jobs2')}), 't',
	'the name, all its slots free, is forgotten');
is(rows('jobs2'), 0, '... the row recording N and the slots\' rows');
is($node->safe_psql('postgres', q{SELECT hoplock_forget('jobs2')}), 'f',
	'... once');
is($node->safe_psql('postgres', qq{
	SET ROLE app;
	SELECT generation > $before FROM hoplock_acquire('jobs2', 'leader', '1 h');}),
	't', 'the application takes the forgotten name above its generations');

# -- a restart in between: the rows say it all
squat('jobs3');
$before = greatest('jobs3');
$node->restart;
is($node->safe_psql('postgres', qq{
	SET ROLE app;
	SELECT generation > $before FROM hoplock_acquire('jobs3', 'leader', '1 h');}),
	't', 'after a restart, the free name is taken without slots');
$node->safe_psql('postgres', q{
	SET ROLE app; SELECT hoplock_release('jobs3', 'leader');});
squat('jobs4');
$node->restart;
is($node->safe_psql('postgres', q{SELECT hoplock_forget('jobs4')}), 't',
	'after a restart, the free name is forgotten');

# -- the worker's retention forgets it too, rows together; not one in use
squat('jobs5');
$before = greatest('jobs5');
$node->safe_psql('postgres', q{
	SELECT hoplock_acquire('busy5', 'a', '1 h', slots => 2);
	SELECT hoplock_acquire('busy5', 'b', '1 ms', slots => 2);});
$node->append_conf('postgresql.conf', 'hoplock.released_retention = 1');
$node->reload;
ok( $node->poll_query_until('postgres', q{
		SELECT count(*) = 0 FROM hoplock_internal.lease
		 WHERE split_part(name, E'\x1f', 1) = 'jobs5'}),
	'the worker forgets a free name with slots, every row of it');
sleep 2;
$node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM hoplock_internal.lease
	 WHERE split_part(name, E'\x1f', 1) = 'jobs5'});
is(rows('busy5'), 3, '... and leaves one whose slot term runs, every row of it');
is($node->safe_psql('postgres', qq{
	SELECT generation > $before FROM hoplock_acquire('jobs5', 'leader', '1 h');}),
	't', 'the name comes back above its forgotten generations');

$node->stop;
done_testing();
