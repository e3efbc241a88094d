package postgres_test

// Electors in processes of their own, stopped (SIGTERM), killed (SIGKILL),
// stalled (SIGSTOP), cut off (pg_terminate_backend, connections refused)
// and left without a server (restart, crash), with a history checker
// (historycheck_test.go). The test binary runs itself as the child process
// (HOPLOCK_TEST_CHILD set); the child leads through an Elector, and in its
// fn checks its context, logs the moment it found itself still leading,
// and writes a row fenced with the term's generation, every few
// milliseconds. Each line it prints carries the local wall clock (the
// children run on this machine, so the clocks are one) or the server's.

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/stdlib"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

func TestMain(m *testing.M) {
	if os.Getenv("HOPLOCK_TEST_CHILD") != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain leads lease HOPLOCK_TEST_CHILD as owner HOPLOCK_TEST_OWNER,
// campaigning again after each loss, until SIGTERM. Lines printed (WALL:
// the local wall clock, SERVER: the server's clock_timestamp(), both in
// Unix nanoseconds):
//
//	start GEN WALL            fn began
//	first GEN BEGAN WROTE WAITED OUTCOME
//	                          with HOPLOCK_TEST_FENCED (rows of the lease in
//	                          proc_writes are fenced by a hoplock_fenced
//	                          trigger): fn's first act, one INSERT of a row
//	                          fenced with GEN, committed at WROTE (OUTCOME
//	                          "committed", or its SQLSTATE); fn began at
//	                          BEGAN, the Elector's Wait returned the term at
//	                          WAITED (0 if the term did not come from Wait)
//	clock GEN SERVER          the server's clock at fn's start, read in a
//	                          transaction fenced with GEN that committed
//	ok GEN WALL               fn checked its context: still leading
//	write GEN WALL SERVER ID  a fenced row committed (SERVER: when it was
//	                          inserted)
//	end GEN WALL KIND CAUSE   fn found its context done; KIND: what
//	                          LossCause says -- held (ErrLeaseHeld), gone
//	                          (ErrNoLease), expired (ErrLeaseExpired: no
//	                          renewal in time), none (the parent context
//	                          ended), other --, CAUSE its text
//	stale GEN OUTCOME         a write with the lost term's generation, after
//	                          the loss: its SQLSTATE ("committed" if it was)
//	fenced GEN WALL           after SIGUSR1: inside a transaction fenced
//	                          with GEN, waiting for SIGCONT to go on
//	returned GEN WALL         Lead returned, after the term GEN: handed
//	                          over or released
//	dial WALL                 a new connection to the server was opened
//
// fn finishes a write it has begun when its context ends for a graceful
// stop (the parent context cancelled, or a step-down requested): its term
// still holds the lease, and the write is fenced; it abandons the write
// when the term was lost. (Cancelling a statement in flight is slow: pgx
// sends a cancel request on a new connection and closes the connection,
// and the rollback holds the term's fence until the server has seen the
// cancel, which a handoff cannot wait for.)
//
// With HOPLOCK_TEST_HANDOVER=release the Elector's backend is not a
// hoplock.HandOffer: a graceful stop releases the term, and a follower
// waiting in hoplock_wait takes the freed lease (the handover before
// hoplock 1.2); otherwise the Elector hands the term over. With
// HOPLOCK_TEST_WARM=N its pool is warm before it campaigns (warmUp).
// HOPLOCK_TEST_LINGER=DURATION sets its HandoffLinger (negative: none).
// HOPLOCK_TEST_NO_CANCEL sets the backend's Options.NoCancel.
// HOPLOCK_TEST_TABLE names the table it writes to (default proc_writes).
// Diagnostics, to take the stopped leader's own teardown out of a
// handover: HOPLOCK_TEST_EXIT_LATE=DURATION holds the process's exit (and
// the closing of its pool) back that long after Lead returned, and
// HOPLOCK_TEST_LISTEN_LATE keeps the Elector's LISTEN connection open until
// then (the Elector drops it when Lead's context ends).
func childMain() int {
	name := os.Getenv("HOPLOCK_TEST_CHILD")
	owner := os.Getenv("HOPLOCK_TEST_OWNER")
	ttl, err := time.ParseDuration(os.Getenv("HOPLOCK_TEST_TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "HOPLOCK_TEST_TTL:", err)
		return 2
	}
	dsn := os.Getenv("HOPLOCK_TEST_DSN")
	if d := os.Getenv("HOPLOCK_TEST_CHILD_DSN"); d != "" {
		dsn = d
	}
	dsn += " application_name=" + owner
	// HOPLOCK_TEST_POOLED: behind a transaction pooler (PgBouncer), as
	// the README's "Through PgBouncer" says: the simple protocol, and the
	// events followed with hoplock_watch
	pooled := os.Getenv("HOPLOCK_TEST_POOLED") != ""
	if pooled {
		dsn += " prefer_simple_protocol=true"
	}
	if user := os.Getenv("HOPLOCK_TEST_USER"); user != "" {
		dsn += " user=" + user
	}
	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	wall := func() int64 { return time.Now().UnixNano() }

	cfg, err := pgx.ParseConfig(dsn)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	dial := cfg.DialFunc
	cfg.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
		say("dial %d", wall())
		return dial(ctx, network, addr)
	}
	db := stdlib.OpenDB(*cfg)
	defer db.Close()
	b := postgres.New(db, name, postgres.Options{
		Schema:       testSchema(),
		SessionBound: os.Getenv("HOPLOCK_TEST_SESSION_BOUND") != "",
		Follow:       map[bool]postgres.Follow{false: postgres.FollowListen, true: postgres.FollowWatch}[pooled],
		NoCancel:     os.Getenv("HOPLOCK_TEST_NO_CANCEL") != "",
	})
	var waited waitClock
	eb := childBackend{Backend: b, Waiter: timedWaiter{b, &waited}, Renewer: b, Releaser: b,
		HolderReader: b, Watcher: b, CandidateWaiter: b, Proclaimer: b}
	exitLate, err := time.ParseDuration(os.Getenv("HOPLOCK_TEST_EXIT_LATE"))
	if err != nil {
		exitLate = 0
	}
	listenCtx, stopListening := context.WithCancel(context.Background())
	defer stopListening()
	if os.Getenv("HOPLOCK_TEST_LISTEN_LATE") != "" {
		eb.Watcher = lateWatcher{b, listenCtx}
	}
	e := &hoplock.Elector{Backend: handingBackend{eb, b}, Owner: owner, TTL: ttl}
	if d, err := time.ParseDuration(os.Getenv("HOPLOCK_TEST_LINGER")); err == nil {
		e.HandoffLinger = d
	}
	if os.Getenv("HOPLOCK_TEST_HANDOVER") == "release" {
		e.Backend = eb
	}
	fencedRows := os.Getenv("HOPLOCK_TEST_FENCED") != ""
	writes := "proc_writes"
	if tbl := os.Getenv("HOPLOCK_TEST_TABLE"); tbl != "" {
		writes = pgx.Identifier{tbl}.Sanitize()
	}
	if n, err := strconv.Atoi(os.Getenv("HOPLOCK_TEST_WARM")); err == nil && n > 0 {
		if err := warmUp(db, b, n, owner); err != nil {
			fmt.Fprintln(os.Stderr, "warm-up:", err)
			return 2
		}
	}

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() { <-sigs; stop() }()
	// SIGUSR1: inside the next fenced transaction, say so and wait for
	// SIGCONT (the test stops this process meanwhile)
	var stopInFence atomic.Bool
	usr1 := make(chan os.Signal, 1)
	signal.Notify(usr1, syscall.SIGUSR1)
	go func() {
		for range usr1 {
			stopInFence.Store(true)
		}
	}()
	cont := make(chan os.Signal, 1)
	signal.Notify(cont, syscall.SIGCONT)

	// write commits a row fenced with gen; it returns the row's id and
	// the server's clock when it was inserted.
	write := func(wctx context.Context, gen int64) (id int64, at time.Time, err error) {
		tx, err := db.BeginTx(wctx, nil)
		if err != nil {
			return 0, at, err
		}
		defer tx.Rollback()
		if err := b.Fence(wctx, tx, gen); err != nil {
			return 0, at, err
		}
		if stopInFence.CompareAndSwap(true, false) {
			select {
			case <-cont:
			default:
			}
			say("fenced %d %d", gen, wall())
			<-cont
		}
		if err := tx.QueryRowContext(wctx, `INSERT INTO `+writes+` (name, owner, generation) VALUES ($1, $2, $3)
			RETURNING id, at`, name, owner, gen).Scan(&id, &at); err != nil {
			return 0, at, err
		}
		return id, at, tx.Commit()
	}
	// insert commits a row fenced with gen by the table's trigger alone:
	// one statement, in one round trip (the simple protocol: nothing to
	// prepare on a connection that never ran it).
	insert := func(wctx context.Context, gen int64) (id int64, at time.Time, err error) {
		err = db.QueryRowContext(wctx, `INSERT INTO `+writes+` (name, owner, generation) VALUES ($1, $2, $3)
			RETURNING id, at`, pgx.QuerySimpleProtocol(true), name, owner, gen).Scan(&id, &at)
		return id, at, err
	}
	// clock reads the server's clock in a transaction fenced with gen.
	clock := func(ctx context.Context, gen int64) (at time.Time, err error) {
		tx, err := db.BeginTx(ctx, nil)
		if err != nil {
			return at, err
		}
		defer tx.Rollback()
		if err := b.Fence(ctx, tx, gen); err != nil {
			return at, err
		}
		if err := tx.QueryRowContext(ctx, `SELECT pg_catalog.clock_timestamp()`).Scan(&at); err != nil {
			return at, err
		}
		return at, tx.Commit()
	}

	var gen int64
	for ctx.Err() == nil {
		if hoplock.IsPermanent(err) {
			// Lead returned at once (the server refused us): not in a
			// tight loop
			time.Sleep(20 * time.Millisecond)
		}
		err = e.Lead(ctx, func(ctx context.Context, lease hoplock.Lease) error {
			gen = lease.Generation
			began := wall()
			if fencedRows {
				// the term's first act: its first fenced write
				wctx, cancel := workContext(ctx)
				id, at, err := insert(wctx, gen)
				cancel()
				wrote := wall()
				say("start %d %d", gen, began)
				outcome := "committed"
				if err == nil {
					say("write %d %d %d %d", gen, wrote, at.UnixNano(), id)
				} else if outcome = postgres.SQLState(err); outcome == "" {
					outcome = "error"
				}
				say("first %d %d %d %d %s", gen, began, wrote, waited.at(gen), outcome)
			} else {
				say("start %d %d", gen, began)
			}
			if at, err := clock(ctx, gen); err == nil {
				say("clock %d %d", gen, at.UnixNano())
			}
			for {
				if ctx.Err() != nil {
					cause := hoplock.LossCause(ctx)
					say("end %d %d %s %v", gen, wall(), causeKind(cause), cause)
					if cause != nil && !errors.Is(cause, hoplock.ErrStepDown) {
						// What a zombie would do: write anyway.
						wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						_, _, err := write(wctx, gen)
						cancel()
						outcome := "committed"
						if err != nil {
							outcome = postgres.SQLState(err)
							if outcome == "" {
								outcome = "error"
							}
						}
						say("stale %d %s", gen, outcome)
					}
					return ctx.Err()
				}
				say("ok %d %d", gen, wall())
				wctx, cancel := workContext(ctx)
				var (
					id  int64
					at  time.Time
					err error
				)
				if fencedRows {
					id, at, err = insert(wctx, gen)
				} else {
					id, at, err = write(wctx, gen)
				}
				cancel()
				if err == nil {
					say("write %d %d %d %d", gen, wall(), at.UnixNano(), id)
				}
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
		say("returned %d %d", gen, wall())
	}
	time.Sleep(exitLate)
	return 0
}

// workContext is the context of one unit of work of a term whose context
// is ctx: it ends when the term is lost (LossCause reports a loss), not
// when the leader is told to stop (ctx's parent ended) or asked to step
// down, so that a write begun is finished then, inside the term, and not
// cancelled; and in any case after 5 s.
func workContext(ctx context.Context) (context.Context, context.CancelFunc) {
	wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	go func() {
		select {
		case <-ctx.Done():
			if cause := hoplock.LossCause(ctx); cause != nil && !errors.Is(cause, hoplock.ErrStepDown) {
				cancel()
			}
		case <-wctx.Done():
		}
	}()
	return wctx, cancel
}

// childBackend is the postgres backend as a child's Elector sees it: all
// its optional interfaces but hoplock.HandOffer, so that an Elector on it
// releases its term at a graceful stop and a follower waiting in
// hoplock_wait takes the freed lease (release and race, the handover
// before hoplock 1.2). handingBackend adds HandOffer: the Elector hands
// the term over. (The Elector finds them by type assertion.)
type childBackend struct {
	hoplock.Backend
	hoplock.Waiter
	hoplock.Renewer
	hoplock.Releaser
	hoplock.HolderReader
	hoplock.Watcher
	hoplock.CandidateWaiter
	hoplock.Proclaimer
}

type handingBackend struct {
	childBackend
	hoplock.HandOffer
}

// warmUp readies the pool of a child as a process that has run a while
// would have it: n connections open, each of which has read the lease and
// written (rolled back) a row of proc_writes, and the backend's question
// whether the server has hoplock 1.2 asked (a leader asks it at its first
// renewal, or its handoff).
func warmUp(db *sql.DB, b *postgres.Backend, n int, owner string) error {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	db.SetMaxIdleConns(n + 2)
	var conns []*sql.Conn
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	for i := 0; i < n; i++ {
		c, err := db.Conn(ctx)
		if err != nil {
			return err
		}
		conns = append(conns, c)
		tx, err := c.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, q(`SELECT FROM %s.hoplock_holder($1)`), b.Name())
		if err == nil {
			_, err = tx.ExecContext(ctx, `INSERT INTO proc_writes (name, owner, generation) VALUES ($1, $2, 0)`,
				pgx.QuerySimpleProtocol(true), "warm-up "+b.Name(), owner)
		}
		tx.Rollback()
		if err != nil {
			return err
		}
	}
	_, err := b.Holder(ctx)
	return err
}

// lateWatcher is a Watcher whose watch (and so its LISTEN connection)
// lasts until ctx ends, not until the context the Elector gives it does,
// which ends with Lead's context (HOPLOCK_TEST_LISTEN_LATE). Each Watch
// call starts a watch of its own.
type lateWatcher struct {
	w   hoplock.Watcher
	ctx context.Context
}

func (l lateWatcher) Watch(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	in := l.w.Watch(l.ctx)
	go func() {
		defer close(out)
		for {
			select {
			case <-ctx.Done():
				return
			case _, ok := <-in:
				if !ok {
					return
				}
				select {
				case out <- struct{}{}:
				default:
				}
			}
		}
	}()
	return out
}

// timedWaiter notes when each Wait returned a term.
type timedWaiter struct {
	hoplock.Waiter
	clock *waitClock
}

func (w timedWaiter) Wait(ctx context.Context, owner string, ttl, timeout time.Duration) (*hoplock.Lease, error) {
	l, err := w.Waiter.Wait(ctx, owner, ttl, timeout)
	if l != nil {
		w.clock.set(l.Generation, time.Now().UnixNano())
	}
	return l, err
}

// waitClock is when Wait last returned a term, and which.
type waitClock struct {
	mu  sync.Mutex
	gen int64
	ns  int64
}

func (c *waitClock) set(gen, ns int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.gen, c.ns = gen, ns
}

// at returns when Wait returned term gen, or 0.
func (c *waitClock) at(gen int64) int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.gen != gen {
		return 0
	}
	return c.ns
}

func causeKind(err error) string {
	switch {
	case err == nil:
		return "none"
	case errors.Is(err, hoplock.ErrLeaseHeld):
		return "held"
	case errors.Is(err, hoplock.ErrNoLease):
		return "gone"
	case errors.Is(err, hoplock.ErrLeaseExpired):
		return "expired"
	}
	return "other"
}

// child is an elector process, and what it printed.
type child struct {
	owner string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	// started receives the generation of each term it begins.
	started chan childStart
	// firsts receives each first write of a term (HOPLOCK_TEST_FENCED).
	firsts chan childFirst
	exited chan struct{}
}

type childStart struct {
	gen  int64
	wall time.Time
}

// childEnv adds to the environment of every child startChild starts
// (the tests through PgBouncer set it).
var childEnv []string

// startChild starts an elector process; env adds to its environment
// (HOPLOCK_TEST_USER=role: it connects as that role).
func startChild(t *testing.T, name, owner string, ttl time.Duration, sessionBound bool, env ...string) *child {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(),
		"HOPLOCK_TEST_CHILD="+name,
		"HOPLOCK_TEST_OWNER="+owner,
		"HOPLOCK_TEST_TTL="+ttl.String())
	if sessionBound {
		cmd.Env = append(cmd.Env, "HOPLOCK_TEST_SESSION_BOUND=1")
	}
	cmd.Env = append(cmd.Env, childEnv...)
	cmd.Env = append(cmd.Env, env...)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{owner: owner, cmd: cmd, started: make(chan childStart, 100), firsts: make(chan childFirst, 100),
		exited: make(chan struct{})}
	go func() {
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			line := sc.Text()
			c.mu.Lock()
			c.lines = append(c.lines, line)
			c.mu.Unlock()
			f := strings.Fields(line)
			if len(f) >= 3 && f[0] == "start" {
				gen, _ := strconv.ParseInt(f[1], 10, 64)
				ns, _ := strconv.ParseInt(f[2], 10, 64)
				c.started <- childStart{gen, time.Unix(0, ns)}
			}
			if len(f) >= 6 && f[0] == "first" {
				c.firsts <- parseFirst(f)
			}
		}
		cmd.Wait()
		close(c.exited)
	}()
	t.Cleanup(func() {
		c.cmd.Process.Signal(syscall.SIGCONT)
		c.cmd.Process.Kill()
		<-c.exited
	})
	return c
}

