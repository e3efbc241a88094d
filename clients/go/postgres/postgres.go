// Package postgres is a hoplock.Backend for one lease in a PostgreSQL
// database that has the hoplock extension, over database/sql.
//
// Its compare-and-swap (Read, Write, Delete) is hoplock_read,
// hoplock_write and hoplock_delete. It also implements the optional
// interfaces through which an Elector does better than polling: it
// campaigns with hoplock_wait (woken by the server the moment the lease is
// free), renews with hoplock_renew(..., generation), releases with
// hoplock_release(..., generation), and hears of changes from LISTEN on
// the hoplock channel or from hoplock_watch, confirming each with
// hoplock_holder, since any role can send a NOTIFY. Every time is the
// server's: the Elector's clock decides only when it stops leading.
//
// Any driver works. With the pgx driver (github.com/jackc/pgx/v4/stdlib)
// the backend listens for notifications (or, with Options.Follow
// FollowWatch, as behind a transaction pooler such as PgBouncer, follows
// the event log with hoplock_watch); with another driver it always
// follows with hoplock_watch. A wait or a watch interrupted by its context
// is cancelled in the server. Only against hoplock 1.1, which has no
// hoplock_watch, does a driver other than pgx poll hoplock_holder instead
// (see Options.WatchPoll).
//
// Every call names the schema hoplock is installed in (Options.Schema), so
// that no function planted earlier in a search_path can capture it.
package postgres

