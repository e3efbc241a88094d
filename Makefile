# hoplock: lease-based leader election for PostgreSQL

MODULE_big = hoplock
OBJS = \
	src/args.o \
	src/attach.o \
	src/bound.o \
	src/branch.o \
	src/candidates.o \
	src/dbhooks.o \
	src/delivery.o \
	src/digest.o \
	src/eventlog.o \
	src/expiries.o \
	src/events.o \
	src/fence.o \
	src/fenced.o \
	src/floor.o \
	src/functions.o \
	src/guc.o \
	src/install.o \
	src/history.o \
	src/hoplock.o \
	src/keepalive.o \
	src/launcher.o \
	src/lease.o \
	src/mailbox.o \
	src/massexpiry.o \
	src/monitor.o \
	src/refusals.o \
	src/renewall.o \
	src/rowwrite.o \
	src/schedule.o \
	src/session.o \
	src/shmem.o \
	src/slotdeclare.o \
	src/slotforget.o \
	src/slothandoff.o \
	src/slothint.o \
	src/slotkey.o \
	src/slotrows.o \
	src/slots.o \
	src/store.o \
	src/stream.o \
	src/table.o \
	src/termlock.o \
	src/undoable.o \
	src/wait.o \
	src/wakeup.o \
	src/worker.o

EXTENSION = hoplock
DATA = hoplock--1.0.0.sql hoplock--1.0.0--1.1.0.sql hoplock--1.1.0.sql hoplock--1.1.0--1.2.0.sql hoplock--1.2.0.sql
PGFILEDESC = "hoplock - lease-based leader election"

# Regression tests: one file per topic.  make check-regress runs them on a
# scratch server that preloads hoplock (pg_regress --temp-instance with
# hoplock.conf); make installcheck, the PGXS way, on the running server
# PGHOST, PGPORT and PGUSER name, which must have hoplock.conf's settings
# (shared_preload_libraries = 'hoplock', max_prepared_transactions >= 5).
REGRESS = \
	setup \
	acquire \
	renew \
	release \
	holder \
	fence \
	fenced \
	cas \
	wait \
	leases_view \
	bad_input \
	privileges \
	security \
	events \
	watch \
	durability \
	guc \
	guc_prefix \
	hot_renewals \
	two_phase \
	table_integrity \
	reinstall \
	monitoring \
	security_install_schema \
	security_install_planted \
	security_install_access \
	security_install_settings \
	fork_before_mint \
	truncate_log \
	handoff \
	proclaim \
	step_down \
	min_hold \
	renew_all \
	renew_all_attach \
	discard \
	slots \
	slots_hint \
	procedure_memory
REGRESS_OPTS =
TEMP_REGRESS_OPTS = --temp-instance=tmp_check_regress --temp-config=$(srcdir)/hoplock.conf

ISOLATION = \
	race_acquire \
	acquire_renew \
	release_acquire \
	fence_takeover \
	write_stale_handle \
	notify_payloads \
	isolation_levels \
	table_lock \
	history_end_race \
	wait_wakeups \
	renew_table_busy \
	fenced_writes \
	events_resume \
	history_busy \
	names_per_role \
	row_locks \
	reindex_concurrently \
	watch_order \
	precommit_branch_lock \
	renew_all_race \
	renew_all_begin \
	discard_contended \
	slots_contended \
	slots_forget \
	slots_own_slot
ISOLATION_OPTS =
TEMP_ISOLATION_OPTS = --temp-instance=tmp_check_iso --temp-config=$(srcdir)/hoplock.conf

# (make installcheck runs the TAP files too, each on servers of its own;
# TAP_TESTS= on the command line leaves them out)
TAP_TESTS = 1

EXTRA_CLEAN = tmp_check tmp_check_regress tmp_check_iso output_iso

PG_CONFIG ?= pg_config
PGXS := $(shell $(PG_CONFIG) --pgxs)
include $(PGXS)

# Each object, and its bitcode for the JIT, depends on the headers it
# includes, as the compiler lists them in src/x.o.d (PGXS tracks none
# unless the server was configured with --enable-depend).  GCC and clang
# only, as PostgreSQL's own dependency tracking.
ifeq ($(GCC), yes)
src/%.o: src/%.c
	$(COMPILE.c) -MMD -MP -MF $@.d -MT $@ -MT $(@:.o=.bc) -o $@ $<
