package postgres_test

// Following the events with hoplock_watch (Options.Follow FollowWatch, and
// any driver but pgx): how soon a release is heard, next to LISTEN; the
// restart from hoplock_position() when the log no longer keeps what
// followed the last number (HL001); the watch cancelled in the server with
// its context; lib/pq following with hoplock_watch, and polling only where
// the server has no hoplock_watch.

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

// inCall counts the sessions of application app running a statement that
// calls fn.
func inCall(t *testing.T, app, fn string) int {
	t.Helper()
	var n int
	err := adminDB(t).QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity
		WHERE application_name = $1 AND state = 'active' AND query LIKE '%' || $2 || '%'`, app, fn).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// listening counts the sessions of application app whose last statement
// was a LISTEN.
func listening(t *testing.T, app string) int {
	t.Helper()
	var n int
	err := adminDB(t).QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity
		WHERE application_name = $1 AND query LIKE 'LISTEN %'`, app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func watchRounds() int {
	if n, err := strconv.Atoi(os.Getenv("HOPLOCK_TEST_WATCH_ROUNDS")); err == nil && n > 0 {
		return n
	}
	return 200
}

// awaitSignal waits for a signal on ch and returns when it came.
func awaitSignal(t *testing.T, ch <-chan struct{}, within time.Duration, what string) time.Time {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("Watch's channel closed before %s", what)
		}
		return time.Now()
	case <-time.After(within):
		t.Fatalf("no signal within %v of %s", within, what)
	}
	panic("unreachable")
}

// A follower hears a release within milliseconds: with hoplock_watch (pgx
// with FollowWatch, and lib/pq) as with LISTEN. WatchPoll is an hour: a
// backend that polled would hear nothing. Each round another session takes
// the lease and releases it; the time from sending the release to the
// signal is measured.
func TestWatchHearsRelease(t *testing.T) {
	rounds := watchRounds()
	for _, tc := range []struct {
		mode   string
		pq     bool
		follow postgres.Follow
	}{
		{"pgx-listen", false, postgres.FollowListen},
		{"pgx-watch", false, postgres.FollowWatch},
		{"pq-watch", true, postgres.FollowListen}, // pq cannot listen: it watches
	} {
		tc := tc
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			name := leaseName(t)
			app := "hoplock-test-hears-" + tc.mode
			var db *sql.DB
			if tc.pq {
				db = openPq(t, app)
			} else {
				db = openNode(t, app).db
			}
			b := postgres.New(db, name, postgres.Options{Schema: testSchema(), Follow: tc.follow, WatchPoll: time.Hour})
			actor := openNode(t, "hoplock-test-hears-actor").db
			ch := b.Watch(ctx)
			awaitSignal(t, ch, 5*time.Second, "the start")
			if tc.mode == "pgx-listen" {
				eventually(t, 5*time.Second, "the backend listens", func() bool { return listening(t, app) == 1 })
			} else {
				eventually(t, 5*time.Second, "the backend waits in hoplock_watch", func() bool { return inCall(t, app, "hoplock_watch") == 1 })
				if n := listening(t, app); n != 0 {
					t.Errorf("%d sessions listen", n)
				}
			}
			var heard durations
			for i := 0; i < rounds; i++ {
				if _, err := actor.ExecContext(ctx, q("SELECT %s.hoplock_acquire($1, 'X', '1 min')"), name); err != nil {
					t.Fatal(err)
				}
				awaitSignal(t, ch, 5*time.Second, "an acquire")
				sent := time.Now()
				if _, err := actor.ExecContext(ctx, q("SELECT %s.hoplock_release($1, 'X')"), name); err != nil {
					t.Fatal(err)
				}
				heard = append(heard, awaitSignal(t, ch, 5*time.Second, "a release").Sub(sent))
			}
			fmt.Printf("measure: release sent -> follower's Watch signalled, %s (%d rounds): %v\n", tc.mode, rounds, heard)
			if p50, p99 := heard.percentile(0.5), heard.percentile(0.99); p50 > 20*time.Millisecond || p99 > 200*time.Millisecond {
				t.Errorf("release heard in p50 %v, p99 %v: want milliseconds", p50, p99)
			}
			cancel()
			for range ch {
			}
		})
	}
}

