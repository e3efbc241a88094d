# A term's end inserts its row into hoplock_internal.history, checking the
# primary key without raising: a row of that term already there (one 1.1
# wrote as the term began, or a restored dump's) is updated instead.  That
# must go as INSERT ... ON CONFLICT (name, generation) DO UPDATE would go:
# another unique index of the table (a user's own, or the one REINDEX
# CONCURRENTLY builds) that has the same key does not make the end fail;
# a row of the term that another transaction is inserting is waited for,
# as the executor waits for it, and is not an internal error; a conflict
# in another unique index with no row of the term raises as INSERT does;
# and the
# triggers see one update, no insert.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $node = PostgreSQL::Test::Cluster->new('history_end_conflict');
$node->init;
$node->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$node->start;
$node->safe_psql('postgres', 'CREATE EXTENSION hoplock');

sub sql { return $node->safe_psql('postgres', $_[0]); }

# a running term's row as 1.1 wrote it when the term began
sub legacy_row
{
	my ($name) = @_;
	return qq{
		INSERT INTO hoplock_internal.history
		       (name, generation, owner, role, acquired_at, begin_seq)
		SELECT name, generation, owner, owner_role, acquired_at, 7
		  FROM hoplock_internal.lease WHERE name = '$name'};
}

# --- a user's own unique index with the primary key's columns ---------------
sql(q{CREATE UNIQUE INDEX history_mine ON hoplock_internal.history (generation, name)});
sql(q{CREATE TABLE trig_log (op text);
      CREATE FUNCTION public.log_it() RETURNS trigger LANGUAGE plpgsql AS
        $$BEGIN INSERT INTO public.trig_log VALUES (TG_OP); RETURN NULL; END$$;
      CREATE TRIGGER log_it AFTER INSERT OR UPDATE ON hoplock_internal.history
        FOR EACH ROW EXECUTE FUNCTION public.log_it()});

sql(q{SELECT hoplock_acquire('u', 'o1', '1 h')});
sql(legacy_row('u'));
sql(q{DELETE FROM trig_log});
my ($rc, $out, $err) = $node->psql('postgres',
	q{SELECT hoplock_release('u', 'o1')});
is($rc, 0, "a term's end with its 1.1 row and a user's unique index succeeds")
  or diag($err);
is(sql(q{SELECT count(*) || ':' || min(how) || ':' || min(begin_seq)
           FROM hoplock_internal.history WHERE name = 'u'}),
	'1:released:7', 'its row is updated in place, as 1.1 left it');
is(sql(q{SELECT string_agg(op, ',') FROM trig_log}), 'UPDATE',
	'the triggers see one update and no insert');
is(sql(q{SELECT count(*) FROM hoplock_history WHERE name = 'u'}), '1',
	'the term shows once');

# with no row of the term, a user's unique index with the same key is no
# conflict either
sql(q{SELECT hoplock_acquire('v', 'o1', '1 h')});
sql(q{DELETE FROM trig_log});
is(sql(q{SELECT hoplock_release('v', 'o1')}), 't', 'a plain end succeeds');
is(sql(q{SELECT string_agg(op, ',') FROM trig_log}), 'INSERT',
	'the triggers see one insert');

# a row with another generation that a user's unique index on another
# column makes a duplicate: INSERT's error, the term left running
sql(q{CREATE UNIQUE INDEX history_owner ON hoplock_internal.history (owner) WHERE owner = 'dup'});
sql(q{SELECT hoplock_acquire('d', 'dup', '1 h')});
sql(q{INSERT INTO hoplock_internal.history
             (name, generation, owner, role, acquired_at, begin_seq, ended_at, how)
      VALUES ('z', 1, 'dup', current_user, now(), 0, now(), 'released')});
($rc, $out, $err) = $node->psql('postgres', q{SELECT hoplock_release('d', 'dup')});
like($err, qr/duplicate key value violates unique constraint "history_owner"/,
	'a conflict in another unique index raises as INSERT raises it');
is(sql(q{SELECT state FROM hoplock_internal.lease WHERE name = 'd'}), 'h',
	'and the term is left running');
sql(q{DROP INDEX hoplock_internal.history_owner});
sql(q{DROP INDEX hoplock_internal.history_mine});

