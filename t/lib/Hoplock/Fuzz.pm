# Hoplock::Fuzz: the fuzz run of t/018_fuzz.pl.  It sets up a server with
# databases in four encodings and the roles that call, opens the
# connections, and makes the calls Hoplock::Fuzz::Generator draws -- in
# autocommit, in transaction blocks, through the trigger -- comparing
# hoplock's tables around failing ones; each outcome goes to
# Hoplock::Fuzz::Judge, whose problems are tallied.  Two shards, each a
# process of its own on databases of its own, share the calls.
#
#   my $run = Hoplock::Fuzz->new(seed => ..., calls => ..., seconds => ...);
#   $run->run;      # then $run->{calls}, {by_fn}, {count}, {checks},
#                   # {tally}, {dead}, {client_warnings}, ...
package Hoplock::Fuzz;

use strict;
use warnings;
use DBI;
use JSON::PP;
use POSIX ();
use Time::HiRes qw(time);
use PostgreSQL::Test::Cluster;
use PostgreSQL::Test::Utils;
use Hoplock::Fuzz::Generator qw(pick chance gen_args pick_function pick_db make_pool
  trigger_setup trigger_statement %TYPE_OF $N_TABLES);
use Hoplock::Fuzz::Judge;

# Databases: encoding, share of the calls, and the connections to them:
# role (su: the superuser) and client encoding.
my @DBS = (
	{
		db => 'fz_utf8', enc => 'UTF8', weight => 40,
		conns => [
			[ su => 'UTF8' ], [ fuzz_user => 'UTF8' ], [ fuzz_other => 'UTF8' ],
			[ fuzz_lim => 'UTF8' ], [ su => 'LATIN1' ], [ fuzz_user => 'SQL_ASCII' ]
		]
	},
	{
		db => 'fz_latin1', enc => 'LATIN1', weight => 22,
		conns => [ [ su => 'LATIN1' ], [ fuzz_user => 'LATIN1' ], [ fuzz_other => 'UTF8' ] ]
	},
	{
		db => 'fz_ascii', enc => 'SQL_ASCII', weight => 22,
		conns => [ [ su => 'SQL_ASCII' ], [ fuzz_user => 'SQL_ASCII' ], [ fuzz_other => 'UTF8' ] ]
	},
	{
		db => 'fz_win1252', enc => 'WIN1252', weight => 10,
		conns => [ [ su => 'WIN1252' ], [ fuzz_user => 'WIN1252' ] ]
	},
);

# The run's state (each shard, a process of its own, has its copy)
my ($node, $bootstrap_su, $server_version, $library, $library_mtime);
my (@CONNS, $LOST_CONNECTION, @client_warnings, @perl_warnings);
my %count;        # "$fn $class $state" => n
my %by_fn;        # $fn => calls
my $calls = 0;
my $tally = Hoplock::Fuzz::Judge::new_tally();
my %checks = (
	autocommit => 0, in_transaction => 0, same_snapshot => 0, whole_table => 0, announced_meanwhile => 0,
	arguments_bad => 0, arguments_good => 0, arguments_undecided => 0);
my $prepared_seq = 0;

