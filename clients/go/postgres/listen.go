package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"encoding/json"
	"errors"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/stdlib"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// errNotPgx reports a connection of a driver other than pgx.
var errNotPgx = errors.New("hoplock/postgres: not a pgx connection")

// withPgx runs f on conn's pgx connection. It returns errNotPgx, without
// running f, if conn is of another driver. If f returns discard, the
// connection is closed instead of going back to the pool.
func withPgx(conn *sql.Conn, f func(pc *pgx.Conn) (discard bool)) error {
	return conn.Raw(func(dc any) error {
		sc, ok := dc.(*stdlib.Conn)
		if !ok {
			return errNotPgx
		}
		if f(sc.Conn()) {
			return driver.ErrBadConn
		}
		return nil
	})
}

// cancellable runs a statement on conn for as long as it takes: viaPgx
// with pgx, viaSQL with any other driver. With pgx, when ctx ends first it
// sends the server a cancel request, so that the statement ends there too,
// then closes the connection (a late cancel request could hit its next
// statement); other drivers do as they do on a cancelled context (pq too
// sends a cancel request).
func cancellable(ctx context.Context, conn *sql.Conn, viaPgx func(ctx context.Context, pc *pgx.Conn) error,
	viaSQL func(ctx context.Context) error) error {
	var err error
	rawErr := withPgx(conn, func(pc *pgx.Conn) bool {
		qctx, qcancel := context.WithCancel(context.Background())
		defer qcancel()
		done := make(chan struct{})
		var cancelled atomic.Bool
		go func() {
			select {
			case <-done:
				return
			case <-ctx.Done():
			}
			cancelled.Store(true)
			cctx, ccancel := context.WithTimeout(context.Background(), 5*time.Second)
			_ = pc.PgConn().CancelRequest(cctx)
			ccancel()
			select {
			case <-done:
			case <-time.After(5 * time.Second):
				qcancel() // no answer: give up the connection
			}
		}()
		err = viaPgx(qctx, pc)
		close(done)
		if err != nil && cancelled.Load() && ctx.Err() != nil {
			err = ctx.Err()
		}
		return cancelled.Load() || pc.IsClosed()
	})
	if errors.Is(rawErr, errNotPgx) {
		return viaSQL(ctx)
	}
	if err == nil && rawErr != nil && !errors.Is(rawErr, driver.ErrBadConn) {
		err = rawErr
	}
	return err
}

// queryCancellable runs a query that returns a hoplock_lease on conn, for
// as long as it takes; when ctx ends first, the query is cancelled in the
// server (see cancellable).
func queryCancellable(ctx context.Context, conn *sql.Conn, query string, args ...any) (*hoplock.Lease, error) {
	var l *hoplock.Lease
	err := cancellable(ctx, conn,
		func(qctx context.Context, pc *pgx.Conn) (err error) {
			l, err = scanLease(pc.QueryRow(qctx, query, args...))
			return err
		},
		func(ctx context.Context) (err error) {
			l, err = scanLease(conn.QueryRowContext(ctx, query, args...))
			return err
		})
	return l, err
}

// Watch signals when the lease may have changed hands: on each event of
// this lease's name, and each time following the events (re)starts, since
// events may have been missed meanwhile. A signal is a hint (any role can
// NOTIFY): the Elector confirms it with Holder.
//
// With Options.Follow FollowListen (the default) and the pgx driver, it
// listens on the hoplock channel. With FollowWatch, or with a driver other
// than pgx, it follows the event log with hoplock_watch instead (see
// Options.Follow). Only where the server has no hoplock_watch (hoplock
// 1.1) does it poll Holder every Options.WatchPoll, and signal when the
// holder or its generation changes.
func (b *Backend) Watch(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	go func() {
		defer close(out)
		if b.opts.Follow == FollowListen && !b.followListen(ctx, out) {
			return
		}
		if errors.Is(b.followWatch(ctx, out), errNoWatch) {
			b.hook("poll", 0)
			b.pollHolder(ctx, out)
		}
	}()
	return out
}

// followListen listens, listening again after each failure, until ctx
// ends (false), or until it finds the driver is not pgx (true).
func (b *Backend) followListen(ctx context.Context, out chan<- struct{}) bool {
	retry := 50 * time.Millisecond
	for ctx.Err() == nil {
		listened, err := b.listen(ctx, out)
		if errors.Is(err, errNotPgx) {
			return true
		}
		if listened {
			retry = 50 * time.Millisecond
		}
		signal(out)
		t := time.NewTimer(retry)
		select {
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
		if retry *= 2; retry > 2*time.Second {
			retry = 2 * time.Second
		}
	}
	return false
}

func signal(out chan<- struct{}) {
	select {
	case out <- struct{}{}:
	default:
	}
}

// listen holds a connection that LISTENs until it fails or ctx ends, and
// signals out for each event of this lease. It reports whether it got as
// far as listening. The connection is closed afterwards, never returned to
// the pool.
func (b *Backend) listen(ctx context.Context, out chan<- struct{}) (bool, error) {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return false, err
	}
	defer conn.Close()
	listened := false
	var lerr error
	err = withPgx(conn, func(pc *pgx.Conn) bool {
		channel := b.opts.Channel
		if channel == "" {
			var setting sql.NullString
			if lerr = pc.QueryRow(ctx, "SELECT pg_catalog.current_setting('hoplock.channel', true)").Scan(&setting); lerr != nil {
				return true
			}
			channel = "hoplock"
			if setting.Valid && setting.String != "" {
				channel = setting.String
			}
		}
		if _, lerr = pc.Exec(ctx, "LISTEN "+quoteIdent(channel)); lerr != nil {
			return true
		}
		listened = true
		signal(out)
		for {
			n, err := pc.WaitForNotification(ctx)
			if err != nil {
				lerr = err
				return true
			}
			var ev struct {
				Name string `json:"name"`
			}
			if json.Unmarshal([]byte(n.Payload), &ev) == nil && ev.Name == b.name {
				signal(out)
			}
		}
	})
	if errors.Is(err, errNotPgx) {
		return false, err
	}
	return listened, lerr
}

// pollHolder signals out whenever the holder of the lease (owner and
// generation, or none) differs from the last read, until ctx ends.
func (b *Backend) pollHolder(ctx context.Context, out chan<- struct{}) {
	type who struct {
		owner string
		gen   int64
	}
	var last *who
	t := time.NewTicker(b.opts.WatchPoll)
	defer t.Stop()
	for {
		l, err := b.Holder(ctx)
		if err == nil {
			cur := &who{}
			if l != nil {
				cur = &who{l.Owner, l.Generation}
			}
			if last != nil && *cur != *last {
				signal(out)
			}
			last = cur
		}
		select {
		case <-t.C:
		case <-ctx.Done():
			return
		}
	}
}