# --- REINDEX CONCURRENTLY of the primary key, its new index ready ---------
# The reindex waits for an older snapshot with the new index ready for
# inserts (and unique): a term's end with its 1.1 row meets it there.
sql(q{SELECT hoplock_acquire('rc', 'o1', '1 h')});
sql(legacy_row('rc'));
my $old = $node->background_psql('postgres');
$old->query_safe('BEGIN ISOLATION LEVEL REPEATABLE READ');
$old->query_safe('SELECT 1');
my $reindex = $node->background_psql('postgres');
$reindex->query_until(qr/started/, q{
	\echo started
	REINDEX INDEX CONCURRENTLY hoplock_internal.history_pkey;
	\echo reindexed
});
ok( $node->poll_query_until('postgres', q{
		SELECT EXISTS (SELECT FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid
		                WHERE c.relname = 'history_pkey_ccnew' AND i.indisready)}),
	'REINDEX CONCURRENTLY has the new index ready');
($rc, $out, $err) = $node->psql('postgres', q{SELECT hoplock_release('rc', 'o1')});
is($rc, 0, "a term's end with its 1.1 row meanwhile succeeds") or diag($err);
$old->query_safe('COMMIT');
$old->quit;
$reindex->query_until(qr/reindexed/, "\\echo\n");
$reindex->quit;
is(sql(q{SELECT count(*) || ':' || min(how) FROM hoplock_internal.history WHERE name = 'rc'}),
	'1:released', 'its row is ended, once');

# --- a row of the term being inserted by another transaction ----------------
sql(q{SELECT hoplock_acquire('w', 'o1', '1 h')});
my $other = $node->background_psql('postgres');
$other->query_safe('BEGIN');
$other->query_safe(legacy_row('w'));
my $ender = $node->background_psql('postgres', on_error_stop => 0);
$ender->query_until(qr/started/, q{
	\echo started
	SELECT hoplock_release('w', 'o1') AS released \gset
	\echo done :released
});
# the end waits for the other transaction, as INSERT would
ok( $node->poll_query_until('postgres', q{
		SELECT EXISTS (SELECT FROM pg_stat_activity
		                WHERE wait_event_type = 'Lock'
		                  AND query LIKE '%hoplock_release(''w''%')}),
	'the end waits for the transaction inserting a row of its term');
$other->query_safe('ROLLBACK');
$other->quit;
$ender->query_until(qr/done/, "\\echo\n");
$ender->quit;
is(sql(q{SELECT count(*) || ':' || min(how) FROM hoplock_internal.history WHERE name = 'w'}),
	'1:released', 'once it rolled back, the end writes the row');

# the same, the other transaction committing: its row is the term's row,
# updated at the end, as ON CONFLICT DO UPDATE would (and no internal
# error)
sql(q{SELECT hoplock_acquire('x', 'o1', '1 h')});
$other = $node->background_psql('postgres');
$other->query_safe('BEGIN');
$other->query_safe(legacy_row('x'));
my $bg = $node->background_psql('postgres', on_error_stop => 0);
$bg->query_until(qr/started/, q{
	\echo started
	\set VERBOSITY verbose
	SELECT hoplock_release('x', 'o1');
	\echo done
});
ok( $node->poll_query_until('postgres', q{
		SELECT EXISTS (SELECT FROM pg_stat_activity
		                WHERE wait_event_type = 'Lock'
		                  AND query LIKE '%hoplock_release(''x''%')}),
	'the end waits for it');
$other->query_safe('COMMIT');
$other->quit;
$bg->query_until(qr/done/, "\\echo\n");
my $stderr = $bg->{stderr};
$bg->quit;
unlike($stderr, qr/ERROR/, 'its commit makes no error') or diag($stderr);
is(sql(q{SELECT count(*) || ':' || min(how) || ':' || min(begin_seq)
           FROM hoplock_internal.history WHERE name = 'x'}),
	'1:released:7', 'the row it committed is updated at the end');
is(sql(q{SELECT count(*) FROM hoplock_history WHERE name = 'x'}), '1',
	'and the term shows once');

$node->stop;
done_testing();
