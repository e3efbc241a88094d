// Command example runs a job's work only while this process leads it, with
// hoplock on PostgreSQL: the Go form of examples/leader.sh.
//
//	go run ./example -dsn 'host=/tmp dbname=postgres' -name billing-scheduler
//
// Start several: one leads, the others wait in the server and take over
// within milliseconds when the leader stops (Ctrl-C), or within the TTL
// when it dies or is cut off. Each unit of work is a row appended to the
// table work_log (created if missing, in the schema -work-schema names: one
// that no untrusted role can create in or owns), in a transaction fenced with the
// term's generation, so that a deposed leader's writes are refused.
package main

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"log"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v4/stdlib" // the "pgx" driver: LISTEN, and waits cancelled in the server

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

func main() {
	host, _ := os.Hostname()
	var (
		dsn          = flag.String("dsn", "", "connection string (default: the PG* environment variables)")
		name         = flag.String("name", "billing-scheduler", "lease name")
		owner        = flag.String("owner", fmt.Sprintf("%s:%d", host, os.Getpid()), "this process's identity, unique per process")
		schema       = flag.String("schema", postgres.DefaultSchema, "schema hoplock is installed in")
		workSchema   = flag.String("work-schema", "public", "schema of the table work_log")
		ttl          = flag.Duration("ttl", 15*time.Second, "lease TTL")
		sessionBound = flag.Bool("session-bound", false, "end the term the moment this process's connection closes")
		watch        = flag.Bool("watch", false, "follow the events with hoplock_watch, not LISTEN: behind a transaction pooler such as PgBouncer (add statement_cache_mode=describe to -dsn there)")
		verbose      = flag.Bool("v", false, "log renewals too")
	)
	flag.Parse()

	logger := newLogger(*verbose)

	db, err := sql.Open("pgx", *dsn)
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()

	workLog := `"` + strings.ReplaceAll(*workSchema, `"`, `""`) + `".work_log`
	create := `CREATE TABLE IF NOT EXISTS ` + workLog + ` (
		id         bigserial PRIMARY KEY,
		lease      text NOT NULL,
		owner      text NOT NULL,
		generation bigint NOT NULL,
		at         timestamptz NOT NULL DEFAULT pg_catalog.clock_timestamp())`
	_, err = db.ExecContext(ctx, create)
	var pgErr interface{ SQLState() string } // pgx's and lib/pq's errors
	if errors.As(err, &pgErr) {
		// instances started at once race in CREATE TABLE IF NOT EXISTS: the
		// loser fails ("already exists", or on a catalog's unique index),
		// and its second try finds the table; any other error comes again
		_, err = db.ExecContext(ctx, create)
	}
	if err != nil {
		log.Fatal(err)
	}

	follow := postgres.FollowListen
	if *watch {
		follow = postgres.FollowWatch
	}
	backend := postgres.New(db, *name, postgres.Options{Schema: *schema, SessionBound: *sessionBound, Follow: follow})
	e := &hoplock.Elector{Backend: backend, Owner: *owner, TTL: *ttl, Logger: logger}

	// Lead, and when leadership is lost, campaign again, until told to
	// stop.
	for ctx.Err() == nil {
		err := e.Lead(ctx, func(ctx context.Context, lease hoplock.Lease) error {
			logger.Info("leading", "generation", lease.Generation)
			tick := time.NewTicker(*ttl / 3)
			defer tick.Stop()
			for {
				err := work(ctx, db, backend, workLog, *owner, lease.Generation)
				switch {
				case errors.Is(err, hoplock.ErrLeaseHeld):
					return err // deposed: another term began
				case err != nil && ctx.Err() == nil:
					logger.Warn("work failed, will try again", "err", err)
				}
				select {
				case <-tick.C:
				case <-ctx.Done():
					return ctx.Err()
				}
			}
		})
		switch {
		case ctx.Err() != nil:
		case errors.Is(err, hoplock.ErrLeaseHeld):
			logger.Info("deposed: a write was fenced out", "err", err)
		case errors.Is(err, context.Canceled):
			logger.Info("leadership lost, campaigning again")
		case err != nil:
			logger.Warn("leading failed, campaigning again", "err", err)
			time.Sleep(time.Second)
		}
	}
	logger.Info("stopped: lease handed over or released")
}

// work is one unit of the leader's work: a row in work_log, written in a
// transaction that hoplock_fence protects from a successor's term.
func work(ctx context.Context, db *sql.DB, b *postgres.Backend, workLog, owner string, generation int64) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := b.Fence(ctx, tx, generation); err != nil {
		return err
	}
	if _, err := tx.ExecContext(ctx,
		"INSERT INTO "+workLog+" (lease, owner, generation) VALUES ($1, $2, $3)",
		b.Name(), owner, generation); err != nil {
		return err
	}
	return tx.Commit()
}