import (
	"context"
	"database/sql"
	"database/sql/driver"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// DefaultSchema is the schema the functions are called in unless
// Options.Schema says otherwise.
const DefaultSchema = "hoplock"

// DefaultWatchWait is how long each hoplock_watch call waits unless
// Options.WatchWait says otherwise.
const DefaultWatchWait = 10 * time.Second

// Options adjust a Backend. The zero value is the default.
type Options struct {
	// Schema is where the hoplock extension is installed (default
	// "hoplock").
	Schema string

	// SessionBound makes each term begun by Wait session-bound: it also
	// ends, at once, when the connection that waited for it closes
	// (the process died, the connection was terminated). The backend
	// keeps that connection out of the pool for the term, and closes it
	// when the term ends. Without it, a term outlives its process by up
	// to its TTL.
	SessionBound bool

	// Channel is the channel the events are sent on (default: the
	// server's hoplock.channel setting, read when listening starts).
	Channel string

	// Follow is how Watch hears of changes: FollowListen (the default)
	// or FollowWatch.
	Follow Follow

	// WatchWait is how long each hoplock_watch call waits for an event
	// before it returns empty and is issued again (default 10s). Keep it
	// below any statement_timeout of the role, and any query timeout of
	// a pooler in between.
	WatchWait time.Duration

	// NoCancel leaves a wait (Wait, WaitCandidate) or a hoplock_watch
	// call that ctx ends to finish by itself in the server -- within its
	// timeout, Poll or WatchWait -- instead of cancelling it with a cancel
	// request: the call returns at once, a term such a wait still begins
	// is released, and the connection goes back to the pool when the
	// server is done. Set it behind PgBouncer 1.18 or 1.19, which can
	// crash on a cancel request whose client exits right after (README,
	// "Through PgBouncer"). A LISTEN connection (FollowListen) is closed
	// as before: use FollowWatch through a pooler.
	NoCancel bool

	// WatchPoll is how often Watch reads the holder when it can neither
	// LISTEN nor call hoplock_watch: a driver other than pgx, or
	// FollowWatch, against hoplock 1.1; and, for WatchWait at a time,
	// a server that is a standby (default 1s).
	WatchPoll time.Duration
}

// Follow says how a Backend's Watch follows the events of the lease.
type Follow int

const (
	// FollowListen listens on the hoplock channel (LISTEN) on a
	// connection of its own, held open, and listens again after losing
	// it. It needs the pgx driver; with any other driver the backend
	// follows with hoplock_watch, as with FollowWatch.
	FollowListen Follow = iota

	// FollowWatch follows the event log with hoplock_watch: it starts
	// from hoplock_position(), then calls hoplock_watch(after,
	// WatchWait) in a loop, each call one statement on any connection of
	// the pool, from the number of the last event it got (a number
	// seen before is dropped). So it works where LISTEN cannot: through
	// a transaction pooler such as PgBouncer in transaction mode, and
	// with any driver. When the server no longer keeps the events after
	// that number (HL001), it starts again from hoplock_position() and
	// signals, so that the Elector reads the lease again.
	FollowWatch
)

func (f Follow) String() string {
	switch f {
	case FollowListen:
		return "FollowListen"
	case FollowWatch:
		return "FollowWatch"
	}
	return "Follow(" + strconv.Itoa(int(f)) + ")"
}

// Backend is one lease, named when it is made, in the database of a
// *sql.DB. Its methods are safe for concurrent use; a session-bound
// Backend serves one Elector.
//
// An Elector on it uses up to three connections of the pool at once: one
// to listen or watch, one waiting for the lease (kept for the term when
// session bound), one for the other calls. A pool limited below that
// stalls it.
type Backend struct {
	db   *sql.DB
	name string
	opts Options
	q    queries
	q12  queries // the same for hoplock 1.2 and later: with values, step-down

	features struct {
		sync.Mutex
		known   bool
		v12     bool // hoplock_handoff, hoplock_proclaim, ranked candidates
		minHold bool // hoplock_wait(..., min_hold, slots) of 1.2
	}

	mu     sync.Mutex
	pinned map[int64]*sql.Conn // session-bound terms' connections

	// abandoned: per owner, the waits left to end by themselves
	// (Options.NoCancel) not over yet (nocancel.go)
	abandonedMu sync.Mutex
	abandoned   map[string]*abandonedWaits

	// watchHook, if set (by the tests), is told of each step of
	// following the events (see followWatch).
	watchHook func(step string, n int64)

	// stepDownHook, if set (by the tests), is told of each read of
	// step_down_to, with the generation and what it read.
	stepDownHook func(generation int64, to string, err error)
}

var (
	_ hoplock.Backend      = (*Backend)(nil)
	_ hoplock.Waiter       = (*Backend)(nil)
	_ hoplock.Renewer      = (*Backend)(nil)
	_ hoplock.Releaser     = (*Backend)(nil)
	_ hoplock.HolderReader = (*Backend)(nil)
	_ hoplock.Watcher      = (*Backend)(nil)

	_ hoplock.CandidateWaiter = (*Backend)(nil)
	_ hoplock.Proclaimer      = (*Backend)(nil)
	_ hoplock.HandOffer       = (*Backend)(nil)
)

// New returns the Backend of the lease name in db's database.
func New(db *sql.DB, name string, opts Options) *Backend {
	if opts.Schema == "" {
		opts.Schema = DefaultSchema
	}
	if opts.WatchPoll <= 0 {
		opts.WatchPoll = time.Second
	}
	if opts.WatchWait <= 0 {
		opts.WatchWait = DefaultWatchWait
	}
	return &Backend{db: db, name: name, opts: opts, q: newQueries(quoteIdent(opts.Schema), false),
		q12: newQueries(quoteIdent(opts.Schema), true), pinned: map[int64]*sql.Conn{}}
}

// Name returns the lease's name.
func (b *Backend) Name() string { return b.name }

// Schema returns the schema the functions are called in.
func (b *Backend) Schema() string { return b.opts.Schema }

// queries are the statements, with the schema quoted in.
type queries struct {
	read, write, delete, wait, renew, release, releaseAny, holder, fence string
	position, watch                                                      string
	waitCandidate, proclaim, handoff, hasV12, stepDownTo                 string
	waitHold, waitSlots                                                  string
}

// The columns of a hoplock_lease that scanLease reads: hoplock 1.1's, then
// the value and the step-down request of 1.2 (constants before 1.2).
const (
	leaseColumns11 = "l.owner, l.generation, l.handle, l.acquired_at, l.expires_at, NULL::text, false"
	leaseColumns12 = "l.owner, l.generation, l.handle, l.acquired_at, l.expires_at, l.value, l.step_down"
)

// newQueries qualifies every function with the schema and casts every
// argument to its parameter's exact type, so that no overload planted next
// to hoplock's (say hoplock_wait(text, text, text, text, boolean)) can
// match a call better than hoplock's own.
func newQueries(schema string, v12 bool) queries {
	f := func(format string) string { return fmt.Sprintf(format, schema) }
	leaseColumns := leaseColumns11
	if v12 {
		leaseColumns = leaseColumns12
	}
	return queries{
		read:       f("SELECT " + leaseColumns + " FROM %s.hoplock_read($1::text) AS l"),
		write:      f("SELECT " + leaseColumns + " FROM %s.hoplock_write($1::text, $2::text, $3::text, $4::interval) AS l"),
		delete:     f("SELECT %s.hoplock_delete($1::text, $2::text)"),
		wait:       f("SELECT " + leaseColumns + " FROM %s.hoplock_wait($1::text, $2::text, $3::interval, $4::interval, $5::boolean) AS l"),
		renew:      f("SELECT " + leaseColumns + " FROM %s.hoplock_renew($1::text, $2::text, $3::interval, $4::bigint) AS l"),
		release:    f("SELECT %s.hoplock_release($1::text, $2::text, $3::bigint)"),
		releaseAny: f("SELECT %s.hoplock_release($1::text, $2::text)"),
		holder:     f("SELECT " + leaseColumns + " FROM %s.hoplock_holder($1::text) AS l"),
		fence:      f("SELECT %s.hoplock_fence($1::text, $2::bigint)"),
		position:   f("SELECT %s.hoplock_position()"),
		watch:      f("SELECT w.seq, w.name FROM %s.hoplock_watch($1::bigint, $2::interval) AS w"),

		waitCandidate: f("SELECT " + leaseColumns + " FROM %s.hoplock_wait($1::text, $2::text, $3::interval, $4::interval, $5::boolean, $6::integer, $7::text) AS l"),
		waitHold:      f("SELECT " + leaseColumns + " FROM %s.hoplock_wait($1::text, $2::text, $3::interval, $4::interval, $5::boolean, $6::integer, $7::text, false, $8::interval) AS l"),
		waitSlots:     f("SELECT " + leaseColumns + " FROM %s.hoplock_wait($1::text, $2::text, $3::interval, $4::interval, $5::boolean, $6::integer, $7::text, false, $8::interval, $9::integer) AS l"),
		proclaim:      f("SELECT %s.hoplock_proclaim($1::text, $2::text, $3::bigint, $4::text)"),
		handoff:       f("SELECT " + leaseColumns + " FROM %s.hoplock_handoff($1::text, $2::text, $3::bigint, $4::text) AS l"),
		hasV12:        "SELECT pg_catalog.to_regprocedure($1::text) IS NOT NULL",
		stepDownTo:    f("SELECT v.step_down_to FROM %s.hoplock_leases AS v WHERE v.name OPERATOR(pg_catalog.=) $1::text AND v.generation OPERATOR(pg_catalog.=) $2::bigint"),
	}
}

// checkConnection has the server notice, while a wait sleeps, that its
// client has gone (PostgreSQL 14 and later), so that an abandoned wait
// cannot begin a term nobody will renew.
const checkConnection = "SELECT pg_catalog.set_config('client_connection_check_interval', '1000', false) " +
	"WHERE pg_catalog.current_setting('client_connection_check_interval', true) IS NOT NULL"

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

func interval(d time.Duration) string {
	us := d.Microseconds()
	if us < 1 {
		us = 1
	}
	return strconv.FormatInt(us, 10) + " microseconds"
}

type scanner interface{ Scan(dest ...any) error }

// scanLease reads a hoplock_lease row; a NULL lease is (nil, nil).
func scanLease(row scanner) (*hoplock.Lease, error) {
	var (
		owner, handle, value sql.NullString
		gen                  sql.NullInt64
		acquired, expiresAt  sql.NullTime
		stepDown             sql.NullBool
	)
	if err := row.Scan(&owner, &gen, &handle, &acquired, &expiresAt, &value, &stepDown); err != nil {
		return nil, err
	}
	if !gen.Valid {
		return nil, nil
	}
	return &hoplock.Lease{
		Handle:     handle.String,
		State:      hoplock.State{Owner: owner.String, Generation: gen.Int64, ExpiresAt: expiresAt.Time},
		AcquiredAt: acquired.Time,
		Value:      value.String,
		StepDown:   stepDown.Bool,
	}, nil
}

// v12 reports whether the server's hoplock has what 1.2 brought
// (hoplock_handoff, hoplock_proclaim, ranked candidates with values),
// asked once (by the presence of hoplock_handoff in the schema) and
// remembered.
func (b *Backend) v12(ctx context.Context) (bool, error) {
	v12, _, err := b.detect(ctx)
	return v12, err
}

// hasMinHold reports whether the server's hoplock_wait takes min_hold
// (hoplock 1.2), asked once (by the presence of its signature) and
// remembered.
func (b *Backend) hasMinHold(ctx context.Context) (bool, error) {
	_, minHold, err := b.detect(ctx)
	return minHold, err
}

func (b *Backend) detect(ctx context.Context) (v12, minHold bool, err error) {
	b.features.Lock()
	defer b.features.Unlock()
	if b.features.known {
		return b.features.v12, b.features.minHold, nil
	}
	schema := quoteIdent(b.opts.Schema)
	for _, f := range []struct {
		fn string
		ok *bool
	}{
		{schema + ".hoplock_handoff(text,text,bigint,text)", &v12},
		{schema + ".hoplock_wait(text,text,interval,interval,boolean,integer,text,boolean,interval,integer)", &minHold},
	} {
		if err := b.db.QueryRowContext(ctx, b.q.hasV12, f.fn).Scan(f.ok); err != nil {
			return false, false, classify("to_regprocedure", err)
		}
	}
	b.features.known, b.features.v12, b.features.minHold = true, v12, minHold
	return v12, minHold, nil
}

// queries returns the statements for the server's version of hoplock.
func (b *Backend) queries(ctx context.Context) (*queries, error) {
	v12, err := b.v12(ctx)
	if err != nil {
		return nil, err
	}
	if v12 {
		return &b.q12, nil
	}
	return &b.q, nil
}

// Read returns the stored state, expired or not, and its handle
// (hoplock_read); with nothing stored, (nil, "", nil).
func (b *Backend) Read(ctx context.Context) (*hoplock.State, string, error) {
	l, err := scanLease(b.db.QueryRowContext(ctx, b.q.read, b.name))
	if err != nil {
		return nil, "", classify("hoplock_read", err)
	}
	if l == nil {
		return nil, "", nil
	}
	return &l.State, l.Handle, nil
}

// Write stores s.Owner for s.TTL() from now, by the server's clock, if
// prevHandle is current (hoplock_write). The server decides the
// generation (a new one unless the same owner continues a running term)
// and the expiry, and Write copies both into s.
func (b *Backend) Write(ctx context.Context, prevHandle string, s *hoplock.State) (string, error) {
	ttl := time.Until(s.ExpiresAt)
	if ttl <= 0 {
		return "", hoplock.Permanent(fmt.Errorf("hoplock/postgres: Write of a state that expired at %v", s.ExpiresAt))
	}
	var prev sql.NullString
	if prevHandle != "" {
		prev = sql.NullString{String: prevHandle, Valid: true}
	}
	if err := b.awaitAbandoned(ctx, s.Owner); err != nil {
		return "", err
	}
	l, err := scanLease(b.db.QueryRowContext(ctx, b.q.write, b.name, prev, s.Owner, interval(ttl)))
	if err != nil {
		return "", classify("hoplock_write", err)
	}
	if l == nil {
		return "", hoplock.ErrLeaseHeld
	}
	s.Generation, s.ExpiresAt = l.Generation, l.ExpiresAt
	return l.Handle, nil
}

// Delete ends the term if handle is current (hoplock_delete).
func (b *Backend) Delete(ctx context.Context, handle string) error {
	var ok bool
	if err := b.db.QueryRowContext(ctx, b.q.delete, b.name, handle).Scan(&ok); err != nil {
		return classify("hoplock_delete", err)
	}
	if ok {
		return nil
	}
	s, _, err := b.Read(ctx)
	switch {
	case err != nil:
		return err
	case s == nil:
		return hoplock.ErrNoLease
	}
	return hoplock.ErrLeaseHeld
}

// Wait returns a term for owner as soon as the lease can be had, or (nil,
// nil) after timeout (hoplock_wait). It waits on a connection of its own;
// when ctx ends first, the wait is cancelled in the server.
func (b *Backend) Wait(ctx context.Context, owner string, ttl, timeout time.Duration) (*hoplock.Lease, error) {
	return b.wait(ctx, owner, timeout, b.q.wait, b.name, owner, interval(ttl), interval(timeout), b.opts.SessionBound)
}

// WaitCandidate is Wait as a candidate of priority cand.Priority, whose
// term begins with the value cand.Value and, if cand.MinHold is set, is
// held at least that long (hoplock_wait(..., priority, value, min_hold)),
// in one of cand.Slots slots if above 1 (slots => N); against hoplock 1.1
// it is Wait. A MinHold or Slots the server's hoplock_wait cannot take
// (before 1.2) is an error marked Permanent that wraps
// hoplock.ErrUnsupported, never ignored.
func (b *Backend) WaitCandidate(ctx context.Context, owner string, ttl, timeout time.Duration, cand hoplock.Candidate) (*hoplock.Lease, error) {
	v12, minHold, err := b.detect(ctx)
	if err != nil {
		return nil, err
	}
	if cand.MinHold > 0 && !minHold {
		return nil, hoplock.Permanent(fmt.Errorf("hoplock/postgres: MinHold needs hoplock 1.2 or later: %s.hoplock_wait has no min_hold: %w",
			quoteIdent(b.opts.Schema), hoplock.ErrUnsupported))
	}
	if cand.Slots > 1 && !minHold {
		return nil, hoplock.Permanent(fmt.Errorf("hoplock/postgres: Slots needs hoplock 1.2 or later: %s.hoplock_wait has no slots: %w",
			quoteIdent(b.opts.Schema), hoplock.ErrUnsupported))
	}
	if !v12 {
		return b.Wait(ctx, owner, ttl, timeout)
	}
	var value sql.NullString
	if cand.Value != "" {
		value = sql.NullString{String: cand.Value, Valid: true}
	}
	if cand.Slots > 1 {
		var hold sql.NullString
		if cand.MinHold > 0 {
			hold = sql.NullString{String: interval(cand.MinHold), Valid: true}
		}
		return b.wait(ctx, owner, timeout, b.q12.waitSlots, b.name, owner, interval(ttl), interval(timeout), b.opts.SessionBound,
			cand.Priority, value, hold, cand.Slots)
	}
	if cand.MinHold > 0 {
		return b.wait(ctx, owner, timeout, b.q12.waitHold, b.name, owner, interval(ttl), interval(timeout), b.opts.SessionBound,
			cand.Priority, value, interval(cand.MinHold))
	}
	return b.wait(ctx, owner, timeout, b.q12.waitCandidate, b.name, owner, interval(ttl), interval(timeout), b.opts.SessionBound, cand.Priority, value)
}

// wait runs a hoplock_wait query for owner that waits up to timeout.
func (b *Backend) wait(ctx context.Context, owner string, timeout time.Duration, query string, args ...any) (*hoplock.Lease, error) {
	if err := b.awaitAbandoned(ctx, owner); err != nil {
		return nil, err
	}
	if b.opts.NoCancel {
		return b.waitUncancelled(ctx, owner, timeout, query, args...)
	}
	return b.waitOn(ctx, query, args...)
}

// waitOn runs a hoplock_wait query on a connection of its own, cancelled
// in the server when ctx ends first.
func (b *Backend) waitOn(ctx context.Context, query string, args ...any) (*hoplock.Lease, error) {
	conn, err := b.db.Conn(ctx)
	if err != nil {
		return nil, classify("hoplock_wait", err)
	}
	keep := false
	defer func() {
		if !keep {
			conn.Close()
		}
	}()
	if _, err := conn.ExecContext(ctx, checkConnection); err != nil {
		return nil, classify("hoplock_wait", err)
	}
	l, err := queryCancellable(ctx, conn, query, args...)
	if err != nil {
		return nil, classify("hoplock_wait", err)
	}
	if l != nil && b.opts.SessionBound {
		b.mu.Lock()
		if old := b.pinned[l.Generation]; old != nil && old != conn {
			discard(old)
		}
		b.pinned[l.Generation] = conn
		b.mu.Unlock()
		keep = true
	}
	return l, nil
}

// Renew extends owner's term generation by ttl from now, by the server's
// clock (hoplock_renew); ErrNoLease if the term is over.
//
// A renewal that reports a step-down request (StepDown) is followed by one
// more query, for the owner the request named: step_down_to in
// hoplock_leases, into StepDownTo ("" for any candidate). Should that
// query fail with a transient error, Renew returns the error, and the
// renewal is tried again (the request stays on the term); with any other
// error, StepDownTo is left "".
func (b *Backend) Renew(ctx context.Context, owner string, ttl time.Duration, generation int64) (*hoplock.Lease, error) {
	q, err := b.queries(ctx)
	if err != nil {
		return nil, err
	}
	l, err := scanLease(b.db.QueryRowContext(ctx, q.renew, b.name, owner, interval(ttl), generation))
	if err != nil {
		return nil, classify("hoplock_renew", err)
	}
	if l == nil {
		b.unpin(generation)
		return nil, hoplock.ErrNoLease
	}
	if l.StepDown {
		var to sql.NullString
		err := b.db.QueryRowContext(ctx, b.q12.stepDownTo, b.name, generation).Scan(&to)
		if b.stepDownHook != nil {
			b.stepDownHook(generation, to.String, err)
		}
		switch err = classify("hoplock_leases", err); {
		case err == nil, errors.Is(err, sql.ErrNoRows):
			// no row: the term ended meanwhile; the handoff will
			// find it over
			l.StepDownTo = to.String
		case !hoplock.IsPermanent(err):
			return nil, err
		}
	}
	return l, nil
}

// Release ends owner's term generation, or any term of owner's with
// generation 0 (hoplock_release); ErrNoLease if there was none. It also
// closes the connection a session-bound term was bound to, which ends the
// term even if the release itself failed.
//
// A release the server refuses while the term is still owner's was held up
// for a moment -- by a fenced transaction of the owner's own that is still
// rolling back on another connection (its context was cancelled), or a
// renewal in flight -- and is tried again, until ctx ends.
func (b *Backend) Release(ctx context.Context, owner string, generation int64) error {
	defer b.unpin(generation)
	pause := time.Millisecond
	for {
		var (
			ok  bool
			err error
		)
		if generation == 0 {
			err = b.db.QueryRowContext(ctx, b.q.releaseAny, b.name, owner).Scan(&ok)
		} else {
			err = b.db.QueryRowContext(ctx, b.q.release, b.name, owner, generation).Scan(&ok)
		}
		switch {
		case err != nil:
			return classify("hoplock_release", err)
		case ok:
			return nil
		}
		h, err := b.Holder(ctx)
		if err != nil {
			return err
		}
		if h == nil || h.Owner != owner || (generation != 0 && h.Generation != generation) {
			return hoplock.ErrNoLease
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(pause):
		}
		if pause < 20*time.Millisecond {
			pause *= 2
		}
	}
}

// Holder returns the running term by the server's clock, or nil if the
// lease is free (hoplock_holder).
func (b *Backend) Holder(ctx context.Context) (*hoplock.Lease, error) {
	q, err := b.queries(ctx)
	if err != nil {
		return nil, err
	}
	l, err := scanLease(b.db.QueryRowContext(ctx, q.holder, b.name))
	if err != nil {
		return nil, classify("hoplock_holder", err)
	}
	return l, nil
}

// Proclaim publishes value for owner's term generation, "" clearing it
// (hoplock_proclaim): hoplock_holder returns it, and a proclaimed event
// announces it. ErrNoLease if the term is over or not owner's;
// hoplock.ErrUnsupported against hoplock 1.1.
func (b *Backend) Proclaim(ctx context.Context, owner string, generation int64, value string) error {
	v12, err := b.v12(ctx)
	if err != nil {
		return err
	}
	if !v12 {
		return hoplock.ErrUnsupported
	}
	var v sql.NullString
	if value != "" {
		v = sql.NullString{String: value, Valid: true}
	}
	var ok bool
	if err := b.db.QueryRowContext(ctx, b.q12.proclaim, b.name, owner, generation, v).Scan(&ok); err != nil {
		return classify("hoplock_proclaim", err)
	}
	if !ok {
		return hoplock.ErrNoLease
	}
	return nil
}

// Handoff ends owner's term generation and begins the next for the
// candidate waiting in hoplock_wait as owner to (to "": the first, by
// priority then arrival), in one transaction (hoplock_handoff); it returns
// the new term, or (nil, nil) when there is no such candidate or the term
// is not owner's, the term going on. hoplock.ErrUnsupported against
// hoplock 1.1. A session-bound term's connection is closed once the term
// is handed over.
func (b *Backend) Handoff(ctx context.Context, owner string, generation int64, to string) (*hoplock.Lease, error) {
	v12, err := b.v12(ctx)
	if err != nil {
		return nil, err
	}
	if !v12 {
		return nil, hoplock.ErrUnsupported
	}
	var toOwner sql.NullString
	if to != "" {
		toOwner = sql.NullString{String: to, Valid: true}
	}
	l, err := scanLease(b.db.QueryRowContext(ctx, b.q12.handoff, b.name, owner, generation, toOwner))
	if err != nil {
		return nil, classify("hoplock_handoff", err)
	}
	if l != nil {
		b.unpin(generation)
	}
	return l, nil
}

// Execer runs a statement: a *sql.Tx, or a *sql.Conn inside a
// transaction.
type Execer interface {
	ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error)
}

