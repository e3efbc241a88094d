package postgres_test

// Electors in processes of their own, killed (SIGKILL), stalled (SIGSTOP),
// cut off (pg_terminate_backend) and left without a server (restart), with
// a history checker. The test binary runs itself as the child process
// (HOPLOCK_TEST_CHILD set); the child leads through an Elector, and in its
// fn checks its context, logs the moment it found itself still leading,
// and writes a row fenced with the term's generation, every few
// milliseconds. Each line it prints carries the local wall clock (the
// children run on this machine, so the clocks are one).

import (
	"bufio"
	"context"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v4/stdlib"

	"hoplock"
	"hoplock/postgres"
)

func TestMain(m *testing.M) {
	if os.Getenv("HOPLOCK_TEST_CHILD") != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// childMain leads lease HOPLOCK_TEST_CHILD as owner HOPLOCK_TEST_OWNER,
// campaigning again after each loss, until SIGTERM. Lines printed:
//
//	start GEN WALL            fn began
//	ok GEN WALL               fn checked its context: still leading
//	write GEN WALL            a fenced row committed
//	end GEN WALL CAUSE        fn found its context done
//	stale GEN SQLSTATE        a write with the lost term's generation, after
//	                          the loss: its outcome ("committed" if it was)
func childMain() int {
	name := os.Getenv("HOPLOCK_TEST_CHILD")
	owner := os.Getenv("HOPLOCK_TEST_OWNER")
	ttl, err := time.ParseDuration(os.Getenv("HOPLOCK_TEST_TTL"))
	if err != nil {
		fmt.Fprintln(os.Stderr, "HOPLOCK_TEST_TTL:", err)
		return 2
	}
	db, err := sql.Open("pgx", os.Getenv("HOPLOCK_TEST_DSN")+" application_name="+owner)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	defer db.Close()
	b := postgres.New(db, name, postgres.Options{
		Schema:       testSchema(),
		SessionBound: os.Getenv("HOPLOCK_TEST_SESSION_BOUND") != "",
	})
	e := &hoplock.Elector{Backend: b, Owner: owner, TTL: ttl}

	var mu sync.Mutex
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", args...)
	}
	wall := func() int64 { return time.Now().UnixNano() }

	ctx, stop := context.WithCancel(context.Background())
	defer stop()
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM)
	go func() { <-sigs; stop() }()

	write := func(wctx context.Context, gen int64) error {
		tx, err := db.BeginTx(wctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := b.Fence(wctx, tx, gen); err != nil {
			return err
		}
		if _, err := tx.ExecContext(wctx, `INSERT INTO proc_writes (name, owner, generation) VALUES ($1, $2, $3)`,
			name, owner, gen); err != nil {
			return err
		}
		return tx.Commit()
	}

	for ctx.Err() == nil {
		_ = e.Lead(ctx, func(ctx context.Context, lease hoplock.Lease) error {
			gen := lease.Generation
			say("start %d %d", gen, wall())
			for {
				if ctx.Err() != nil {
					say("end %d %d %v", gen, wall(), hoplock.LossCause(ctx))
					if hoplock.LossCause(ctx) != nil {
						// What a zombie would do: write anyway.
						wctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
						err := write(wctx, gen)
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
				if err := write(ctx, gen); err == nil {
					say("write %d %d", gen, wall())
				}
				select {
				case <-ctx.Done():
				case <-time.After(5 * time.Millisecond):
				}
			}
		})
	}
	return 0
}

// child is an elector process, and what it printed.
type child struct {
	owner string
	cmd   *exec.Cmd
	mu    sync.Mutex
	lines []string
	// started receives the generation of each term it begins.
	started chan childStart
	exited  chan struct{}
}

type childStart struct {
	gen  int64
	wall time.Time
}

func startChild(t *testing.T, name, owner string, ttl time.Duration, sessionBound bool) *child {
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
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	c := &child{owner: owner, cmd: cmd, started: make(chan childStart, 100), exited: make(chan struct{})}
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
	select {
	case s := <-c.started:
		return s
	case <-c.exited:
		t.Fatalf("%s exited before leading", c.owner)
	case <-time.After(within):
		t.Fatalf("%s: not leading within %v", c.owner, within)
	}
	panic("unreachable")
}

func (c *child) kill() time.Time {
	at := time.Now()
	c.cmd.Process.Kill()
	<-c.exited
	return at
}

// term asks the child to stop (SIGTERM): its Lead releases the lease.
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

// section is a term's critical section as its process saw it: from fn's
// start to the last time fn found its context live.
type section struct {
	owner    string
	gen      int64
	from, to time.Time
	stale    []string // outcomes of writes made after the loss
}

// sections reads the children's output: one section per term begun.
func sections(children ...*child) []section {
	var out []section
	for _, c := range children {
		idx := map[int64]int{}
		for _, line := range c.output() {
			f := strings.Fields(line)
			if len(f) < 3 {
				continue
			}
			gen, _ := strconv.ParseInt(f[1], 10, 64)
			if f[0] == "stale" {
				if i, ok := idx[gen]; ok {
					out[i].stale = append(out[i].stale, f[2])
				}
				continue
			}
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			at := time.Unix(0, ns)
			switch f[0] {
			case "start":
				idx[gen] = len(out)
				out = append(out, section{owner: c.owner, gen: gen, from: at, to: at})
			case "ok":
				if i, ok := idx[gen]; ok && at.After(out[i].to) {
					out[i].to = at
				}
			}
		}
	}
	return out
}

// checkHistory verifies the history of lease name: the critical sections
// of different terms never overlap in time; generations rise in the order
// the terms began; every committed fenced row was written inside its own
// generation's term, by the server's history of terms.
func checkHistory(t *testing.T, name string, secs []section) {
	t.Helper()
	for _, v := range historyViolations(secs) {
		t.Error(v)
	}
	rows, err := adminDB(t).Query(q(`
		SELECT w.id, w.owner, w.generation, w.at, h.owner, h.acquired_at, h.ended_at
		  FROM proc_writes AS w
		  LEFT JOIN %s.hoplock_history AS h ON h.name = w.name AND h.generation = w.generation
		 WHERE w.name = $1
		   AND (h.generation IS NULL OR h.owner <> w.owner OR w.at < h.acquired_at
		        OR (h.ended_at IS NOT NULL AND w.at >= h.ended_at))`), name)
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	for rows.Next() {
		var (
			id, gen       int64
			owner         string
			at            time.Time
			hOwner        sql.NullString
			hFrom, hUntil sql.NullTime
		)
		if err := rows.Scan(&id, &owner, &gen, &at, &hOwner, &hFrom, &hUntil); err != nil {
			t.Fatal(err)
		}
		t.Errorf("fenced row %d of %s, generation %d, written at %v outside its term (holder %q, %v to %v)",
			id, owner, gen, at, hOwner.String, hFrom.Time, hUntil.Time)
	}
	var n int
	if err := adminDB(t).QueryRow(`SELECT count(*) FROM proc_writes WHERE name = $1`, name).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n == 0 {
		t.Error("no fenced row was written: the history proves nothing")
	}
}

// historyViolations is the checker's part that needs no server.
func historyViolations(secs []section) []string {
	var v []string
	for i, a := range secs {
		for j, b := range secs {
			if i >= j || a.gen == b.gen {
				continue
			}
			if a.from.Before(b.to) && b.from.Before(a.to) {
				v = append(v, fmt.Sprintf("critical sections overlap: %s generation %d %v..%v and %s generation %d %v..%v",
					a.owner, a.gen, a.from.Format(stamp), a.to.Format(stamp), b.owner, b.gen, b.from.Format(stamp), b.to.Format(stamp)))
			}
			if a.from.Before(b.from) && a.gen > b.gen {
				v = append(v, fmt.Sprintf("generation went down: %s began %d before %s began %d", a.owner, a.gen, b.owner, b.gen))
			}
		}
		for _, s := range a.stale {
			if s == "committed" {
				v = append(v, fmt.Sprintf("%s's write with lost generation %d committed", a.owner, a.gen))
			}
		}
	}
	return v
}

// The checker itself: it reports overlapping sections, generations going
// down, and a stale write committed.
func TestHistoryCheckerFindsViolations(t *testing.T) {
	t0 := time.Now()
	ms := func(n int) time.Time { return t0.Add(time.Duration(n) * time.Millisecond) }
	good := []section{
		{owner: "A", gen: 1, from: ms(0), to: ms(10), stale: []string{"55P03"}},
		{owner: "B", gen: 2, from: ms(11), to: ms(20)},
	}
	if v := historyViolations(good); len(v) != 0 {
		t.Errorf("a good history reported: %v", v)
	}
	for what, bad := range map[string][]section{
		"overlap":  {{owner: "A", gen: 1, from: ms(0), to: ms(12)}, {owner: "B", gen: 2, from: ms(11), to: ms(20)}},
		"down":     {{owner: "A", gen: 2, from: ms(0), to: ms(10)}, {owner: "B", gen: 1, from: ms(11), to: ms(20)}},
		"stale ok": {{owner: "A", gen: 1, from: ms(0), to: ms(10), stale: []string{"committed"}}, {owner: "B", gen: 2, from: ms(11), to: ms(20)}},
	} {
		if v := historyViolations(bad); len(v) == 0 {
			t.Errorf("%s: not reported", what)
		}
	}
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

// killRounds kills the leader process (or, graceful, stops it with
// SIGTERM), round after round, and measures how long after that the
// follower's fn began.
func killRounds(t *testing.T, sessionBound bool, ttl time.Duration, graceful bool) (durations, durations) {
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
		var killedAt time.Time
		if graceful {
			killedAt = leader.term()
		} else {
			killedAt = leader.kill()
		}
		s := follower.waitStarted(t, ttl+10*time.Second)
		takeover = append(takeover, s.wall.Sub(killedAt))
		if !sessionBound && !graceful {
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
// context): it releases, and the follower waiting in the server leads
// within milliseconds.
func TestProcessGracefulStop(t *testing.T) {
	fastHandover(t, false, true, "leader process stopped (SIGTERM: ctx cancelled, release), signal")
}

// A session-bound leader killed: its connection closes, its term ends at
// once, and the follower waiting in the server leads within milliseconds.
func TestProcessKillSessionBound(t *testing.T) {
	fastHandover(t, true, false, "killed session-bound leader (SIGKILL), kill")
}

// fastHandover runs killRounds for a handover that must not wait for the
// TTL (10 s), and reports it.
func fastHandover(t *testing.T, sessionBound, graceful bool, what string) {
	testDSN(t)
	takeover, _ := killRounds(t, sessionBound, 10*time.Second, graceful)
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
	takeover, afterExpiry := killRounds(t, false, ttl, false)
	if p := takeover.percentile(0.99); p > ttl+time.Second {
		t.Errorf("TTL-bound takeover after a kill: p99 %v, TTL %v", p, ttl)
	}
	t.Logf("killed leader (TTL %v) -> follower fn: %v; term's end on the server -> follower fn: %v", ttl, takeover, afterExpiry)
	fmt.Printf("measure: killed TTL-bound leader (SIGKILL, TTL %v), kill -> follower fn start: %v\n", ttl, takeover)
	fmt.Printf("measure: killed TTL-bound leader (SIGKILL, TTL %v), term's expiry on the server -> follower fn start: %v\n", ttl, afterExpiry)
}

// A leader stopped (SIGSTOP) for longer than its TTL: the follower leads
// after the TTL; on SIGCONT the old leader's context is already done, its
// fn stops, and the write it tries with its old generation is refused.
func TestProcessStalledLeader(t *testing.T) {
	testDSN(t)
	setupProcWrites(t)
	name := leaseName(t)
	const ttl = time.Second
	a := startChild(t, name, "stalled-a", ttl, false)
	sa := a.waitStarted(t, 10*time.Second)
	b := startChild(t, name, "stalled-b", ttl, false)
	time.Sleep(300 * time.Millisecond)

	stoppedAt := time.Now()
	if err := a.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	sb := b.waitStarted(t, ttl+5*time.Second)
	if d := sb.wall.Sub(stoppedAt); d < ttl/2 {
		t.Errorf("B led %v after A was stopped, well before A's TTL %v", d, ttl)
	}
	time.Sleep(200 * time.Millisecond)
	if err := a.cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	// A finds its context done and tries a write with its old generation
	deadline := time.Now().Add(10 * time.Second)
	var stale []string
	for time.Now().Before(deadline) {
		for _, s := range sections(a) {
			if s.gen == sa.gen {
				stale = s.stale
			}
		}
		if len(stale) > 0 {
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	if len(stale) == 0 || stale[0] != "55P03" {
		t.Errorf("the resumed leader's write with generation %d: %v, want refused with 55P03", sa.gen, stale)
	}
	for _, s := range sections(a) {
		if s.gen == sa.gen && !s.to.Before(stoppedAt) {
			t.Errorf("A found its context live at %v, after it was stopped at %v", s.to.Format(stamp), stoppedAt.Format(stamp))
		}
	}
	a.cmd.Process.Signal(syscall.SIGTERM)
	b.cmd.Process.Signal(syscall.SIGTERM)
	<-a.exited
	<-b.exited
	checkHistory(t, name, sections(a, b))
	t.Logf("A stopped at %v; B led %v later (TTL %v); A's stale write: %v",
		stoppedAt.Format(stamp), sb.wall.Sub(stoppedAt).Round(time.Millisecond), ttl, stale)
}

// The leader's connections terminated, then the server restarted: no two
// critical sections overlap, and someone leads again each time.
func TestProcessConnectionCutAndRestart(t *testing.T) {
	testDSN(t)
	restart := os.Getenv("HOPLOCK_TEST_RESTART")
	setupProcWrites(t)
	name := leaseName(t)
	const ttl = time.Second
	a := startChild(t, name, "cut-a", ttl, false)
	a.waitStarted(t, 10*time.Second)
	b := startChild(t, name, "cut-b", ttl, false)
	time.Sleep(300 * time.Millisecond)

	leads := func(within time.Duration) bool {
		end := time.Now().Add(within)
		for time.Now().Before(end) {
			var ok bool
			err := adminDB(t).QueryRow(q(`SELECT count(*) = 1 FROM %s.hoplock_holder($1)
				WHERE owner IN ('cut-a', 'cut-b')`), name).Scan(&ok)
			if err == nil && ok {
				return true
			}
			time.Sleep(50 * time.Millisecond)
		}
		return false
	}
	for i := 0; i < 3; i++ {
		terminate(t, "cut-a")
		terminate(t, "cut-b")
		time.Sleep(ttl / 2)
	}
	if !leads(ttl + 5*time.Second) {
		t.Error("nobody leads after the connections were terminated")
	}
	if restart == "" {
		t.Log("HOPLOCK_TEST_RESTART is not set: the server is not restarted")
	} else {
		out, err := exec.Command("sh", "-c", restart).CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", restart, err, out)
		}
		adminDB(t).SetMaxIdleConns(0) // its connections died with the server
		adminDB(t).SetMaxIdleConns(2)
		if !leads(ttl + 10*time.Second) {
			t.Error("nobody leads after the server restarted")
		}
	}
	time.Sleep(300 * time.Millisecond)
	a.cmd.Process.Signal(syscall.SIGTERM)
	b.cmd.Process.Signal(syscall.SIGTERM)
	<-a.exited
	<-b.exited
	checkHistory(t, name, sections(a, b))
}