// watchSteps records the steps of a backend's following of the events,
// and can hold it, once, before its next hoplock_watch call.
type watchSteps struct {
	mu     sync.Mutex
	steps  []watchStep
	pause  atomic.Bool
	paused chan int64
	resume chan struct{}
}

type watchStep struct {
	step string
	n    int64
}

func hookSteps(b *postgres.Backend) *watchSteps {
	w := &watchSteps{paused: make(chan int64, 1), resume: make(chan struct{})}
	postgres.SetWatchHook(b, func(step string, n int64) {
		w.mu.Lock()
		w.steps = append(w.steps, watchStep{step, n})
		w.mu.Unlock()
		if step == "watch" && w.pause.CompareAndSwap(true, false) {
			w.paused <- n
			<-w.resume
		}
	})
	return w
}

func (w *watchSteps) list() []watchStep {
	w.mu.Lock()
	defer w.mu.Unlock()
	return append([]watchStep(nil), w.steps...)
}

func (w *watchSteps) count(step string) int {
	n := 0
	for _, s := range w.list() {
		if s.step == step {
			n++
		}
	}
	return n
}

// setEventRetention sets hoplock.event_retention for the test's duration.
func setEventRetention(t *testing.T, value string) {
	t.Helper()
	adminExec(t, "ALTER SYSTEM SET hoplock.event_retention = "+value)
	adminExec(t, "SELECT pg_catalog.pg_reload_conf()")
	t.Cleanup(func() {
		adminExec(t, "ALTER SYSTEM RESET hoplock.event_retention")
		adminExec(t, "SELECT pg_catalog.pg_reload_conf()")
	})
}