// Fence makes the rest of tx's transaction safe from a stale leader
// (hoplock_fence): it fails unless term generation holds the lease now,
// and if it succeeds no new term can begin until the transaction ends.
// Call it first in each transaction that writes on the leader's behalf,
// with the Generation of the Lease the Elector gave. A failure because
// another term holds the lease (SQLSTATE 55P03) satisfies
// errors.Is(err, hoplock.ErrLeaseHeld); the transaction has then failed
// and must be rolled back.
func (b *Backend) Fence(ctx context.Context, tx Execer, generation int64) error {
	if _, err := tx.ExecContext(ctx, b.q.fence, b.name, generation); err != nil {
		if SQLState(err) == "55P03" {
			return fenceError{err}
		}
		return fmt.Errorf("hoplock/postgres: hoplock_fence: %w", err)
	}
	return nil
}

type fenceError struct{ err error }

func (e fenceError) Error() string {
	return "hoplock/postgres: fenced out: " + e.err.Error()
}
func (e fenceError) Unwrap() error        { return e.err }
func (e fenceError) Is(target error) bool { return target == hoplock.ErrLeaseHeld }

// unpin closes the connection a session-bound term generation was bound
// to (all of them for generation 0).
func (b *Backend) unpin(generation int64) {
	b.mu.Lock()
	var conns []*sql.Conn
	for g, c := range b.pinned {
		if generation == 0 || g == generation {
			conns = append(conns, c)
			delete(b.pinned, g)
		}
	}
	b.mu.Unlock()
	for _, c := range conns {
		discard(c)
	}
}