func (c *child) waitStarted(t *testing.T, within time.Duration) childStart {
	t.Helper()
	return awaitChild(t, c, c.started, within, "not leading")
}

// awaitChild returns what child c sends on ch, failing the test if c exits
// before, or if nothing comes within the time given ("what": the failure).
func awaitChild[T any](t *testing.T, c *child, ch <-chan T, within time.Duration, what string) T {
	t.Helper()
	select {
	case s := <-ch:
		return s
	case <-c.exited:
		t.Fatalf("%s exited before leading", c.owner)
	case <-time.After(within):
		t.Fatalf("%s: %s within %v", c.owner, what, within)
	}
	panic("unreachable")
}

// waitLine waits until the child has printed a line whose first word is
// word.
func (c *child) waitLine(t *testing.T, word string, within time.Duration) {
	t.Helper()
	for end := time.Now().Add(within); time.Now().Before(end); time.Sleep(time.Millisecond) {
		for _, line := range c.output() {
			if strings.HasPrefix(line, word+" ") {
				return
			}
		}
	}
	t.Fatalf("%s did not say %q within %v", c.owner, word, within)
}

func (c *child) kill() time.Time {
	at := time.Now()
	c.cmd.Process.Kill()
	<-c.exited
	return at
}

// term asks the child to stop (SIGTERM): its Lead hands the term over, or
// releases it.
func (c *child) term() time.Time {
	at := time.Now()
	c.cmd.Process.Signal(syscall.SIGTERM)
	return at
}