// A leader's watcher falls behind while the server trims the event log
// past the last number it got, and the one event it missed ended its
// term. Resuming raises HL001: the backend starts again from
// hoplock_position() and signals, the Elector reads the lease again and
// finds its term over, long before its next renewal. The watcher then
// follows on from the new position: the next forced release is heard at
// once too.
func TestWatchTrimmedRestarts(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	setEventRetention(t, "0") // events go as soon as they are sent
	name := leaseName(t)
	const app = "hoplock-test-trimmed"
	b := postgres.New(openNode(t, app).db, name, postgres.Options{Schema: testSchema(), Follow: postgres.FollowWatch, WatchPoll: time.Hour})
	w := hookSteps(b)
	const ttl = 90 * time.Second // renewals every 30 s
	rctx, stop := context.WithCancel(ctx)
	events := elector(b, "A", ttl).Run(rctx)
	next := func(want hoplock.EventKind, within time.Duration) hoplock.Event {
		t.Helper()
		limit := time.After(within)
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("closed while waiting for %v", want)
				}
				if ev.Kind == hoplock.EventRenewed && want != hoplock.EventRenewed {
					continue
				}
				if ev.Kind != want {
					t.Fatalf("%v (%v), want %v", ev.Kind, ev.Err, want)
				}
				return ev
			case <-limit:
				t.Fatalf("no %v within %v", want, within)
			}
		}
	}
	acq := next(hoplock.EventAcquired, 5*time.Second)
	eventually(t, 5*time.Second, "A waits in hoplock_watch", func() bool { return inCall(t, app, "hoplock_watch") == 1 })

	// Hold the watcher before its next call: events of another name
	// end the call it is in.
	w.pause.Store(true)
	other := name + "/other"
	adminExec(t, q("SELECT %s.hoplock_acquire($1, 'x', '1 min')"), other)
	adminExec(t, q("SELECT %s.hoplock_release($1, 'x')"), other)
	var after int64
	select {
	case after = <-w.paused:
	case <-time.After(5 * time.Second):
		t.Fatal("the watcher did not come back for its next call")
	}
	adminExec(t, q("SELECT %s.hoplock_force_release($1)"), name)
	trimmedAt := time.Now()
	eventually(t, 30*time.Second, "the log trimmed past the watcher's number", func() bool {
		var n int
		err := adminDB(t).QueryRow(q("SELECT count(*) FROM %s.hoplock_events($1)"), after).Scan(&n)
		return postgres.SQLState(err) == "HL001"
	})
	resumed := time.Now()
	close(w.resume)
	lost := next(hoplock.EventLost, 5*time.Second)
	heard := time.Since(resumed)
	if w.count("restart") == 0 {
		t.Logf("the loss came before the watcher's restart (steps %v): an earlier check saw it", w.list())
	}
	if !errors.Is(lost.Err, hoplock.ErrNoLease) || lost.Lease.Generation != acq.Lease.Generation {
		t.Errorf("lost generation %d (%v), want %d with ErrNoLease", lost.Lease.Generation, lost.Err, acq.Lease.Generation)
	}
	if heard > 2*time.Second {
		t.Errorf("the lost term was heard %v after the watcher resumed", heard)
	}
	// The loss is heard through the restart's signal, unless the
	// Elector's check of an earlier signal (its own acquisition's event,
	// or the watcher's first position) reached the server only after the
	// forced release: then it came first. Either way the watcher must
	// restart.
	restartedAfter := func() bool {
		var restarted, positioned bool
		for _, s := range w.list() {
			switch {
			case s.step == "restart" && s.n == after:
				restarted = true
			case restarted && s.step == "position":
				positioned = s.n > after
			}
		}
		return restarted && positioned
	}
	deadline := time.Now().Add(2 * time.Second)
	for !restartedAfter() && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if !restartedAfter() {
		t.Errorf("no restart after %d from a newer position within 2s of resuming: steps %v", after, w.list())
	}
	if n := w.count("restart"); n != 1 {
		t.Errorf("%d restarts, want 1: steps %v", n, w.list())
	}

	// The watcher follows on from the new position.
	again := next(hoplock.EventAcquired, 5*time.Second)
	forced := time.Now()
	adminExec(t, q("SELECT %s.hoplock_force_release($1)"), name)
	lost2 := next(hoplock.EventLost, 2*time.Second)
	if !errors.Is(lost2.Err, hoplock.ErrNoLease) || lost2.Lease.Generation != again.Lease.Generation {
		t.Errorf("lost generation %d (%v), want %d with ErrNoLease", lost2.Lease.Generation, lost2.Err, again.Lease.Generation)
	}
	heard2 := time.Since(forced)
	fmt.Printf("measure: HL001 (log trimmed %v after the missed release): watcher resumed -> the leader's term lost %v later; next forced release heard in %v (renewals every %v)\n",
		resumed.Sub(trimmedAt).Round(time.Millisecond), heard.Round(100*time.Microsecond), heard2.Round(100*time.Microsecond), ttl/3)
	stop()
	closed := time.After(10 * time.Second)
	for {
		select {
		case _, ok := <-events:
			if !ok {
				return
			}
		case <-closed:
			t.Fatal("Run's channel still open 10s after its context ended")
		}
	}
}

// Cancelling Watch's context cancels the hoplock_watch running in the
// server at once (WatchWait is an hour), with pgx and with lib/pq.
func TestWatchCancelledInServer(t *testing.T) {
	for _, mode := range []string{"pgx", "pq"} {
		mode := mode
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			app := "hoplock-test-watch-cancel-" + mode
			var db *sql.DB
			if mode == "pq" {
				db = openPq(t, app)
			} else {
				db = openNode(t, app).db
			}
			b := postgres.New(db, leaseName(t), postgres.Options{Schema: testSchema(), Follow: postgres.FollowWatch,
				WatchWait: time.Hour, WatchPoll: time.Hour})
			wctx, wcancel := context.WithCancel(ctx)
			ch := b.Watch(wctx)
			eventually(t, 5*time.Second, "the backend waits in hoplock_watch", func() bool { return inCall(t, app, "hoplock_watch") == 1 })
			cancelled := time.Now()
			wcancel()
			closed := time.After(2 * time.Second)
		drain:
			for {
				select {
				case _, ok := <-ch:
					if !ok {
						break drain
					}
				case <-closed:
					t.Fatal("Watch's channel still open 2s after its context ended")
				}
			}
			returned := time.Since(cancelled)
			eventually(t, time.Second, "no session left in hoplock_watch", func() bool { return inCall(t, app, "hoplock_watch") == 0 })
			t.Logf("Watch returned %v after the cancel; no hoplock_watch left %v after it",
				returned.Round(100*time.Microsecond), time.Since(cancelled).Round(time.Millisecond))
		})
	}
}

