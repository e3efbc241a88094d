package postgres_test

import (
	"bytes"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"math"
	"net"
	"os"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/stdlib"
	_ "github.com/lib/pq"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

// The tests run against the server HOPLOCK_TEST_DSN names (a libpq
// keyword/value string that both drivers read), with hoplock installed in
// HOPLOCK_TEST_SCHEMA (default hoplock). scripts/test-go starts a scratch
// server and sets both.
func testDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("HOPLOCK_TEST_DSN")
	if dsn == "" {
		t.Skip("HOPLOCK_TEST_DSN is not set (scripts/test-go sets it)")
	}
	return dsn
}

func testSchema() string {
	if s := os.Getenv("HOPLOCK_TEST_SCHEMA"); s != "" {
		return s
	}
	return postgres.DefaultSchema
}

// node is one process's connection pool (pgx driver), whose network can be
// cut: while cut, it cannot connect, and drop closes the connections it
// has from its side.
type node struct {
	db    *sql.DB
	app   string
	cut   atomic.Bool
	mu    sync.Mutex
	conns []net.Conn
}

func openNode(t *testing.T, app string) *node {
	t.Helper()
	cfg, err := pgx.ParseConfig(testDSN(t))
	if err != nil {
		t.Fatal(err)
	}
	n := &node{app: app}
	cfg.RuntimeParams["application_name"] = app
	var d net.Dialer
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		if n.cut.Load() {
			return nil, errors.New("network unreachable (cut by the test)")
		}
		c, err := d.DialContext(ctx, network, addr)
		if err == nil {
			n.mu.Lock()
			n.conns = append(n.conns, c)
			n.mu.Unlock()
		}
		return c, err
	}
	n.db = stdlib.OpenDB(*cfg)
	t.Cleanup(func() { n.db.Close() })
	return n
}

// drop closes, from the client's side, every connection the node has.
func (n *node) drop() {
	n.mu.Lock()
	defer n.mu.Unlock()
	for _, c := range n.conns {
		c.Close()
	}
	n.conns = nil
}