func (c *child) output() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.lines...)
}

func setupProcWrites(t *testing.T) {
	t.Helper()
	adminExec(t, `CREATE TABLE IF NOT EXISTS proc_writes (
		id bigserial PRIMARY KEY, name text NOT NULL, owner text NOT NULL,
		generation bigint NOT NULL, at timestamptz NOT NULL DEFAULT clock_timestamp())`)
	adminExec(t, `GRANT ALL ON proc_writes, proc_writes_id_seq TO PUBLIC`)
}

// waitWaiting returns once owner's process waits in hoplock_wait.
func waitWaiting(t *testing.T, owner string) {
	t.Helper()
	end := time.Now().Add(10 * time.Second)
	for time.Now().Before(end) {
		var n int
		if err := adminDB(t).QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity
			WHERE application_name = $1 AND state = 'active' AND query LIKE '%hoplock_wait%'`, owner).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n > 0 {
			return
		}
		time.Sleep(2 * time.Millisecond)
	}
	t.Fatalf("%s does not wait in the server", owner)
}

func rounds() int {
	if n, err := strconv.Atoi(os.Getenv("HOPLOCK_TEST_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 20
}

// killRounds kills the leader process, round after round, and measures how
// long after that the follower's fn began; and also, for a TTL-bound kill,
// how long after the killed term's expiry on the server.
func killRounds(t *testing.T, sessionBound bool, ttl time.Duration) (durations, durations) {
	setupProcWrites(t)
	name := leaseName(t)
	var all []*child
	spawn := func(i int) *child {
		c := startChild(t, name, fmt.Sprintf("p%d", i), ttl, sessionBound)
		all = append(all, c)
		return c
	}
	leader := spawn(0)
	leader.waitStarted(t, 10*time.Second)
	follower := spawn(1)
	var takeover, afterExpiry durations
	for r := 0; r < rounds(); r++ {
		// the follower waits in the server before the leader dies
		waitWaiting(t, follower.owner)
		time.Sleep(20 * time.Millisecond) // the leader writes a little
		killedAt := leader.kill()
		s := follower.waitStarted(t, ttl+10*time.Second)
		takeover = append(takeover, s.wall.Sub(killedAt))
		if !sessionBound {
			// when the server ended the killed leader's term: its expiry
			var ended time.Time
			if err := adminDB(t).QueryRow(q(`SELECT ended_at FROM %s.hoplock_history
				WHERE name = $1 AND generation < $2 ORDER BY generation DESC LIMIT 1`), name, s.gen).Scan(&ended); err != nil {
				t.Fatal(err)
			}
			afterExpiry = append(afterExpiry, s.wall.Sub(ended))
		}
		leader, follower = follower, spawn(r+2)
	}
	time.Sleep(50 * time.Millisecond)
	for _, c := range all {
		c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range all {
		<-c.exited
	}
	checkHistory(t, name, sections(all...))
	return takeover, afterExpiry
}

// A leader process told to stop (SIGTERM, which cancels its Lead's
// context): its fn finishes the write it is making and returns, and the
// Elector hands the term to the follower waiting in the server
// (hoplock_handoff), whose fn leads and writes within milliseconds. 20
// rounds (HOPLOCK_TEST_ROUNDS); TestProcessHandoverBench compares it with
// release and race.
func TestProcessGracefulStop(t *testing.T) {
	testDSN(t)
	var kinds []handoverKind
	for i := 0; i < rounds(); i++ {
		kinds = append(kinds, handOff)
	}
	const settle = 20 * time.Millisecond
	hs := gracefulRounds(t, kinds, settle)
	s := statsOf(hs, handOff)
	if p := durations(s.total).percentile(0.99); p > 2*time.Second {
		t.Errorf("leader process stopped -> follower's first write: p99 %v, as if it waited for the TTL", p)
	}
	if len(s.leaderFn) != len(hs) {
		t.Errorf("%d of %d stopped leaders logged their fn's end", len(s.leaderFn), len(hs))
	}
	if s.how[handOff.ends] != len(hs) {
		t.Errorf("%d of %d stopped leaders' terms were handed off: %v", s.how[handOff.ends], len(hs), s.how)
	}
	s.report(t, fmt.Sprintf("leader process stopped (SIGTERM: ctx cancelled, handoff; %d rounds, settle %v)", len(hs), settle), 3)
}

// A session-bound leader killed: its connection closes, its term ends at
// once, and the follower waiting in the server leads within milliseconds.
func TestProcessKillSessionBound(t *testing.T) {
	testDSN(t)
	const what = "killed session-bound leader (SIGKILL), kill"
	takeover, _ := killRounds(t, true, 10*time.Second)
	if p := takeover.percentile(0.99); p > 2*time.Second {
		t.Errorf("%s -> follower fn: p99 %v, as if it waited for the TTL", what, p)
	}
	t.Logf("%s -> follower fn: %v", what, takeover)
	fmt.Printf("measure: %s -> follower fn start: %v\n", what, takeover)
}

// A leader killed with an ordinary term: the follower leads once the term
// lapses, announced by the expiry worker, within the TTL and a little.
func TestProcessKillTTLBound(t *testing.T) {
	testDSN(t)
	const ttl = 500 * time.Millisecond
	takeover, afterExpiry := killRounds(t, false, ttl)
	if p := takeover.percentile(0.99); p > ttl+time.Second {
		t.Errorf("TTL-bound takeover after a kill: p99 %v, TTL %v", p, ttl)
	}
	t.Logf("killed leader (TTL %v) -> follower fn: %v; term's end on the server -> follower fn: %v", ttl, takeover, afterExpiry)
	fmt.Printf("measure: killed TTL-bound leader (SIGKILL, TTL %v), kill -> follower fn start: %v\n", ttl, takeover)
	fmt.Printf("measure: killed TTL-bound leader (SIGKILL, TTL %v), term's expiry on the server -> follower fn start: %v\n", ttl, afterExpiry)
}

// A leader stopped (SIGSTOP) for longer than its TTL: the follower leads
// once the term lapses on the server; on SIGCONT the old leader's fn finds
// its context already done -- it never finds it live again -- and the write
// it tries anyway with its old generation is refused with 55P03. Stopped
// inside a fenced transaction ("in fence"), it holds the next term back
// until hoplock.hung_holder_timeout after the lapse, when the expiry worker
// ends its session, and the write it was making is lost with the session.
// (Stopped at a moment of its own choosing, a leader may be inside a fenced
// transaction too, by chance.)
func TestProcessStalledLeader(t *testing.T) {
	testDSN(t)
	setupProcWrites(t)
	t.Run("anywhere", func(t *testing.T) { stalledLeader(t, false) })
	t.Run("in fence", func(t *testing.T) { stalledLeader(t, true) })
}

func stalledLeader(t *testing.T, inFence bool) {
	var hung float64
	if err := adminDB(t).QueryRow(`SELECT extract(epoch FROM current_setting('hoplock.hung_holder_timeout')::interval)`).Scan(&hung); err != nil {
		t.Fatal(err)
	}
	hungHolder := time.Duration(hung * float64(time.Second))
	name := leaseName(t)
	const ttl = time.Second
	a := startChild(t, name, "stalled-a", ttl, false)
	sa := a.waitStarted(t, 10*time.Second)
	b := startChild(t, name, "stalled-b", ttl, false)
	waitWaiting(t, "stalled-b")
	time.Sleep(200 * time.Millisecond)

	if inFence {
		// A waits inside its next fenced transaction
		if err := a.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		a.waitLine(t, "fenced", 5*time.Second)
	}
	signalledAt := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	// the signal takes effect a moment later
	stoppedAt := waitStopped(t, a.cmd.Process.Pid)
	if inFence {
		// A's fence is open, and holds the lease up
		var blockedBy sql.NullInt64
		if err := adminDB(t).QueryRow(q(`SELECT blocked_by FROM %s.hoplock_leases WHERE name = $1`), name).Scan(&blockedBy); err != nil {
			t.Fatal(err)
		}
		if !blockedBy.Valid {
			t.Errorf("A stopped inside its fenced transaction, but nothing holds the lease up")
		}
	}
	sb := b.waitStarted(t, ttl+hungHolder+5*time.Second)
	if d := sb.wall.Sub(stoppedAt); d < ttl/2 {
		t.Errorf("B led %v after A was stopped, well before A's TTL %v", d, ttl)
	}
	// stopped for longer than the TTL, and until the follower leads
	time.Sleep(time.Until(signalledAt.Add(ttl + 200*time.Millisecond)))
	time.Sleep(200 * time.Millisecond)
	continuedAt := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// A finds its context done and tries a write with its old generation
	var sec section
	for end := time.Now().Add(10 * time.Second); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		for _, s := range sections(a) {
			if s.gen == sa.gen {
				sec = s
			}
		}
		if len(sec.stale) > 0 {
			break
		}
	}
	if sec.end.IsZero() {
		t.Fatalf("the resumed leader (generation %d) never found its context done", sa.gen)
	}
	if !sec.to.Before(stoppedAt) {
		t.Errorf("A found its context live at %v, after it was stopped at %v", sec.to.Format(stamp), stoppedAt.Format(stamp))
	}
	if !sec.end.After(continuedAt) {
		t.Errorf("A found its context done at %v, before it was continued at %v", sec.end.Format(stamp), continuedAt.Format(stamp))
	}
	if sec.cause == "none" {
		t.Errorf("A's context ended without a loss cause")
	}
	if len(sec.stale) == 0 || sec.stale[0] != "55P03" {
		t.Errorf("the resumed leader's write with generation %d: %v, want refused with 55P03", sa.gen, sec.stale)
	}
	// on the server: A's term lapsed, and B's began no earlier (in a
	// fence: no earlier than hung_holder_timeout after that)
	ended, how := termEnd(t, name, sa.gen)
	if !lapsed(how) {
		t.Errorf("A's term ended %q, want lapsed (expired or taken over)", how)
	}
	var bBegan time.Time
	if err := adminDB(t).QueryRow(q(`SELECT acquired_at FROM %s.hoplock_history WHERE name = $1 AND generation = $2`),
		name, sb.gen).Scan(&bBegan); err != nil {
		t.Fatal(err)
	}
	if bBegan.Before(ended) {
		t.Errorf("B's term began at %v, before A's lapsed at %v", bBegan.Format(stamp), ended.Format(stamp))
	}
	if inFence && bBegan.Before(ended.Add(hungHolder)) {
		t.Errorf("B's term began at %v, %v after A's lapsed, while A's fence was open (hung_holder_timeout %v)",
			bBegan.Format(stamp), bBegan.Sub(ended), hungHolder)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	b.cmd.Process.Signal(syscall.SIGTERM)
	<-a.exited
	<-b.exited
	checkHistory(t, name, sections(a, b))
	t.Logf("A stopped at %v; B led %v later (TTL %v), %v after A's term lapsed on the server; "+
		"A continued %v after the stop, found its context done (%s) %v later; its stale write: %v",
		stoppedAt.Format(stamp), sb.wall.Sub(stoppedAt).Round(time.Millisecond), ttl, sb.wall.Sub(ended).Round(10*time.Microsecond),
		continuedAt.Sub(stoppedAt).Round(time.Millisecond), sec.cause, sec.end.Sub(continuedAt).Round(10*time.Microsecond), sec.stale)
}

// A leader cut off from the server, alive and working: its sessions are
// terminated and its role may not connect again -- "unreachable": over
// its connection limit (53300, a transient error, as a network cut would
// be); "refused": not permitted to log in (28000, a permanent error).
// Unreachable, its renewals fail and its context ends at its local
// deadline, before its term lapses on the server; refused, its context
// ends at the first refusal. Either way the follower leads once the term
// lapses on the server, and when the old leader can connect again, it
// follows. No two critical sections overlap.
func TestProcessLeaderCutOff(t *testing.T) {
	testDSN(t)
	setupProcWrites(t)
	for _, role := range []string{"hoplock_cut_a", "hoplock_cut_b"} {
		adminExec(t, fmt.Sprintf(`DO $$ BEGIN
			IF NOT EXISTS (SELECT FROM pg_catalog.pg_roles WHERE rolname = '%[1]s') THEN
				CREATE ROLE %[1]s LOGIN;
			END IF;
		END $$`, role))
		adminExec(t, fmt.Sprintf(`ALTER ROLE %s LOGIN CONNECTION LIMIT -1`, role))
		adminExec(t, q(fmt.Sprintf(`GRANT USAGE ON SCHEMA %%s TO %s`, role)))
	}
	t.Cleanup(func() { adminDB(t).Exec(`ALTER ROLE hoplock_cut_a LOGIN CONNECTION LIMIT -1`) })
	for _, tc := range []struct {
		name, cut, cause string
	}{
		{"unreachable", "CONNECTION LIMIT 0", "expired"},
		{"refused", "NOLOGIN", "other"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			leaderCutOff(t, tc.cut, tc.cause)
		})
	}
}

func leaderCutOff(t *testing.T, cut, wantCause string) {
	name := leaseName(t)
	const ttl = time.Second
	a := startChild(t, name, "cutoff-a", ttl, false, "HOPLOCK_TEST_USER=hoplock_cut_a")
	sa := a.waitStarted(t, 10*time.Second)
	b := startChild(t, name, "cutoff-b", ttl, false, "HOPLOCK_TEST_USER=hoplock_cut_b")
	waitWaiting(t, "cutoff-b")
	time.Sleep(200 * time.Millisecond)

	cutAt := time.Now()
	adminExec(t, `ALTER ROLE hoplock_cut_a `+cut)
	terminate(t, "cutoff-a")
	sb := b.waitStarted(t, ttl+5*time.Second)
	time.Sleep(300 * time.Millisecond)
	adminExec(t, `ALTER ROLE hoplock_cut_a LOGIN CONNECTION LIMIT -1`)
	// A follows again: it waits in the server
	waitWaiting(t, "cutoff-a")
	time.Sleep(100 * time.Millisecond)

	var sec section
	for _, s := range sections(a) {
		if s.gen == sa.gen {
			sec = s
		}
	}
	ended, how := termEnd(t, name, sa.gen)
	switch {
	case sec.end.IsZero():
		t.Errorf("A (generation %d) never found its context done", sa.gen)
	case sec.cause != wantCause:
		t.Errorf("A's context ended with cause %q, want %q", sec.cause, wantCause)
	case !sec.end.Before(ended):
		t.Errorf("A found its context done at %v, after its term lapsed on the server at %v", sec.end.Format(stamp), ended.Format(stamp))
	}
	if !lapsed(how) {
		t.Errorf("A's term ended %q, want lapsed", how)
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	b.cmd.Process.Signal(syscall.SIGTERM)
	<-a.exited
	<-b.exited
	checkHistory(t, name, sections(a, b))
	t.Logf("A cut off at %v; its last live check %v later, its context done (%s) %v later, %v before its term lapsed on the server; "+
		"B led %v after the cut, %v after the lapse",
		cutAt.Format(stamp), sec.to.Sub(cutAt).Round(time.Millisecond), sec.cause, sec.end.Sub(cutAt).Round(time.Millisecond),
		ended.Sub(sec.end).Round(10*time.Microsecond), sb.wall.Sub(cutAt).Round(time.Millisecond), sb.wall.Sub(ended).Round(10*time.Microsecond))
}

// waitStopped returns once every thread of process pid is stopped (state
// T in /proc/PID/task/*/stat; where there is no /proc, 50 ms after it was
// signalled). The threads stop one by one: until the last has, the
// process may still run.
func waitStopped(t *testing.T, pid int) time.Time {
	t.Helper()
	stopped := func() (bool, error) {
		tasks, err := os.ReadDir(fmt.Sprintf("/proc/%d/task", pid))
		if err != nil {
			return false, err
		}
		for _, task := range tasks {
			stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/task/%s/stat", pid, task.Name()))
			if err != nil {
				return false, err
			}
			// pid (comm) state ...: comm may hold spaces, not ')'
			i := strings.LastIndexByte(string(stat), ')')
			if i < 0 || i+2 >= len(stat) || stat[i+2] != 'T' {
				return false, nil
			}
		}
		return true, nil
	}
	for end := time.Now().Add(5 * time.Second); time.Now().Before(end); time.Sleep(100 * time.Microsecond) {
		ok, err := stopped()
		if err != nil {
			time.Sleep(50 * time.Millisecond)
			return time.Now()
		}
		if ok {
			return time.Now()
		}
	}
	t.Fatalf("process %d not stopped 5 s after SIGSTOP", pid)
	panic("unreachable")
}

// The leader's connections terminated (three times, both processes'), the
// server restarted cleanly (-m fast), then stopped as in a crash (-m
// immediate) and started again only after the TTL: no two critical
// sections overlap, and each time leadership recovers -- one of the two
// holds the lease and its fenced writes commit again.
func TestProcessConnectionCutAndRestart(t *testing.T) {
	testDSN(t)
	setupProcWrites(t)
	name := leaseName(t)
	const ttl = time.Second
	a := startChild(t, name, "cut-a", ttl, false)
	a.waitStarted(t, 10*time.Second)
	b := startChild(t, name, "cut-b", ttl, false)
	time.Sleep(300 * time.Millisecond)

	// recovered waits until one of the two holds the lease and a row
	// fenced with its generation committed after the server's clock read
	// since.
	recovered := func(what string, since time.Time, within time.Duration) {
		t.Helper()
		begin := time.Now()
		for end := begin.Add(within); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
			var ok bool
			err := adminDB(t).QueryRow(q(`SELECT EXISTS (
				SELECT FROM %s.hoplock_holder($1) AS l
				  JOIN proc_writes AS w ON w.name = $1 AND w.generation = l.generation AND w.owner = l.owner
				 WHERE l.owner IN ('cut-a', 'cut-b') AND w.at > $2)`), name, since).Scan(&ok)
			if err == nil && ok {
				_, gen, _ := holder(t, name)
				t.Logf("%s: generation %d leads, its fenced writes commit again %v later", what, gen, time.Since(begin).Round(time.Millisecond))
				return
			}
		}
		t.Errorf("%s: nobody leads and writes within %v", what, within)
	}
	// serverClock reads the server's clock, waiting for the server.
	serverClock := func() time.Time {
		t.Helper()
		adminDB(t).SetMaxIdleConns(0) // connections from before a restart are dead
		adminDB(t).SetMaxIdleConns(2)
		for end := time.Now().Add(10 * time.Second); ; time.Sleep(20 * time.Millisecond) {
			at, err := serverNow(context.Background(), adminDB(t))
			if err == nil {
				return at
			}
			if time.Now().After(end) {
				t.Fatalf("the server's clock: %v", err)
			}
		}
	}

	for i := 0; i < 3; i++ {
		terminate(t, "cut-a")
		terminate(t, "cut-b")
		time.Sleep(ttl / 2)
	}
	terminate(t, "cut-a")
	terminate(t, "cut-b")
	recovered("connections terminated", serverClock(), ttl+5*time.Second)

	pgctl := os.Getenv("HOPLOCK_TEST_PG_CTL")
	if pgctl == "" {
		t.Log("HOPLOCK_TEST_PG_CTL is not set: the server is not restarted")
	} else {
		run := func(args string) {
			t.Helper()
			if out, err := exec.Command("sh", "-c", pgctl+" "+args).CombinedOutput(); err != nil {
				t.Fatalf("%s %s: %v\n%s", pgctl, args, err, out)
			}
		}
		run("restart -m fast")
		recovered("server restarted (-m fast)", serverClock(), ttl+10*time.Second)
		run("stop -m immediate")
		time.Sleep(ttl * 3 / 2)
		run("start")
		recovered("server stopped (-m immediate) for 1.5 TTL, then started", serverClock(), ttl+10*time.Second)
	}
	time.Sleep(300 * time.Millisecond)
	a.cmd.Process.Signal(syscall.SIGTERM)
	b.cmd.Process.Signal(syscall.SIGTERM)
	<-a.exited
	<-b.exited
	checkHistory(t, name, sections(a, b))
}