-include $(OBJS:.o=.o.d)
endif
EXTRA_CLEAN += $(OBJS:.o=.o.d)

# The suites one by one, so that scripts/test can run them all and count.
.PHONY: check-regress check-isolation check-tap test test-sql-edition test-clients-sql-edition test-clients test-ha test-ha-short deb test-deb test-python test-node test-matrix test-valgrind demo bench bench-quick bench-every-client dist torture torture-forks format-check

check-regress:
	$(pg_regress_installcheck) $(TEMP_REGRESS_OPTS) $(REGRESS_OPTS) $(REGRESS)

check-isolation:
	$(pg_isolation_regress_installcheck) $(TEMP_ISOLATION_OPTS) $(ISOLATION_OPTS) $(ISOLATION)

check-tap:
	$(prove_installcheck)

test:
	scripts/test

# The SQL edition (sql-edition/): its suite in a private copy of
# PostgreSQL; .ci/run runs it.  HOPLOCK_SQLED_TESTS="setup acquire" for some.
test-sql-edition:
	scripts/test-sql-edition

# The Go, Python and Node clients' suites against a server with the SQL
# edition instead of the C one (by hand: about 3.5 minutes).
test-clients-sql-edition:
	scripts/test-clients-sql-edition

# The client libraries' suites make test leaves out (its 15 minutes):
# Python, Node, the Go client under a newer Go.  .ci/run runs it.
test-clients:
	scripts/test-clients

# hoplock on a Patroni cluster of three nodes and etcd, failed over while
# electors write (scripts/test-ha); test-ha-short (HA_SHORT=1): the
# shorter run of .ci/run
test-ha:
	scripts/test-ha

test-ha-short:
	HA_SHORT=1 scripts/test-ha

# The Python client (clients/python): mypy, an offline install, pytest on
# a scratch server of its own; part of make test-clients.  PYTEST_ARGS=-k process
test-python:
	scripts/test-python $(PYTEST_ARGS)

# The Node client (clients/node): the TypeScript build, node:test on
# scratch servers of its own, npm pack installed offline; part of make
# test-clients.  NODE_TESTS=test/process.test.js
test-node:
	scripts/test-node $(NODE_TESTS)

# pgindent's layout rules that need no pg_bsd_indent, on src/ (tabs,
# trailing whitespace, braces and return types on lines of their own)
format-check:
	scripts/format-check

demo:
	scripts/demo

# Every benchmark in one run: bench/RESULTS.md, every target at the top
# (bench/run); bench-quick: a shorter part, into a temporary directory
bench:
	bench/run

bench-quick:
	bench/run --quick

# Every client's leader killed and stopped, 20 rounds each, the history
# checked, takeover p50/p99 per client (part of make bench; ROUNDS=N)
bench-every-client:
	bench/every-client --mixed --rounds $(or $(ROUNDS),20)

# The PGXN distribution hoplock-VERSION.zip of the committed tree;
# make dist DIST_FLAGS=--worktree: of the working tree as it is.
dist:
	scripts/dist $(DIST_FLAGS)

# The Debian packages postgresql-NN-hoplock, into debs/ (debian/, pg_buildext),
# checked by lintian
deb:
	scripts/deb

# The package built, installed with apt-get on /usr's PostgreSQL (a make
# install copy moved aside and put back), make installcheck against it,
# its file list, and apt-get purge leaving nothing (as root)
test-deb:
	scripts/test-deb

# The torture checker (t/017_torture.pl) for 10 minutes, or DURATION seconds
torture:
	scripts/torture

# The fork torture test (t/037_fork_torture.pl) for 10 minutes, or DURATION
# seconds, its checks strict (non-zero exit on any violation)
torture-forks:
	scripts/torture-forks

# Regression, isolation and the version-sensitive TAP files against
# assert-enabled builds of PostgreSQL 13, 17 and 18 (scripts/pg-build);
# VERSIONS="13 18" for others, HOPLOCK_MATRIX_TAP=all for every TAP file
test-matrix:
	scripts/test-matrix $(VERSIONS)

# The regression and isolation suites under valgrind (assert-enabled 15)
test-valgrind:
	scripts/test-valgrind