// A leader on lib/pq (which cannot LISTEN through database/sql) follows
// the events with hoplock_watch: a forced release ends its term at once,
// not at its next renewal, and it never polls (WatchPoll is an hour).
// The same for pgx with FollowWatch.
func TestLossHeardFromWatch(t *testing.T) {
	for _, mode := range []string{"pq", "pgx-watch"} {
		mode := mode
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := leaseName(t)
			app := "hoplock-test-loss-watch-" + mode
			opts := postgres.Options{Schema: testSchema(), WatchPoll: time.Hour}
			var db *sql.DB
			if mode == "pq" {
				db = openPq(t, app)
			} else {
				db = openNode(t, app).db
				opts.Follow = postgres.FollowWatch
			}
			b := postgres.New(db, name, opts)
			w := hookSteps(b)
			const ttl = 9 * time.Second // renewals every 3s
			a := campaign(ctx, elector(b, "A", ttl), nil)
			a.waitStarted(t, 5*time.Second)
			eventually(t, 5*time.Second, "A waits in hoplock_watch", func() bool { return inCall(t, app, "hoplock_watch") == 1 })
			forcedAt := time.Now()
			adminExec(t, q("SELECT %s.hoplock_force_release($1)"), name)
			la := a.waitLost(t, ttl/3)
			if d := la.at.Sub(forcedAt); d > 500*time.Millisecond {
				t.Errorf("heard of the forced release %v later", d)
			}
			if !errors.Is(la.cause, hoplock.ErrNoLease) {
				t.Errorf("LossCause = %v, want ErrNoLease", la.cause)
			}
			if n := w.count("poll"); n != 0 {
				t.Errorf("the backend polls")
			}
			t.Logf("forced release heard %v later (next renewal was due in up to %v)", la.at.Sub(forcedAt).Round(100*time.Microsecond), ttl/3)
			<-a.done
		})
	}
}

// Against a hoplock without hoplock_watch (1.1: the function does not
// exist, 42883), the backend polls the holder instead: lib/pq by
// default, and pgx with FollowWatch. The schema here has hoplock_holder
// alone, calling hoplock's.
func TestWatchFallsBackToPolling(t *testing.T) {
	const old = "hoplock_test_without_watch"
	adminExec(t, "DROP SCHEMA IF EXISTS "+old+" CASCADE")
	adminExec(t, "CREATE SCHEMA "+old)
	adminExec(t, q("CREATE FUNCTION "+old+".hoplock_holder(name text) RETURNS %s.hoplock_lease LANGUAGE sql AS 'SELECT %s.hoplock_holder(name)'"))
	t.Cleanup(func() { adminExec(t, "DROP SCHEMA "+old+" CASCADE") })
	for _, mode := range []string{"pq", "pgx-watch"} {
		mode := mode
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := leaseName(t)
			app := "hoplock-test-fallback-" + mode
			opts := postgres.Options{Schema: old, WatchPoll: 50 * time.Millisecond}
			var db *sql.DB
			if mode == "pq" {
				db = openPq(t, app)
			} else {
				db = openNode(t, app).db
				opts.Follow = postgres.FollowWatch
			}
			b := postgres.New(db, name, opts)
			w := hookSteps(b)
			ch := b.Watch(ctx)
			eventually(t, 5*time.Second, "the backend polls", func() bool { return w.count("poll") == 1 })
			time.Sleep(100 * time.Millisecond) // a first read
			adminExec(t, q("SELECT %s.hoplock_acquire($1, 'X', '1 min')"), name)
			awaitSignal(t, ch, 2*time.Second, "an acquire")
			if n := inCall(t, app, "hoplock_watch"); n != 0 {
				t.Errorf("%d sessions in hoplock_watch", n)
			}
			if n := w.count("position"); n != 0 {
				t.Errorf("started from a position %d times", n)
			}
			cancel()
			for range ch {
			}
		})
	}
}