func openPq(t *testing.T, app string) *sql.DB {
	t.Helper()
	db, err := sql.Open("postgres", testDSN(t)+" application_name="+app)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

var admin struct {
	once sync.Once
	db   *sql.DB
}

// adminDB is a superuser's pool, for looking at and meddling with the
// server.
func adminDB(t *testing.T) *sql.DB {
	t.Helper()
	dsn := testDSN(t)
	admin.once.Do(func() {
		db, err := sql.Open("pgx", dsn+" application_name=hoplock-test-admin")
		if err != nil {
			panic(err)
		}
		admin.db = db
	})
	return admin.db
}

func adminExec(t *testing.T, query string, args ...any) {
	t.Helper()
	if _, err := adminDB(t).Exec(query, args...); err != nil {
		t.Fatalf("%s: %v", query, err)
	}
}

// q puts the schema into a query's %s.
func q(query string) string {
	return strings.ReplaceAll(query, "%s", `"`+testSchema()+`"`)
}

var names atomic.Int64

// leaseName returns a name no other test uses.
func leaseName(t *testing.T) string {
	return fmt.Sprintf("%s/%d-%d", t.Name(), time.Now().UnixNano(), names.Add(1))
}

// terminate ends, in the server, every session of application app but
// those that merely wait, and reports how many.
func terminate(t *testing.T, app string) int {
	t.Helper()
	var n int
	err := adminDB(t).QueryRow(`SELECT count(pg_catalog.pg_terminate_backend(pid))
		FROM pg_catalog.pg_stat_activity WHERE application_name = $1`, app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// holder returns the running term of name by the server's clock.
func holder(t *testing.T, name string) (owner string, gen int64, ok bool) {
	t.Helper()
	var o sql.NullString
	var g sql.NullInt64
	err := adminDB(t).QueryRow(q(`SELECT l.owner, l.generation FROM %s.hoplock_holder($1) AS l`), name).Scan(&o, &g)
	if err != nil {
		t.Fatal(err)
	}
	return o.String, g.Int64, g.Valid
}

// serverNow reads the server's clock.
func serverNow(ctx context.Context, db *sql.DB) (time.Time, error) {
	var now time.Time
	err := db.QueryRowContext(ctx, "SELECT pg_catalog.clock_timestamp()").Scan(&now)
	return now, err
}

// termEnd returns when term gen of name ended, and how, from the history.
func termEnd(t *testing.T, name string, gen int64) (time.Time, string) {
	t.Helper()
	var (
		at  sql.NullTime
		how sql.NullString
	)
	err := adminDB(t).QueryRow(q(`SELECT ended_at, how FROM %s.hoplock_history WHERE name = $1 AND generation = $2`), name, gen).Scan(&at, &how)
	if err != nil {
		t.Fatalf("history of %s generation %d: %v", name, gen, err)
	}
	return at.Time, how.String
}

func elector(b hoplock.Backend, owner string, ttl time.Duration) *hoplock.Elector {
	return &hoplock.Elector{Backend: b, Owner: owner, TTL: ttl}
}

// leader is an Elector's Lead running in the background, its fn waiting
// for stop or for its context to end.
type leader struct {
	owner   string
	started chan startInfo
	stop    chan struct{}
	lost    chan lostInfo
	done    chan error
	// returned is when Lead returned, set before its result is sent on
	// done.
	returned time.Time
}

type startInfo struct {
	ctx   context.Context
	lease hoplock.Lease
	at    time.Time // local clock
}

type lostInfo struct {
	at       time.Time // local clock, when fn saw its context end
	serverAt time.Time // the server's clock, read right after (if observed)
	cause    error
}

// campaign starts e.Lead in the background; when fn starts, onStart runs
// (reading the server's clock, say). When fn's context ends, the server's
// clock is read through observer, if not nil.
func campaign(ctx context.Context, e *hoplock.Elector, onStart func(context.Context, hoplock.Lease), observer ...*sql.DB) *leader {
	l := &leader{
		owner:   e.Owner,
		started: make(chan startInfo, 1),
		stop:    make(chan struct{}),
		lost:    make(chan lostInfo, 1),
		done:    make(chan error, 1),
	}
	go func() {
		var err error
		defer func() {
			l.returned = time.Now()
			l.done <- err
		}()
		err = e.Lead(ctx, func(ctx context.Context, lease hoplock.Lease) error {
			at := time.Now()
			if onStart != nil {
				onStart(ctx, lease)
			}
			l.started <- startInfo{ctx, lease, at}
			select {
			case <-ctx.Done():
				li := lostInfo{at: time.Now(), cause: hoplock.LossCause(ctx)}
				if len(observer) > 0 {
					rctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
					li.serverAt, _ = serverNow(rctx, observer[0])
					cancel()
				}
				l.lost <- li
				return ctx.Err()
			case <-l.stop:
				return nil
			}
		})
	}()
	return l
}

func (l *leader) waitStarted(t *testing.T, within time.Duration) startInfo {
	t.Helper()
	select {
	case s := <-l.started:
		return s
	case err := <-l.done:
		t.Fatalf("%s: Lead returned %v before leading", l.owner, err)
	case <-time.After(within):
		t.Fatalf("%s: not leading within %v", l.owner, within)
	}
	panic("unreachable")
}

func (l *leader) notStarted(t *testing.T, for_ time.Duration) {
	t.Helper()
	select {
	case s := <-l.started:
		t.Fatalf("%s leads (generation %d) while it should not", l.owner, s.lease.Generation)
	case <-time.After(for_):
	}
}

func (l *leader) waitLost(t *testing.T, within time.Duration) lostInfo {
	t.Helper()
	select {
	case s := <-l.lost:
		return s
	case <-time.After(within):
		t.Fatalf("%s: still leading after %v", l.owner, within)
	}
	panic("unreachable")
}

// durations summarises measurements.
type durations []time.Duration

func (d durations) percentile(p float64) time.Duration {
	s := append(durations(nil), d...)
	sort.Slice(s, func(i, j int) bool { return s[i] < s[j] })
	// nearest rank
	i := int(math.Ceil(p*float64(len(s)))) - 1
	if i < 0 {
		i = 0
	}
	return s[i]
}

func (d durations) String() string {
	return fmt.Sprintf("p50 %v, p99 %v, max %v (n=%d)",
		d.percentile(0.5).Round(10*time.Microsecond), d.percentile(0.99).Round(10*time.Microsecond),
		d.percentile(1).Round(10*time.Microsecond), len(d))
}

// syncBuffer is a bytes.Buffer safe for concurrent use, for logs.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
