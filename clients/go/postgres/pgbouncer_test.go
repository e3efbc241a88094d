package postgres_test

// Elector processes through PgBouncer (t/070_pgbouncer.pl starts it, in
// transaction and in session pooling mode, and runs these tests once per
// mode): the process tests' children connect through the pooler with the
// settings the README's "Through PgBouncer" gives (pgx: the simple
// protocol; the events followed with hoplock_watch), are killed (SIGKILL)
// and stopped (SIGSTOP), and the history checker judges what they did.

import (
	"context"
	"database/sql"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/stdlib"
	_ "github.com/lib/pq"

	"github.com/hoplock/hoplock/clients/go/postgres"
)

// pgbouncer returns the connection string of the pooler
// (HOPLOCK_TEST_PGBOUNCER_DSN) and its pooling mode
// (HOPLOCK_TEST_PGBOUNCER_MODE), and makes every child connect through it.
func pgbouncer(t *testing.T) (string, string) {
	t.Helper()
	testDSN(t)
	dsn := os.Getenv("HOPLOCK_TEST_PGBOUNCER_DSN")
	if dsn == "" {
		t.Skip("HOPLOCK_TEST_PGBOUNCER_DSN is not set (t/070_pgbouncer.pl sets it)")
	}
	mode := os.Getenv("HOPLOCK_TEST_PGBOUNCER_MODE")
	// (HOPLOCK_TEST_EXIT_LATE: a child stopped while it waits in
	// hoplock_wait sends a cancel request; exiting before PgBouncer 1.18
	// has forwarded it crashes PgBouncer -- see the README)
	childEnv = []string{"HOPLOCK_TEST_CHILD_DSN=" + dsn, "HOPLOCK_TEST_POOLED=1", "HOPLOCK_TEST_EXIT_LATE=500ms"}
	t.Cleanup(func() { childEnv = nil })
	return dsn, mode
}

// Killed leaders (SIGKILL), TTL-bound: each time the follower, waiting
// through the pooler, leads once the term lapses; no two terms overlap, no
// stale fenced write commits.
func TestPgBouncerKill(t *testing.T) {
	_, mode := pgbouncer(t)
	const ttl = 500 * time.Millisecond
	takeover, afterExpiry := killRounds(t, false, ttl)
	if p := takeover.percentile(0.99); p > ttl+time.Second {
		t.Errorf("TTL-bound takeover after a kill: p99 %v, TTL %v", p, ttl)
	}
	fmt.Printf("measure: through PgBouncer (%s pooling), killed TTL-bound leader (TTL %v), kill -> follower fn start: %v; term's expiry -> follower fn start: %v\n",
		mode, ttl, takeover, afterExpiry)
}

// A leader stopped (SIGSTOP) past its TTL, through the pooler: the
// follower leads once the term lapses, and the stopped leader's write
// with its old generation, once continued, is refused with 55P03.
func TestPgBouncerStalledLeader(t *testing.T) {
	pgbouncer(t)
	setupProcWrites(t)
	stalledLeader(t, false)
}

// Every driver with the README's settings, through the pooler: acquire,
// renew with the generation, a fenced transaction, a write under a
// hoplock_fenced trigger, release -- from several goroutines at once, so
// that in transaction mode consecutive statements land on different
// server connections.
func TestPgBouncerDrivers(t *testing.T) {
	dsn, mode := pgbouncer(t)
	adminExec(t, `CREATE TABLE IF NOT EXISTS pgb_writes (id bigserial PRIMARY KEY, name text NOT NULL, generation bigint NOT NULL)`)
	adminExec(t, `GRANT ALL ON pgb_writes, pgb_writes_id_seq TO PUBLIC`)
	for _, d := range []struct{ name, driver, dsn string }{
		{"pgx-simple", "pgx", dsn + " prefer_simple_protocol=true"},
		{"pgx-describe", "pgx", dsn + " statement_cache_mode=describe"},
		{"pq", "postgres", dsn + " binary_parameters=yes"},
	} {
		d := d
		t.Run(d.name, func(t *testing.T) {
			var db *sql.DB
			if d.driver == "pgx" {
				cfg, err := pgx.ParseConfig(d.dsn)
				if err != nil {
					t.Fatal(err)
				}
				db = stdlib.OpenDB(*cfg)
			} else {
				var err error
				if db, err = sql.Open(d.driver, d.dsn); err != nil {
					t.Fatal(err)
				}
			}
			defer db.Close()
			db.SetMaxOpenConns(8)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			const workers, steps = 6, 15
			errs := make(chan error, workers)
			for w := 0; w < workers; w++ {
				name := fmt.Sprintf("pgb-%s-%s-%d-%d", mode, d.name, w, time.Now().UnixNano())
				adminExec(t, fmt.Sprintf(`CREATE TRIGGER %q BEFORE INSERT ON pgb_writes
					FOR EACH ROW WHEN (NEW.name = %s) EXECUTE FUNCTION %s.hoplock_fenced(%s, 'generation')`,
					name, quoteLiteral(name), testSchema(), quoteLiteral(name)))
				go func(name string) { errs <- driverRound(ctx, db, name, steps) }(name)
			}
			for w := 0; w < workers; w++ {
				if err := <-errs; err != nil {
					t.Error(err)
				}
			}
		})
	}
}