// discard closes c's connection rather than return it to the pool.
func discard(c *sql.Conn) {
	_ = c.Raw(func(any) error { return driver.ErrBadConn })
	c.Close()
}

// SQLState returns the SQLSTATE of a server error err wraps (with the pgx
// or the pq driver, or any whose errors have a SQLState method), or "".
func SQLState(err error) string {
	var s interface{ SQLState() string }
	if errors.As(err, &s) {
		return s.SQLState()
	}
	return ""
}

// Transient reports whether SQLSTATE code is worth retrying: a lost
// connection (class 08), a serialization failure or deadlock (40), the
// server short of resources (53, but for configuration limits), a
// cancelled statement or a server shutting down (57), a system error
// (58), a lease table busy with maintenance (55P03), a read-only server
// (25006, as during a failover).
func Transient(code string) bool {
	switch {
	case code == "55P03", code == "25006":
		return true
	case code == "53400":
		return false
	case len(code) == 5:
		switch code[:2] {
		case "08", "40", "53", "57", "58":
			return true
		}
	}
	return false
}

// classify wraps a call's error; a server error that retrying cannot
// cure (bad arguments, a missing function or privilege, the extension
// not installed) is marked with hoplock.Permanent. Errors without a
// SQLSTATE (a lost connection, a timeout) are transient.
func classify(fn string, err error) error {
	if err == nil {
		return nil
	}
	wrapped := fmt.Errorf("hoplock/postgres: %s: %w", fn, err)
	if code := SQLState(err); code != "" && !Transient(code) {
		return hoplock.Permanent(wrapped)
	}
	return wrapped
}