# --- The server -----------------------------------------------------------------
# A server that preloads hoplock, the roles, and the databases of @DBS
# with hoplock, the digest function and the tables fz_w1.. and views fz_v1..
sub setup
{
	$node = PostgreSQL::Test::Cluster->new('fuzz');
	$node->init;
	$node->append_conf('postgresql.conf', q{
	shared_preload_libraries = 'hoplock'
	max_prepared_transactions = 10
	max_worker_processes = 16
	log_statement = none
	log_line_prefix = '%m [%p] %b '
	log_min_messages = warning
	log_min_error_statement = panic
	# the worker changes nothing but announcements of expiries meanwhile
	hoplock.history_size = 100000000
	hoplock.released_retention = 0
	});
	$node->start;


	$node->safe_psql('postgres', q{
		CREATE ROLE fuzz_user LOGIN;
		CREATE ROLE fuzz_other LOGIN;
		CREATE ROLE fuzz_lim LOGIN;
		-- each role's own session: ERRORs stay out of the log, WARNINGs do not
		ALTER ROLE fuzz_user SET log_min_messages = log;
		ALTER ROLE fuzz_other SET log_min_messages = log;
		ALTER ROLE fuzz_lim SET log_min_messages = log;
		-- a superuser may limit a role's names
		ALTER ROLE fuzz_lim SET hoplock.max_names_per_role = 3;
	});
	foreach my $d (@DBS)
	{
		$node->safe_psql('postgres',
			"CREATE DATABASE $d->{db} ENCODING '$d->{enc}' LOCALE 'C' TEMPLATE template0");
		my $setup = q{
			CREATE EXTENSION hoplock;
			-- hoplock's tables, for the comparisons around failing calls: one
			-- name's row and its last terms and the floor, or the whole tables;
			-- the counters; the expiries announced; and the rows again, blind
			-- to announcements of expiries
			CREATE FUNCTION fz_digest(n text, whole boolean) RETURNS text[]
			LANGUAGE plpgsql SECURITY DEFINER SET search_path = pg_catalog, pg_temp AS $$
			BEGIN
				RETURN (
				-- (with the expiry of the keepalive a running term is attached to)
				WITH l AS (SELECT l.*, k.renewed_at AS k_renewed_at, k.expires_at AS k_expires_at
				             FROM hoplock_internal.lease AS l
				                  LEFT JOIN hoplock_internal.keepalive AS k
				                         ON l.state = 'h' AND k.id = l.keepalive
				            WHERE whole OR l.name = n),
				     -- the name's last terms, or all
				     h AS (SELECT * FROM hoplock_internal.history AS h WHERE whole
				           UNION ALL
				           (SELECT * FROM hoplock_internal.history AS h WHERE NOT whole AND h.name = n
				             ORDER BY h.generation DESC LIMIT 8)),
				     -- the same, less the rows the worker writes when it
				     -- announces an expiry (a term's row is written as it ends)
				     hb AS (SELECT * FROM hoplock_internal.history AS h
				             WHERE whole AND h.how IS DISTINCT FROM 'expired'
				            UNION ALL
				            (SELECT * FROM hoplock_internal.history AS h
				              WHERE NOT whole AND h.name = n AND h.how IS DISTINCT FROM 'expired'
				              ORDER BY h.generation DESC LIMIT 8)),
				     s AS (SELECT * FROM public.hoplock_stats AS s
				            WHERE s.datid = (SELECT oid FROM pg_database WHERE datname = current_database()))
				SELECT ARRAY[
					md5(coalesce((SELECT string_agg(l::text, ',' ORDER BY l.name) FROM l), '') || '#' ||
					    coalesce((SELECT string_agg(h::text, ',' ORDER BY h.name, h.generation) FROM h), '')),
					concat_ws('/', CASE WHEN whole THEN (SELECT count(*) FROM l) END,
					               CASE WHEN whole THEN (SELECT count(*) FROM hb) END,
					               (SELECT string_agg(f::text, ',') FROM hoplock_internal.floor AS f),
					               -- the branches: a failing call begins none
					               (SELECT count(*) || ':' || max(floor) FROM hoplock_internal.branch)),
					(SELECT concat_ws('/', terms_begun, contended, renewals, releases, force_releases, waits, wakeups) FROM s),
					(SELECT expiries::text FROM s),
					-- the rows again, blind to what the worker's announcement of
					-- an expiry changes: the state 'x' (and the session and
					-- the keepalive it clears: a term's times are its
					-- keepalive's until then), and the term's row in the
					-- history (hb: an ended term's, or a 1.1 row's end)
					md5(coalesce((SELECT string_agg(row(l.name, CASE WHEN l.state = 'x' THEN 'h' ELSE l.state END,
					                                    l.owner, l.owner_role, l.generation, l.acquired_at,
					                                    GREATEST(l.renewed_at, l.k_renewed_at),
					                                    COALESCE(l.k_expires_at, l.expires_at), l.owner_roleid)::text,
					                                ',' ORDER BY l.name) FROM l), '') || '#' ||
					    coalesce((SELECT string_agg(row(h.name, h.generation, h.owner, h.role, h.acquired_at, h.begin_seq,
					                                    CASE WHEN h.how = 'expired' THEN NULL ELSE h.ended_at END,
					                                    CASE WHEN h.how = 'expired' THEN NULL ELSE h.end_seq END,
					                                    nullif(h.how, 'expired'))::text,
					                                ',' ORDER BY h.name, h.generation) FROM hb AS h), ''))]);
			END
			$$;
		};
		for my $k (1 .. $N_TABLES)
		{
			$setup .= qq{
			CREATE TABLE fz_w$k (id bigserial PRIMARY KEY, g8 bigint, g4 integer, g2 smallint,
			                     gn numeric, gt text, payload text);
			CREATE VIEW fz_v$k AS SELECT * FROM fz_w$k;
			};
		}
		$setup .= q{
			GRANT ALL ON ALL TABLES IN SCHEMA public TO PUBLIC;
			GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO PUBLIC;
		};
		# one ordinary role may force-release, forget and reset the counters
		$setup .= q{
			GRANT EXECUTE ON FUNCTION hoplock_force_release(text), hoplock_forget(text),
			      hoplock_stats_reset(), hoplock_request_step_down(text, text) TO fuzz_other;
		} if $d->{db} eq 'fz_utf8';
		$node->safe_psql($d->{db}, $setup);
	}
	$node->poll_query_until('fz_utf8',
		'SELECT count(*) = ' . scalar(@DBS) . q{ FROM hoplock_workers WHERE datname LIKE 'fz\_%' AND state = 'sleeping'})
	  or die 'no worker for every database';
	$bootstrap_su = $node->safe_psql('postgres', 'SELECT current_user');
	$server_version = $node->safe_psql('postgres', 'SHOW server_version_num');

	# A library replaced under a running server (make install writes the file
	# in place) crashes it: if the run crashes, say whether that happened.
	$library = $node->safe_psql('postgres', q{SELECT setting FROM pg_config WHERE name = 'PKGLIBDIR'}) . '/hoplock.so';
	$library_mtime = (stat $library)[9] // 0;
}
# --- Running statements ---------------------------------------------------------
sub problem
{
	my ($kind, $text) = @_;
	Hoplock::Fuzz::Judge::add_problem($tally, $kind, $text);
}

sub problems { problem(@$_) for @_; }

sub sth
{
	my ($c, $sql) = @_;
	return $c->{sth}{$sql} //= $c->{dbh}->prepare($sql);
}

# Run a statement: (state, rows, message); state '' when it succeeded.
sub run_sql
{
	my ($c, $sql, @args) = @_;
	my $sth = sth($c, $sql);
	my $ok = $sth->execute(@args);
	if (!defined $ok)
	{
		my $state = $c->{dbh}->state // '';
		$state = 'XXXXX' if $state eq '' || $state eq 'S1000';
		my $msg = $c->{dbh}->errstr // '';
		if (Hoplock::Fuzz::Judge::lost($state, $msg))
		{
			$LOST_CONNECTION //= { conn => $c, sql => $sql, args => [@args], state => $state, msg => $msg };
		}
		return ($state, [], $msg);
	}
	my $rows = $sth->{NUM_OF_FIELDS} ? $sth->fetchall_arrayref : [];
	return ('', $rows, '');
}

sub run_ok
{
	my ($c, $sql, @args) = @_;
	my ($state, $rows, $msg) = run_sql($c, $sql, @args);
	die "$c->{d}{db} as $c->{user}: $sql: $state $msg" if $state ne '';
	return $rows;
}

sub read_settings
{
	my ($c) = @_;
	my $rows = run_ok($c, q{SELECT (SELECT setting FROM pg_settings WHERE name = 'hoplock.max_ttl'),
	                               current_setting('transaction_read_only'),
	                               current_setting('hoplock.max_names_per_role'),
	                               current_setting('hoplock.notify_renewals'),
	                               current_setting('hoplock.log_events'),
	                               (SELECT rolsuper FROM pg_roles WHERE rolname = current_user)});
	my ($max, $ro, $lim, $notify, $log, $super) = @{ $rows->[0] };
	$c->{settings} = {
		max_ttl => $max, read_only => $ro, max_names_per_role => $lim,
		notify_renewals => $notify, log_events => $log };
	$c->{su} = $super ? 1 : 0;
}


# --- Literals and what the server makes of them ----------------------------------
# Per connection and type: the SQLSTATE of casting the literal alone ('' if
# it is taken), and, for text, the name as the server has it in UTF-8 (or
# why there is none), and for intervals the microseconds hoplock reads.
my $INTERVAL_US = q{greatest(least(extract(day FROM ?::interval) * 86400000000
	+ (extract(epoch FROM ?::interval) - (extract(year FROM ?::interval) * 12 + extract(month FROM ?::interval)) * 2592000
	   - extract(day FROM ?::interval) * 86400) * 1000000, 9223372036854775807), -9223372036854775808)};
# type => [columns, expression of the literal "?"]
my %CAST = (
	text     => [ 2, q{octet_length(?::text), encode(convert_to(?::text, 'UTF8'), 'hex')} ],
	interval => [ 2, q{extract(year FROM ?::interval) * 12 + extract(month FROM ?::interval), } . $INTERVAL_US ],
	bigint   => [ 1, '?::bigint' ],
	boolean  => [ 1, '?::boolean' ],
	integer  => [ 1, '?::integer' ],
	smallint => [ 1, '?::smallint' ],
	numeric  => [ 1, '?::numeric' ],
);

sub cast_sql
{
	my (@types) = @_;
	my $i = 0;
	return 'SELECT ' . join(', ', map { $i++; $CAST{$_}[1] =~ s/\?/\$$i/gr } @types);
}

sub literal_info
{
	my ($type, $vals) = @_;
	my $info = { state => '' };
	if ($type eq 'text')
	{
		$info->{bytes} = $vals->[0];
		$info->{utf8} = pack('H*', $vals->[1]);
	}
	elsif ($type eq 'interval')
	{
		$info->{months} = $vals->[0];
		($info->{usecs} = $vals->[1]) =~ s/\.0*$//;
	}
	elsif ($type eq 'bigint' || $type eq 'integer')
	{
		$info->{value} = $vals->[0];
	}
	return $info;
}

sub literal
{
	my ($c, $type, $v) = @_;
	return { state => '', null => 1 } unless defined $v;
	my $key = "$type\0$v";
	my $cache = $c->{parse};
	return $cache->{$key} if exists $cache->{$key};
	%$cache = () if keys %$cache > 40_000;
	my ($state, $rows) = run_sql($c, cast_sql($type), $v);
	my $info;
	if ($state eq '')
	{
		$info = literal_info($type, $rows->[0]);
	}
	elsif ($type eq 'text')
	{
		# the literal, or its conversion to UTF-8?
		my ($s1, $r1) = run_sql($c, 'SELECT octet_length($1::text)', $v);
		$info = { state => $s1 };
		if ($s1 eq '')
		{
			$info->{bytes} = $r1->[0][0];
			$info->{utf8_error} = $state;
		}
	}
	else
	{
		$info = { state => $state };
	}
	$cache->{$key} = $info;
	return $info;
}

# Several literals at once, in one statement, if they are all taken in
# (the common case); else each on its own, as they are needed.
sub literals
{
	my ($c, $types, $values) = @_;
	my (@types, @values, %seen);
	for my $i (0 .. $#$types)
	{
		my ($t, $v) = ($types->[$i], $values->[$i]);
		next unless defined $v;
		next if exists $c->{parse}{"$t\0$v"} || $seen{"$t\0$v"}++;
		push @types, $t;
		push @values, $v;
	}
	if (@types > 1)
	{
		my ($state, $rows) = run_sql($c, cast_sql(@types), @values);
		if ($state eq '')
		{
			my $col = 0;
			for my $i (0 .. $#types)
			{
				my $n = $CAST{ $types[$i] }[0];
				$c->{parse}{"$types[$i]\0$values[$i]"} =
				  literal_info($types[$i], [ @{ $rows->[0] }[ $col .. $col + $n - 1 ] ]);
				$col += $n;
			}
			return;
		}
	}
	literal($c, $types[$_], $values[$_]) for 0 .. $#types;
}

# Is this UTF-8 as PostgreSQL judges it (pg_utf8_islegal)?  Returns the code

sub remember_lease
{
	my ($c, $row) = @_;
	my ($name, $owner, $gen, $handle) = @$row;
	return unless defined $gen;
	$c->{d}{cache}{$name} = { gen => $gen, handle => $handle, owner => $owner };
}

# --- One call ---------------------------------------------------------------------------
# Judge a call's outcome against its arguments (Hoplock::Fuzz::Judge::call),
# tally its problems, learn the leases and event numbers it returned;
# returns the outcome's class.
sub judge_call
{
	my ($c, $f, $args, $state, $rows, $msg, $context) = @_;
	my $kinds = $f->[2];
	my $v = Hoplock::Fuzz::Judge::call({
		c => $c, f => $f, args => $args, state => $state, rows => $rows, msg => $msg,
		context => $context, server_version => $server_version,
		lits => sub { literal($c, $TYPE_OF{ $kinds->[ $_[0] ] }, $args->[ $_[0] ]) } });
	problems(@{ $v->{problems} });
	$checks{"arguments_$v->{arguments}"}++ if $v->{arguments};
	if ($state eq '' && $f->[3] eq 'lease' && @$rows && defined $rows->[0][2])
	{
		remember_lease($c, $rows->[0]);
	}
	if ($state eq '' && $f->[3] eq 'events' && @$rows && defined $rows->[0][1])
	{
		$c->{d}{last_seq} = $rows->[0][1] if $rows->[0][1] > ($c->{d}{last_seq} // 0);
	}
	return $v->{class};
}

# Compare two digests around a failing call.  $strict: the same snapshot.
sub compare_digests
{
	my ($c, $before, $after, $fn, $state, $sql, $args, $context, $strict, $counters_too) = @_;
	my $what = Hoplock::Fuzz::Judge::digests($before, $after, $strict, $counters_too);
	return unless $what;
	if (!ref $what)
	{
		# what changed is what the worker changes when it announces an
		# expiry, which it may have done meanwhile
		$checks{announced_meanwhile}++;
		return;
	}
	problems(Hoplock::Fuzz::Judge::changed($what, $c, $fn, $state, $sql, $args, $context));
}

sub run_digest
{
	my ($c, $name, $whole) = @_;
	my ($state, $rows) = run_sql($c, 'SELECT fz_digest($1::text, $2::boolean)', $name, $whole ? 'true' : 'false');
	return undef if $state ne '';
	my $a = $rows->[0][0];
	# DBD::Pg gives arrays as array references
	return $a if ref $a eq 'ARRAY';
	return undef;
}

sub name_arg
{
	my ($c, $f, $args) = @_;
	my $kinds = $f->[2];
	for my $i (0 .. $#$kinds)
	{
		next unless $kinds->[$i] eq 'name';
		my $v = $args->[$i];
		return undef unless defined $v && literal($c, 'text', $v)->{state} eq '';
		return $v;
	}
	return undef;
}

# A call in autocommit, compared around when it fails (now and then)
sub autocommit_call
{
	my ($c, $f, $name_given) = @_;
	my $args = gen_args($c, $f);
	if (defined $name_given)
	{
		$args->[$_] = $name_given for grep { $f->[2][$_] eq 'name' } 0 .. $#{ $f->[2] };
	}
	# the literals first, so that casting them is not in the comparison
	literals($c, [ map { $TYPE_OF{$_} } @{ $f->[2] } ], $args);
	my $check = chance(0.2);
	my $whole = $check && chance(0.01);
	my $name = name_arg($c, $f, $args);
	my $before = $check ? run_digest($c, $name, $whole) : undef;
	my ($state, $rows, $msg) = run_sql($c, $f->[1], @$args);
	$calls++;
	$by_fn{ $f->[0] }++;
	my $class = judge_call($c, $f, $args, $state, $rows, $msg, 'autocommit');
	$count{"$f->[0] " . ($state eq '' ? 'ok' : "$class $state")}++;
	if ($state ne '' && $before && !$LOST_CONNECTION)
	{
		my $after = run_digest($c, $name, $whole);
		$checks{autocommit}++;
		$checks{whole_table}++ if $whole;
		compare_digests($c, $before, $after, $f->[0], $state, $f->[1], $args, 'autocommit', 0,
			$class eq 'argument' || $state =~ /^(22004|22023|42501|25006)$/);
	}
}

# A transaction block: a few calls, each in a savepoint (mostly), compared
# around each that fails; then COMMIT, ROLLBACK or PREPARE TRANSACTION.
sub transaction_block
{
	my ($c) = @_;
	my $iso = pick('READ COMMITTED', 'REPEATABLE READ', 'SERIALIZABLE');
	my $ro = chance(0.1) ? ' READ ONLY' : '';
	my @plan;
	for (1 .. 1 + int(rand(5)))
	{
		my $f = pick_function($c, 1);
		my $args = gen_args($c, $f);
		literals($c, [ map { $TYPE_OF{$_} } @{ $f->[2] } ], $args);
		push @plan, [ $f, $args ];
	}
	my $context = "in BEGIN ISOLATION LEVEL $iso$ro";
	my ($bs) = run_sql($c, "BEGIN ISOLATION LEVEL $iso$ro");
	return if $bs ne '';
	my $snapshot = $iso ne 'READ COMMITTED';
	my $aborted = 0;
	my $touched = 0;        # this transaction changed or fenced a lease
	my $interfered = 0;     # another session changed one since the snapshot
	for my $p (@plan)
	{
		my ($f, $args) = @$p;
		# another session of the database changes something after this
		# transaction's snapshot, now and then
		if ($p != $plan[0] && chance(0.3))
		{
			my @others = grep { $_ != $c } @{ $c->{d}{conns_list} };
			if (@others)
			{
				my $other = pick(@others);
				autocommit_call($other, pick_function($other, 1), name_arg($c, $f, $args));
				$interfered = 1;
			}
		}
		my $name = name_arg($c, $f, $args);
		my $whole = chance(0.02);
		my $before = chance(0.5) ? run_digest($c, $name, $whole) : undef;
		my $savepoint = chance(0.85);
		run_sql($c, 'SAVEPOINT fz') if $savepoint;
		my ($state, $rows, $msg) = run_sql($c, $f->[1], @$args);
		$calls++;
		$by_fn{ $f->[0] }++;
		my $class = judge_call($c, $f, $args, $state, $rows, $msg, $context);
		$count{"$f->[0] " . ($state eq '' ? 'ok' : "$class $state")}++;
		last if $LOST_CONNECTION;
		if ($state eq '')
		{
			run_sql($c, 'RELEASE SAVEPOINT fz') if $savepoint;
			$touched = 1 if $f->[0] =~ /acquire|renew|release|fence|wait|write|delete|force|forget|handoff|proclaim|step_down/;
			next;
		}
		if (!$savepoint)
		{
			run_sql($c, 'ROLLBACK');
			$aborted = 1;
			# compared with what is committed now: only if this transaction
			# changed nothing, and saw what others committed
			if ($before && !$touched && (!$snapshot || !$interfered))
			{
				my $after = run_digest($c, $name, $whole);
				$checks{in_transaction}++;
				compare_digests($c, $before, $after, $f->[0], $state, $f->[1], $args,
					"$context, no savepoint", 0, 0);
			}
			last;
		}
		run_sql($c, 'ROLLBACK TO SAVEPOINT fz');
		next unless $before;
		my $after = run_digest($c, $name, $whole);
		$checks{in_transaction}++;
		$checks{whole_table}++ if $whole;
		$checks{same_snapshot}++ if $snapshot;
		compare_digests($c, $before, $after, $f->[0], $state, $f->[1], $args,
			"$context, ROLLBACK TO SAVEPOINT", $snapshot, 0);
	}
	return if $aborted || $LOST_CONNECTION;
	my $end = pick('COMMIT', 'COMMIT', 'COMMIT', 'ROLLBACK', 'PREPARE');
	if ($end eq 'PREPARE')
	{
		my $gid = 'fz_' . $c->{id} . '_' . ++$prepared_seq;
		my ($state, undef, $msg) = run_sql($c, "PREPARE TRANSACTION '$gid'");
		$count{"PREPARE TRANSACTION " . ($state || 'ok')}++;
		if ($state eq '')
		{
			run_sql($c, "ROLLBACK PREPARED '$gid'");
		}
		else
		{
			problems(Hoplock::Fuzz::Judge::transaction_end('PREPARE TRANSACTION', $state, $msg, $context));
		}
		# (a PREPARE TRANSACTION that fails rolls the transaction back)
		return;
	}
	my ($state, undef, $msg) = run_sql($c, $end);
	$count{"$end " . ($state || 'ok')}++;
	problems(Hoplock::Fuzz::Judge::transaction_end($end, $state, $msg, $context));
	run_sql($c, 'ROLLBACK') if $state ne '';
}

# --- The trigger ------------------------------------------------------------------------
sub quote_literal
{
	my ($v) = @_;
	(my $q = $v) =~ s/'/''/g;
	return "'$q'";
}

# (Re)create table k's trigger, with random arguments; remember its setup.
sub make_trigger
{
	my ($c, $k) = @_;
	my $d = $c->{d};
	my $setup = trigger_setup($c);
	my ($args, $shape) = @$setup{qw(args shape)};
	my $sql_args = join(', ', map { quote_literal($_) } @$args);
	my $ddl;
	if ($shape eq 'instead of row')
	{
		$ddl = "CREATE TRIGGER fz_trig INSTEAD OF INSERT OR UPDATE OR DELETE ON fz_v$k "
		  . "FOR EACH ROW EXECUTE FUNCTION hoplock_fenced($sql_args)";
	}
	elsif ($shape eq 'before truncate')
	{
		$ddl = "CREATE TRIGGER fz_trig BEFORE TRUNCATE ON fz_w$k "
		  . "FOR EACH STATEMENT EXECUTE FUNCTION hoplock_fenced($sql_args)";
	}
	else
	{
		my ($timing, $level) = split / /, $shape;
		$ddl = "CREATE TRIGGER fz_trig " . uc($timing) . " INSERT OR UPDATE OR DELETE ON fz_w$k "
		  . "FOR EACH " . uc($level) . " EXECUTE FUNCTION hoplock_fenced($sql_args)";
	}
	my $was_role = $c->{set_role};
	run_sql($c, 'RESET ROLE') if $was_role;
	# (in a transaction of its own: the session may be read-only)
	my $drop = "DROP TRIGGER IF EXISTS fz_trig ON fz_w$k; DROP TRIGGER IF EXISTS fz_trig ON fz_v$k";
	my ($state, $msg) = ('', '');
	$c->{dbh}->do("BEGIN READ WRITE; $drop") or die $c->{dbh}->errstr;
	if (!$c->{dbh}->do($ddl))
	{
		($state, $msg) = ($c->{dbh}->state, $c->{dbh}->errstr);
		$c->{dbh}->do('ROLLBACK');
		$c->{dbh}->do("BEGIN READ WRITE; $drop; COMMIT") or die $c->{dbh}->errstr;
	}
	else
	{
		$c->{dbh}->do('COMMIT') or die $c->{dbh}->errstr;
	}
	$count{'CREATE TRIGGER ' . ($state || 'ok')}++;
	run_sql($c, "SET ROLE $was_role") if $was_role;
	if ($state ne '')
	{
		problems(Hoplock::Fuzz::Judge::create_trigger($state, $msg, $ddl));
		$d->{trigger}[$k] = undef;
		return;
	}
	$d->{trigger}[$k] = { args => $args, shape => $shape, ddl => $ddl, by => $c };
}

# A statement through a table's trigger, compared around when it fails
# (now and then)
sub trigger_call
{
	my ($c) = @_;
	my $s = trigger_statement($c);
	my ($t, $lease, $op, $sql, $args, $types) = @$s{qw(t lease op sql args types)};
	literals($c, $types, $args);
	my $check = chance(0.3);
	my $before = $check ? run_digest($c, ($lease // '') eq '' ? undef : $lease, 0) : undef;
	my ($state, $rows, $msg) = run_sql($c, $sql, @$args);
	$calls++;
	$by_fn{trigger}++;
	my $context = $t ? "trigger: $t->{ddl}" : 'no trigger';
	my $v = Hoplock::Fuzz::Judge::trigger_call($s, {
		c => $c, state => $state, msg => $msg, context => $context,
		lits => sub { literal($c, $types->[ $_[0] ], $args->[ $_[0] ]) },
		# the lease name as the server has it, through the client
		# encoding the trigger was created with
		name_verdict => sub {
			Hoplock::Fuzz::Judge::argument($t->{by}, 'name', literal($t->{by}, 'text', $t->{args}[0]),
				$server_version) } });
	problems(@{ $v->{problems} });
	my $class = $v->{class};
	$count{"trigger " . ($state eq '' ? 'ok' : "$class $state")}++;
	if ($state ne '' && $before && !$LOST_CONNECTION)
	{
		my $after = run_digest($c, ($lease // '') eq '' ? undef : $lease, 0);
		$checks{autocommit}++;
		compare_digests($c, $before, $after, "trigger $op", $state, $sql, $args, $context, 0,
			$class eq 'argument');
	}
}

# --- Settings ---------------------------------------------------------------------------
sub shuffle_settings
{
	my ($c) = @_;
	my @sets;
	if ($c->{role} eq 'su')
	{
		if ($c->{set_role}) { run_ok($c, 'RESET ROLE'); $c->{set_role} = undef; $c->{su} = 1 }
		push @sets, 'hoplock.max_ttl = ' . pick(1, "'1s'", 2147483647, "'2147483647s'", "'35791394min'",
			"'24855d'", "'24856d'", 0, -1, 2147483648, "'1d'", 86400, 3600, "'1ms'", "'1500ms'", "'abc'",
			"'1 h'", 60, 86401) if chance(0.7);
		push @sets, 'hoplock.max_names_per_role = ' . pick(0, 1, 2, 3, 100, 2147483647, -1, 2147483648, "'x'")
		  if chance(0.5);
		push @sets, 'hoplock.notify_renewals = ' . pick('on', 'off', 'maybe', "'1'") if chance(0.4);
		push @sets, 'hoplock.log_events = ' . (chance(0.08) ? 'on' : 'off') if chance(0.4);
		push @sets, 'default_transaction_read_only = ' . (chance(0.06) ? 'on' : 'off') if chance(0.4);
		push @sets, 'synchronous_commit = ' . pick('on', 'off', 'local') if chance(0.2);
		push @sets, pick('hoplock.channel = other', 'hoplock.history_size = 0', 'hoplock.no_such = 1',
			'hoplock.max_databases = 1') if chance(0.2);
	}
	else
	{
		push @sets, pick('hoplock.max_ttl = 2147483647', 'hoplock.max_names_per_role = 0',
			'hoplock.log_events = on', 'hoplock.channel = other', 'hoplock.naptime = 1');
		push @sets, 'hoplock.notify_renewals = ' . pick('on', 'off');
	}
	for my $s (@sets)
	{
		my ($state, undef, $msg) = $c->{dbh}->do("SET $s") ? ('') : ($c->{dbh}->state, undef, $c->{dbh}->errstr);
		$count{'SET ' . ($state || 'ok')}++;
		problems(Hoplock::Fuzz::Judge::setting($c, $s, $state, $msg));
	}
	# the superuser's connection in a database becomes the limited role for a while
	if ($c->{role} eq 'su' && chance(0.3))
	{
		run_ok($c, 'SET ROLE fuzz_lim');
		$c->{set_role} = 'fuzz_lim';
	}
	read_settings($c);
}

# --- Connections ------------------------------------------------------------------
sub open_connections
{
	my ($d) = @_;
	$d->{cache} = {};    # name => { gen, handle, owner }
	$d->{conns_list} = [];
	foreach my $spec (@{ $d->{conns} })
	{
		my ($role, $cenc) = @$spec;
		my $user = $role eq 'su' ? $bootstrap_su : $role;
		my $dbh = DBI->connect(
			sprintf('dbi:Pg:host=%s;port=%d;dbname=%s;application_name=fuzz-%s-%s',
				$node->host, $node->port, $d->{db}, $role, $cenc),
			$user, '',
			{ AutoCommit => 1, RaiseError => 0, PrintError => 0, pg_enable_utf8 => 0 })
		  or die "connect $d->{db} as $user: $DBI::errstr";
		$dbh->do("SET client_encoding = '$cenc'") or die $dbh->errstr;
		$dbh->do("SET statement_timeout = '250ms'") or die $dbh->errstr;
		$dbh->do("SET client_min_messages = warning") or die $dbh->errstr;
		$dbh->do("SET log_min_messages = log") if $role eq 'su';
		my $c = {
			d => $d, dbh => $dbh, role => $role, cenc => $cenc, user => $user,
			su => ($role eq 'su'), set_role => undef, sth => {}, parse => {},
			id => scalar(@CONNS), settings => {},
		};
		# a name another client wrote may have no form in this client's
		# encoding: results and messages with it cannot be sent (22P05)
		$c->{output_may_fail} = $cenc ne $d->{enc} && $cenc ne 'UTF8' && $cenc ne 'SQL_ASCII'
		  && $d->{enc} ne 'SQL_ASCII';
		$c->{pool} = make_pool($c);
		$c->{owners} = [ (map { "o$_" } 1 .. 4), @{ $c->{pool} }[ -3 .. -1 ] ];
		read_settings($c);
		push @CONNS, $c;
		push @{ $d->{conns_list} }, $c;
	}
}

# --- The run ------------------------------------------------------------------------------
# One shard of the run: some databases, their connections, a share of the
# calls.  Two shards run side by side, each in a process of its own, on
# databases of their own, so that what one compares is not changed by the
# other.
sub run_shard
{
	my ($dbs, $my_target, $deadline) = @_;
	open_connections($_) for @$dbs;
	for my $d (@$dbs)
	{
		make_trigger($d->{conns_list}[0], $_) for 1 .. $N_TABLES;
	}
	my $t0 = time();
	while ($calls < $my_target && time() < $deadline && !$LOST_CONNECTION)
	{
		my $d = pick_db($dbs);
		my $c = pick(@{ $d->{conns_list} });
		my $r = rand();
		if ($r < 0.004)
		{
			shuffle_settings($c);
			next;
		}
		if ($r < 0.006)
		{
			my $su = $d->{conns_list}[0];
			make_trigger($su, 1 + int(rand($N_TABLES)));
			next;
		}
		if ($r < 0.0065)
		{
			# keep the users' tables small; TRUNCATE fires the TRUNCATE triggers
			my $su = $d->{conns_list}[0];
			my $k = 1 + int(rand($N_TABLES));
			run_sql($su, 'RESET ROLE') if $su->{set_role};
			run_ok($su, 'BEGIN READ WRITE');
			my ($state, undef, $msg) = run_sql($su, "TRUNCATE fz_w$k");
			run_ok($su, $state eq '' ? 'COMMIT' : 'ROLLBACK');
			run_sql($su, "SET ROLE $su->{set_role}") if $su->{set_role};
			$count{'TRUNCATE ' . ($state || 'ok')}++;
			problems(Hoplock::Fuzz::Judge::truncate($d->{trigger}[$k], "fz_w$k", $state, $msg));
			next;
		}
		if ($r < 0.08)
		{
			transaction_block($c);
			next;
		}
		my $f = pick_function($c, 0);
		if ($f->[0] eq 'trigger') { trigger_call($c) }
		else { autocommit_call($c, $f) }
	}
	my $elapsed = time() - $t0;

	if ($LOST_CONNECTION)
	{
		my $l = $LOST_CONNECTION;
		problem('a connection was lost',
			"$l->{state} $l->{msg}\n" . Hoplock::Fuzz::Judge::repro($l->{conn}, $l->{sql}, $l->{args}));
	}
	my $dead = grep { !$_->{dbh}->ping } @CONNS;
	$_->{dbh}->disconnect for @CONNS;
	return {
		calls => $calls, elapsed => $elapsed, count => \%count, by_fn => \%by_fn,
		checks => \%checks, tally => $tally,
		client_warnings => \@client_warnings, perl_warnings => \@perl_warnings,
		dead => $dead,
	};
}

# Hoplock::Fuzz->new(seed => S, calls => N, seconds => T): a run of about N
# calls (at most T seconds) drawn from seed S, on a server it sets up.
sub new
{
	my ($class, %o) = @_;
	my $self = bless {%o}, $class;
	$SIG{__WARN__} = sub {
		if ($_[0] =~ /^(WARNING|NOTICE|INFO|DEBUG):/) { push @client_warnings, $_[0] }
		else { push @perl_warnings, $_[0] }
	};
	setup();
	$self->{node} = $node;
	return $self;
}

# The shards, each in a process of its own; then what they found, together,
# in $self: calls, elapsed, dead (connections), count, by_fn, checks,
# tally (Hoplock::Fuzz::Judge's), client_warnings, perl_warnings, and
# whether the library was replaced meanwhile
sub run
{
	my ($self) = @_;
	my $seed = $self->{seed};
	my @SHARDS = ([ grep { $_->{db} =~ /^fz_(utf8|mule)$/ } @DBS ], [ grep { $_->{db} !~ /^fz_(utf8|mule)$/ } @DBS ]);
	my $all_weight = 0;
	$all_weight += $_->{weight} for @DBS;
	my $tmpdir = PostgreSQL::Test::Utils::tempdir;
	my @children;
	for my $i (0 .. $#SHARDS)
	{
		my $pid = fork() // die "fork: $!";
		if ($pid == 0)
		{
			# each shard its own sequence of values, from the one seed
			srand($seed + 7919 * ($i + 1));
			my $weight = 0;
			$weight += $_->{weight} for @{ $SHARDS[$i] };
			my $result = eval {
				run_shard($SHARDS[$i], int($self->{calls} * $weight / $all_weight) + 1, time() + $self->{seconds});
			} // { died => "$@" };
			open(my $fh, '>', "$tmpdir/shard-$i.json") or POSIX::_exit(2);
			print $fh JSON::PP->new->utf8->canonical->encode($result);
			close $fh;
			# not through END blocks: they would stop the server
			POSIX::_exit(0);
		}
		push @children, $pid;
	}
	waitpid($_, 0) for @children;

	my $elapsed = 0;
	my $dead = 0;
	for my $i (0 .. $#SHARDS)
	{
		my $file = "$tmpdir/shard-$i.json";
		my $r = -e $file ? JSON::PP->new->utf8->decode(slurp_file($file)) : { died => 'no result' };
		if ($r->{died})
		{
			problem('a shard of the run died', "shard $i: $r->{died}");
			next;
		}
		$calls += $r->{calls};
		$elapsed = $r->{elapsed} if $r->{elapsed} > $elapsed;
		$dead += $r->{dead};
		$count{$_} += $r->{count}{$_} for keys %{ $r->{count} };
		$by_fn{$_} += $r->{by_fn}{$_} for keys %{ $r->{by_fn} };
		$checks{$_} += $r->{checks}{$_} for keys %{ $r->{checks} };
		Hoplock::Fuzz::Judge::merge_tally($tally, $r->{tally});
		push @client_warnings, @{ $r->{client_warnings} };
		push @perl_warnings, @{ $r->{perl_warnings} };
	}
	%$self = (%$self,
		calls => $calls, elapsed => $elapsed, dead => $dead, count => \%count, by_fn => \%by_fn,
		checks => \%checks, tally => $tally, client_warnings => \@client_warnings,
		perl_warnings => \@perl_warnings,
		replaced => ((stat $library)[9] // 0) != $library_mtime, library => $library);
	return $self;
}

1;
