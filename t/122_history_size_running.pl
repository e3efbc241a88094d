# hoplock.history_size changed down, to 0 and back up while terms run: the
# trimming counts the running terms (their lease rows, or the rows 1.1
# wrote as they began, not both) among the terms kept and drops the
# oldest ended ones only; with no history kept, no running term is shown
# and an end writes nothing; once it is kept again, the running terms
# show again, each once, and their ends are written.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('history_size_running');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub sql { return $node->safe_psql('postgres', $_[0]); }

sub set_size
{
	$node->append_conf('postgresql.conf', "hoplock.history_size = $_[0]");
	$node->reload;
	$node->poll_query_until('postgres', "SELECT current_setting('hoplock.history_size') = '$_[0]'")
	  or die 'reload';
}

sub ended_rows
{
	return sql(q{SELECT coalesce(string_agg(name, ',' ORDER BY ended_at), '')
	               FROM hoplock_internal.history WHERE ended_at IS NOT NULL});
}

sub shown
{
	return sql(q{SELECT coalesce(string_agg(name || ':' || coalesce(how, 'running'), ','
	                                        ORDER BY name, generation), '')
	               FROM hoplock_history});
}

set_size(5);
sql(qq{SELECT hoplock_acquire('r$_', 'o', '1 h')}) for 1 .. 3;
for my $i (1 .. 4)
{
	sql(qq{SELECT hoplock_acquire('e$i', 'o', '1 h')});
	sql(qq{SELECT hoplock_release('e$i', 'o')});
}
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 2 FROM hoplock_internal.history WHERE ended_at IS NOT NULL}),
	'3 running terms and 4 ended, 5 kept: the 2 oldest ended dropped');
is(ended_rows(), 'e3,e4', 'the newest ended ones stay');
is(shown(), 'e3:released,e4:released,r1:running,r2:running,r3:running',
	'the view shows 5 terms, each once');

# r1's row as 1.1 wrote it: counted once, not with its lease row too
sql(q{INSERT INTO hoplock_internal.history
             (name, generation, owner, role, acquired_at, begin_seq)
      SELECT name, generation, owner, owner_role, acquired_at, 0
        FROM hoplock_internal.lease WHERE name = 'r1'});
sleep(11);	# a round of housekeeping (every 10 s)
is(ended_rows(), 'e3,e4', 'a running term with its 1.1 row is counted once');
is(shown(), 'e3:released,e4:released,r1:running,r2:running,r3:running',
	'and shown once');

# no history kept: no running term shown, an end writes nothing
set_size(0);
is(sql(q{SELECT count(*) FROM hoplock_history WHERE how IS NULL AND name <> 'r1'}), '0',
	'with hoplock.history_size = 0 no running term is shown');
sql(q{SELECT hoplock_release('r2', 'o')});
is(sql(q{SELECT count(*) FROM hoplock_internal.history WHERE name = 'r2'}), '0',
	'and an end writes nothing');

# kept again, fewer: the running terms count, the ended ones go
set_size(2);
ok($node->poll_query_until('postgres', q{
	SELECT count(*) = 0 FROM hoplock_internal.history WHERE ended_at IS NOT NULL}),
	'2 kept with 2 running terms: every ended row dropped');
is(shown(), 'r1:running,r3:running', 'the running terms show again, each once');
sql(qq{SELECT hoplock_release('r$_', 'o')}) for (1, 3);
is(shown(), 'r1:released,r3:released', 'their ends are written, each once');
sleep(11);	# a round of housekeeping (every 10 s)
is(shown(), 'r1:released,r3:released', 'and kept, 2 of 2');

$node->stop;
done_testing();
