package postgres

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/jackc/pgx/v4"
)

// errNoWatch reports a server whose hoplock has no hoplock_watch (1.1).
var errNoWatch = errors.New("hoplock/postgres: hoplock_watch does not exist (hoplock 1.1)")

// The SQLSTATEs that change how the events are followed.
const (
	// an event number the server no longer keeps the events after, or
	// one of another history: start again from hoplock_position()
	stateNotInHistory = "HL001"
	// no such function: hoplock 1.1, which has no event log
	stateUndefinedFunction = "42883"
	// hoplock_position or hoplock_watch on a standby
	stateFeatureNotSupported = "0A000"
)

// hook tells the tests of a step of following the events.
func (b *Backend) hook(step string, n int64) {
	if b.watchHook != nil {
		b.watchHook(step, n)
	}
}

// followWatch follows the event log with hoplock_watch, and signals out for
// each event of this lease, until ctx ends (nil) or the server turns out to
// have no hoplock_watch (errNoWatch). It starts from hoplock_position() and
// signals then, as listening does when it (re)starts: the Elector reads the
// lease after the position was taken, so no change falls between the two.
// Each call resumes from the number of the last event it got, on any
// connection: after a lost connection, nothing is missed. Where the server
// no longer has what followed that number (HL001: the events were trimmed
// after hoplock.event_retention, or the server is another copy of the
// data), it starts again from hoplock_position(), which signals. On a
// standby (0A000) it polls the holder for WatchWait, then tries again.
func (b *Backend) followWatch(ctx context.Context, out chan<- struct{}) error {
	const firstRetry, maxRetry = 50 * time.Millisecond, 2 * time.Second
	retry := firstRetry
	backOff := func() bool {
		ok := sleepCtx(ctx, retry)
		if retry *= 2; retry > maxRetry {
			retry = maxRetry
		}
		return ok
	}
	var (
		after   int64
		started bool // after is a number to resume from
		fresh   bool // after is a position no watch has moved on from yet
	)
	for ctx.Err() == nil {
		var err error
		if !started {
			after, err = b.position(ctx)
			if err == nil {
				started, fresh = true, true
				b.hook("position", after)
				signal(out)
				continue
			}
		} else {
			b.hook("watch", after)
			prev := after
			if b.opts.NoCancel {
				err = b.watchUncancelled(ctx, &after, out)
			} else {
				err = b.watchOnce(ctx, &after, out)
			}
			if err == nil {
				retry = firstRetry
				if after != prev {
					fresh = false
				}
				continue
			}
		}
		switch SQLState(err) {
		case "":
			if ctx.Err() != nil {
				return nil
			}
		case stateUndefinedFunction:
			return errNoWatch
		case stateNotInHistory:
			b.hook("restart", after)
			started = false
			if !fresh {
				continue // at once
			}
			// A position refused before any event came after it:
			// do not spin.
		case stateFeatureNotSupported:
			// A standby: it can tell who holds the lease, not
			// which events are still to come.
			b.hook("standby", after)
			started = false
			pctx, cancel := context.WithTimeout(ctx, b.opts.WatchWait)
			b.pollHolder(pctx, out)
			cancel()
			continue
		}
		// A lost connection, a server restarting, a statement_timeout:
		// try again, from the same number.
		if !backOff() {
			return nil
		}
	}
	return nil
}

// position returns the number to start watching from (hoplock_position).
func (b *Backend) position(ctx context.Context) (int64, error) {
	var n int64
	if err := b.db.QueryRowContext(ctx, b.q.position).Scan(&n); err != nil {
		return 0, err
	}
	return n, nil
}

// watchOnce calls hoplock_watch(*after, WatchWait) on a connection of the
// pool, moves *after to the number of each event it returns (dropping a
// number it has already had), and signals out for each of this lease. When
// ctx ends, the call is cancelled in the server.
func (b *Backend) watchOnce(ctx context.Context, after *int64, out chan<- struct{}) error {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return err
	}
	defer conn.Close()
	take := func(seq int64, name string) {
		if seq <= *after {
			return // a repeat
		}
		*after = seq
		if name == b.name {
			signal(out)
		}
	}
	type rowsOf interface {
		Next() bool
		Scan(dest ...any) error
		Err() error
	}
	read := func(rows rowsOf) error {
		for rows.Next() {
			var (
				seq  int64
				name string
			)
			if err := rows.Scan(&seq, &name); err != nil {
				return err
			}
			take(seq, name)
		}
		return rows.Err()
	}
	args := []any{*after, interval(b.opts.WatchWait)}
	return cancellable(ctx, conn,
		func(qctx context.Context, pc *pgx.Conn) error {
			rows, err := pc.Query(qctx, b.q.watch, args...)
			if err != nil {
				return err
			}
			defer rows.Close()
			return read(rows)
		},
		func(ctx context.Context) error {
			rows, err := conn.QueryContext(ctx, b.q.watch, args...)
			if err != nil {
				return err
			}
			defer func(rows *sql.Rows) { _ = rows.Close() }(rows)
			if err := read(rows); err != nil {
				return err
			}
			return rows.Close()
		})
}

// sleepCtx waits for d or the end of ctx; it reports whether ctx is live.
func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
