# Where the history of terms is kept: a running term is its lease row, and
# hoplock_history shows it with ended_at NULL; its row in
# hoplock_internal.history is written once, when it ends (never by a
# renewal).  Checked: a term, a slot's term, a term that survives a crash
# (its lease row is WAL-logged with it), a running term's row that 1.1
# wrote as it began (shown once, and updated at its end with what it says
# of the beginning), no history kept (hoplock.history_size = 0: nothing
# written, no running term shown), and the trimming, which counts the
# running terms among the hoplock.history_size kept.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('history_ends');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# table rows of a name, and its rows in the view (ended or not, how)
sub table_rows
{
	return sql("SELECT count(*) FROM hoplock_internal.history WHERE name = '$_[0]'");
}

sub view_rows
{
	return sql("SELECT string_agg(coalesce(how, 'running') || ':' || (ended_at IS NULL)::text, ','
	                             ORDER BY generation)
	            FROM hoplock_history WHERE name = '$_[0]'");
}

# A term: its lease row while it runs, its history row once it ended.
sql(q{SELECT hoplock_acquire('a', 'o1', '1 h')});
is(table_rows('a'), '0', 'a running term has no row in the history table');
is(view_rows('a'), 'running:true', 'hoplock_history shows it running');
is(sql(q{SELECT h.owner = l.owner AND h.role = l.role AND h.acquired_at = l.acquired_at
	             AND h.generation = l.generation AND h.refused_writes = 0
	        FROM hoplock_history AS h JOIN hoplock_leases AS l USING (name)
	       WHERE name = 'a'}),
	't', 'with its owner, role, generation and beginning');
sql(q{SELECT hoplock_renew('a', 'o1', '1 h')});
is(table_rows('a'), '0', 'a renewal writes nothing');
sql(q{SELECT hoplock_release('a', 'o1')});
is(table_rows('a'), '1', 'its end writes its row');
is(view_rows('a'), 'released:false', 'shown once, ended, released');
sql(q{SELECT hoplock_acquire('a', 'o2', '1 h')});
is(view_rows('a'), 'released:false,running:true', 'the next term runs beside it');

# A slot's term: its row keyed name U+001F slot.
sql(q{SELECT hoplock_acquire('s', 'w1', '1 h', slots => 2)});
is(sql(q{SELECT slot || ':' || (ended_at IS NULL) FROM hoplock_history WHERE name = 's'}),
	'1:true', "a slot's running term shows with its slot");
sql(q{SELECT hoplock_release('s', 'w1')});
is(sql(q{SELECT slot || ':' || how FROM hoplock_history WHERE name = 's'}),
	'1:released', 'and its end');

# A crash: the running term is still found, and ends as any other.
sql(q{SELECT hoplock_acquire('c', 'o', '1 h')});
$node->stop('immediate');
$node->start;
is(view_rows('c'), 'running:true', 'a running term is shown after a crash');
sql(q{SELECT hoplock_release('c', 'o')});
is(view_rows('c'), 'released:false', 'and its end recorded');

# A running term's row that 1.1 wrote as it began (an upgrade, a restored
# 1.1 dump): shown once, and updated at the term's end, keeping what it
# says of the beginning.
for my $n ('legacy', 'legacy-lapsed')
{
	sql(qq{SELECT hoplock_acquire('$n', 'o', '1 h');
		INSERT INTO hoplock_internal.history (name, generation, owner, role, acquired_at, begin_seq)
		SELECT name, generation, owner, owner_role, acquired_at - interval '1 s', 77
		  FROM hoplock_internal.lease WHERE name = '$n'});
	is(view_rows($n), 'running:true', "$n: 1.1's row of a running term is shown once");
}
sql(q{SELECT hoplock_release('legacy', 'o')});
is(sql(q{SELECT how || ':' || begin_seq || ':' || (ended_at IS NOT NULL)::text
	        FROM hoplock_internal.history WHERE name = 'legacy'}),
	'released:77:true', "legacy: its end updates 1.1's row");
is(sql(q{SELECT h.acquired_at = l.acquired_at - interval '1 s'
	        FROM hoplock_history AS h
	        JOIN hoplock_internal.lease AS l USING (name, generation)
	       WHERE name = 'legacy'}),
	't', "legacy: the beginning is the row's");
sql(q{UPDATE hoplock_internal.lease SET expires_at = now() - interval '1 s' WHERE name = 'legacy-lapsed';
	SELECT hoplock_acquire('legacy-lapsed', 'p', '1 h')});
is(view_rows('legacy-lapsed'), 'taken over:false,running:true',
	'legacy-lapsed: taken over, recorded in the row 1.1 wrote');
is(table_rows('legacy-lapsed'), '1', 'legacy-lapsed: no second row');

# No history kept: nothing written, no running term shown.
$node->append_conf('postgresql.conf', 'hoplock.history_size = 0');
$node->reload;
$node->poll_query_until('postgres', q{SELECT current_setting('hoplock.history_size') = '0'})
  or die 'hoplock.history_size = 0 not in effect';
sql(q{SELECT hoplock_acquire('z', 'o', '1 h')});
is(view_rows('z'), '', 'history_size = 0: a running term is not shown');
sql(q{SELECT hoplock_release('z', 'o')});
is(table_rows('z'), '0', 'history_size = 0: its end writes nothing');
is(view_rows('a'), 'released:false', 'history_size = 0: the rows kept are shown');

# The trimming keeps the newest hoplock.history_size terms, the running
# ones among them.
$node->append_conf('postgresql.conf', 'hoplock.history_size = 6');
$node->reload;
sql(q{SELECT hoplock_release(name, owner) FROM hoplock_leases WHERE NOT expired});
sql(q{SELECT hoplock_acquire('r' || i, 'o', '1 h') FROM generate_series(1, 3) AS i});
for my $i (1 .. 10)
{
	sql(qq{SELECT hoplock_acquire('e$i', 'o', '1 h'); SELECT hoplock_release('e$i', 'o')});
}
$node->poll_query_until('postgres', q{SELECT count(*) = 6 FROM hoplock_history}, 't')
  or diag(sql(q{SELECT count(*) FROM hoplock_history}));
is(sql(q{SELECT string_agg(name, ',' ORDER BY name) FROM hoplock_history}),
	'e10,e8,e9,r1,r2,r3', 'trimmed to 6 terms: the 3 running and the 3 newest ended');
is(sql(q{SELECT count(*) FROM hoplock_internal.history}), '3',
	'the history table holds the ended ones');

$node->stop;
done_testing();
