# A term's end that finds a row of its term already in
# hoplock_internal.history (one 1.1 wrote as the term began) updates it,
# as INSERT ... ON CONFLICT DO UPDATE would -- and, like it, sends logical
# replication nothing but that update: the insert it tried is speculative,
# and its abort is not decoded.  A subscriber of the table (a publication
# FOR ALL TABLES, or of the history) gets the row ended, and its apply
# worker does not fail on a duplicate key.
use strict;
use warnings;
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Test::More;

my $pub = PostgreSQL::Test::Cluster->new('publisher');
$pub->init(allows_streaming => 'logical');
$pub->append_conf('postgresql.conf', "shared_preload_libraries = 'hoplock'");
$pub->start;
$pub->safe_psql('postgres', 'CREATE EXTENSION hoplock');

my $sub = PostgreSQL::Test::Cluster->new('subscriber');
$sub->init;
$sub->start;
$sub->safe_psql('postgres', q{
	CREATE SCHEMA hoplock_internal;
	CREATE TABLE hoplock_internal.history (
	    name        text COLLATE "C" NOT NULL,
	    generation  bigint NOT NULL,
	    owner       text COLLATE "C" NOT NULL,
	    role        name NOT NULL,
	    acquired_at timestamptz NOT NULL,
	    begin_seq   bigint NOT NULL,
	    ended_at    timestamptz,
	    end_seq     bigint,
	    how         text,
	    PRIMARY KEY (name, generation))});

# a running term with the row 1.1 wrote as it began, and one without
$pub->safe_psql('postgres', q{
	SELECT hoplock_acquire('old', 'o1', '1 h');
	INSERT INTO hoplock_internal.history
	       (name, generation, owner, role, acquired_at, begin_seq)
	SELECT name, generation, owner, owner_role, acquired_at, 3
	  FROM hoplock_internal.lease WHERE name = 'old';
	SELECT hoplock_acquire('new', 'o1', '1 h');
	CREATE PUBLICATION hist FOR TABLE hoplock_internal.history});
my $connstr = $pub->connstr . ' dbname=postgres';
$sub->safe_psql('postgres', "CREATE SUBSCRIPTION hist CONNECTION '$connstr' PUBLICATION hist");
$sub->wait_for_subscription_sync($pub, 'hist');
is($sub->safe_psql('postgres', q{SELECT count(*) FROM hoplock_internal.history}), '1',
	'the subscriber has the row 1.1 wrote');

$pub->safe_psql('postgres', q{
	SELECT hoplock_release('old', 'o1');
	SELECT hoplock_release('new', 'o1')});
ok( $sub->poll_query_until('postgres', q{
		SELECT count(*) = 2 AND bool_and(how = 'released')
		  FROM hoplock_internal.history}),
	'the subscriber gets both terms ended');
is($sub->safe_psql('postgres', q{SELECT begin_seq FROM hoplock_internal.history WHERE name = 'old'}),
	'3', 'the row 1.1 wrote, updated');
my $log = slurp_file($sub->logfile);
unlike($log, qr/duplicate key value/, 'the apply worker met no duplicate key');

$sub->stop;
$pub->stop;
done_testing();