func quoteLiteral(s string) string { return "'" + strings.ReplaceAll(s, "'", "''") + "'" }

// driverRound runs one lease's calls, steps times, as a leader would.
func driverRound(ctx context.Context, db *sql.DB, name string, steps int) error {
	owner := name + "-owner"
	for i := 0; i < steps; i++ {
		var gen int64
		if err := db.QueryRowContext(ctx, q(`SELECT generation FROM %s.hoplock_acquire($1, $2, '10 s')`), name, owner).Scan(&gen); err != nil {
			return fmt.Errorf("%s: acquire: %w", name, err)
		}
		var ok bool
		if err := db.QueryRowContext(ctx, q(`SELECT (%s.hoplock_renew($1, $2, '10 s', $3)).generation IS NOT NULL`), name, owner, gen).Scan(&ok); err != nil || !ok {
			return fmt.Errorf("%s: renew: %v %v", name, ok, err)
		}
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, q(`SELECT %s.hoplock_fence($1, $2)`), name, gen); err != nil {
			tx.Rollback()
			return fmt.Errorf("%s: fence: %w", name, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO pgb_writes (name, generation) VALUES ($1, $2)`, name, gen); err != nil {
			tx.Rollback()
			return fmt.Errorf("%s: fenced insert: %w", name, err)
		}
		if err := tx.Commit(); err != nil {
			return fmt.Errorf("%s: commit: %w", name, err)
		}
		// a stale generation is refused by the trigger
		if _, err := db.ExecContext(ctx, `INSERT INTO pgb_writes (name, generation) VALUES ($1, $2)`, name, gen-1); err == nil {
			return fmt.Errorf("%s: a write with a stale generation committed", name)
		} else if st := postgres.SQLState(err); st != "55P03" {
			return fmt.Errorf("%s: stale write: %v (SQLSTATE %q), want 55P03", name, err, st)
		}
		if err := db.QueryRowContext(ctx, q(`SELECT %s.hoplock_release($1, $2, $3)`), name, owner, gen).Scan(&ok); err != nil || !ok {
			return fmt.Errorf("%s: release: %v %v", name, ok, err)
		}
	}
	return nil
}

// Followers waiting in hoplock_wait through the pooler, stopped (SIGTERM)
// and exiting at once: each cancels its wait (pgx sends a cancel request)
// and exits before PgBouncer has passed the cancel on. PgBouncer 1.18
// dies of it (its issue 801: "disconnect_client(): bad client state").
// Only when HOPLOCK_TEST_PGBOUNCER_CANCEL is set: t/070_pgbouncer.pl runs
// it last, as a known defect of PgBouncer. With
// HOPLOCK_TEST_PGBOUNCER_NO_CANCEL too, the followers' backends have
// Options.NoCancel, send no cancel request, and PgBouncer must live
// (t/070 runs that first, on every version).
func TestPgBouncerCancelAtExit(t *testing.T) {
	dsn, _ := pgbouncer(t)
	if os.Getenv("HOPLOCK_TEST_PGBOUNCER_CANCEL") == "" {
		t.Skip("HOPLOCK_TEST_PGBOUNCER_CANCEL is not set")
	}
	childEnv = childEnv[:2] // no HOPLOCK_TEST_EXIT_LATE
	if os.Getenv("HOPLOCK_TEST_PGBOUNCER_NO_CANCEL") != "" {
		childEnv = append(childEnv, "HOPLOCK_TEST_NO_CANCEL=1")
	}
	setupProcWrites(t)
	alive := func() bool {
		db, err := sql.Open("postgres", dsn+" binary_parameters=yes connect_timeout=2")
		if err != nil {
			return false
		}
		defer db.Close()
		return db.Ping() == nil
	}
	for r := 0; r < 5 && alive(); r++ {
		name := leaseName(t)
		leader := startChild(t, name, fmt.Sprintf("cancel-%d-l", r), 10*time.Second, false)
		leader.waitStarted(t, 10*time.Second)
		var fs []*child
		for i := 0; i < 4; i++ {
			f := startChild(t, name, fmt.Sprintf("cancel-%d-%d", r, i), 10*time.Second, false)
			waitWaiting(t, f.owner)
			fs = append(fs, f)
		}
		stopped := time.Now()
		for _, f := range fs {
			f.term()
		}
		for _, f := range fs {
			<-f.exited
		}
		t.Logf("round %d: the 4 followers exited %v after SIGTERM", r+1, time.Since(stopped).Round(time.Millisecond))
		leader.term()
		<-leader.exited
		time.Sleep(200 * time.Millisecond)
		if !alive() {
			t.Errorf("PgBouncer died in round %d, when processes exited right after cancelling their hoplock_wait", r+1)
		}
	}
}
