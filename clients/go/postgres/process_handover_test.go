package postgres_test

// Graceful handovers between elector processes (see childMain), measured
// to the follower's first committed fenced write: the leader process gets
// SIGTERM, which cancels its Lead's context; its fn finishes the write it
// is making and returns; the Elector hands the term over to the follower
// waiting in hoplock_wait (hoplock_handoff), or, on a backend that is not
// a hoplock.HandOffer, releases it and the follower's wait takes the freed
// lease (release and race). The follower's fn begins with one INSERT into
// proc_writes, fenced by a hoplock_fenced trigger on the table. Every
// process's pool is warm when it campaigns (warmUp), as a process that
// has run a while has it. Each step is timed on this machine's one clock:
// the processes log their own wall clock, the server gives ended_at and
// commit timestamps. HOPLOCK_BENCH_VERBOSE logs each round.

import (
	"database/sql"
	"fmt"
	"math"
	"os"
	"sort"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// childFirst is a term's first write, as its process logged it.
type childFirst struct {
	gen     int64
	began   time.Time // fn began
	wrote   time.Time // the INSERT's COMMIT returned
	waited  time.Time // the Elector's Wait returned the term; zero if not
	outcome string    // "committed", or the SQLSTATE
}

// parseFirst reads a "first GEN BEGAN WROTE WAITED OUTCOME" line.
func parseFirst(f []string) childFirst {
	ns := func(s string) time.Time {
		n, _ := strconv.ParseInt(s, 10, 64)
		if n == 0 {
			return time.Time{}
		}
		return time.Unix(0, n)
	}
	gen, _ := strconv.ParseInt(f[1], 10, 64)
	return childFirst{gen: gen, began: ns(f[2]), wrote: ns(f[3]), waited: ns(f[4]), outcome: f[5]}
}

func (c *child) waitFirst(t *testing.T, within time.Duration) childFirst {
	t.Helper()
	return awaitChild(t, c, c.firsts, within, "no first write")
}

// stamp returns the time of the line "word GEN WALL" the child printed for
// term gen (the last such line), or zero.
func (c *child) stamp(word string, gen int64) time.Time {
	var at time.Time
	for _, line := range c.output() {
		f := strings.Fields(line)
		if len(f) >= 3 && f[0] == word && f[1] == strconv.FormatInt(gen, 10) {
			ns, _ := strconv.ParseInt(f[2], 10, 64)
			at = time.Unix(0, ns)
		}
	}
	return at
}

// dials counts the connections the child opened from from to to.
func (c *child) dials(from, to time.Time) int {
	n := 0
	for _, line := range c.output() {
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == "dial" {
			ns, _ := strconv.ParseInt(f[1], 10, 64)
			if at := time.Unix(0, ns); !at.Before(from) && !at.After(to) {
				n++
			}
		}
	}
	return n
}

// fenceProcWrites fences the rows of lease name in proc_writes with a
// hoplock_fenced trigger (dropped when the test ends): a row of another
// generation than the term holding the lease now is refused, and a single
// INSERT is a fenced write.
func fenceProcWrites(t *testing.T, name string) {
	t.Helper()
	trigger := fmt.Sprintf(`"fenced %d"`, names.Add(1))
	lit := "'" + strings.ReplaceAll(name, "'", "''") + "'"
	adminExec(t, q(`CREATE TRIGGER `+trigger+` BEFORE INSERT OR UPDATE ON proc_writes FOR EACH ROW
		WHEN (NEW.name = `+lit+`) EXECUTE FUNCTION %s.hoplock_fenced(`+lit+`, 'generation')`))
	t.Cleanup(func() { adminExec(t, `DROP TRIGGER IF EXISTS `+trigger+` ON proc_writes`) })
}

// A kind of graceful handover, as the stopped leader process makes it.
type handoverKind struct {
	name string
	env  []string // the leader process's
	ends string   // how its term ends in the history
	what string
}

var (
	// the Elector hands the term to the waiting follower
	handOff = handoverKind{name: "handoff", ends: "handed off",
		what: "graceful stop, handed over"}
	// it releases the term (its backend is no HandOffer), and the
	// follower's wait takes the freed lease
	releaseRace = handoverKind{name: "release", env: []string{"HOPLOCK_TEST_HANDOVER=release"}, ends: "released",
		what: "graceful stop, released (race)"}
	// the same two, with the stopped leader's own teardown out of the
	// way: its LISTEN connection dropped, its pool closed and its process
	// ended 300 ms after its Lead returned, not while the term changes
	// hands (diagnostics); and the exit alone held back (the Elector
	// still drops the LISTEN connection when the stop cancels Lead's
	// context)
	late        = []string{"HOPLOCK_TEST_LISTEN_LATE=1", "HOPLOCK_TEST_EXIT_LATE=300ms"}
	handOffLate = handoverKind{name: "handoff-late", env: late, ends: "handed off", what: "graceful stop, handed over, the leader's teardown 300 ms later"}
	releaseLate = handoverKind{name: "release-late", env: append([]string{"HOPLOCK_TEST_HANDOVER=release"}, late...), ends: "released", what: "graceful stop, released (race), the leader's teardown 300 ms later"}
	handOffExit = handoverKind{name: "handoff-exit-late", env: late[1:], ends: "handed off", what: "graceful stop, handed over, the leader's exit 300 ms later"}
	// the Elector's defaults (above) linger 100 ms after a graceful stop's
	// handoff or release before Lead returns; these do not linger at all
	noLinger        = []string{"HOPLOCK_TEST_LINGER=-1ms"}
	handOffNoLinger = handoverKind{name: "handoff-nolinger", env: noLinger, ends: "handed off", what: "graceful stop, handed over, HandoffLinger off"}
	releaseNoLinger = handoverKind{name: "release-nolinger", env: append([]string{"HOPLOCK_TEST_HANDOVER=release"}, noLinger...), ends: "released", what: "graceful stop, released (race), HandoffLinger off"}
	handoverKinds   = []handoverKind{handOff, releaseRace, handOffNoLinger, releaseNoLinger, handOffLate, releaseLate, handOffExit}
)

// handoverRound is one graceful handover, timed.
type handoverRound struct {
	kind   handoverKind
	signal time.Time // SIGTERM sent to the leader process
	// the leader: its fn found its context done and returned; its Lead
	// returned
	fnReturned, leadReturned time.Time
	// the server: the old term's end (ended_at in the history), the
	// commit of the transaction that ended it (its commit timestamp; zero
	// without track_commit_timestamp), and how it ended
	endedAt, endCommit time.Time
	how                string
	// the commit of the follower's term: of the transaction of its wait
	// that took the term (the lease row's last change)
	takeCommit time.Time
	first      childFirst // the follower's
	// connections the leader and the follower opened from the signal to
	// the follower's first write
	leaderDials, followerDials int
}

// gracefulRounds stops the leader process with SIGTERM, round after round
// (kinds[r] the handover of round r), each time with a follower process
// waiting in hoplock_wait for settle already, and times each handover to
// the follower's first committed fenced write. The processes' pools are
// warm (warmUp), with as many connections as the Elector and fn use: more
// would cost the stopped leader more to tear down. It checks the
// history.
func gracefulRounds(t *testing.T, kinds []handoverKind, settle time.Duration) []handoverRound {
	setupProcWrites(t)
	name := leaseName(t)
	fenceProcWrites(t, name)
	const ttl = 10 * time.Second
	var all []*child
	// process i is stopped in round i
	spawn := func(i int) *child {
		// three connections: the LISTEN, the wait, fn's writes
		env := []string{"HOPLOCK_TEST_FENCED=1", "HOPLOCK_TEST_WARM=3"}
		if i < len(kinds) {
			env = append(env, kinds[i].env...)
		}
		c := startChild(t, name, fmt.Sprintf("p%d", i), ttl, false, env...)
		all = append(all, c)
		return c
	}
	commitTS := func(row string) string { return "pg_catalog.pg_xact_commit_timestamp(" + row + ".xmin)" }
	var on bool
	if err := adminDB(t).QueryRow(`SELECT current_setting('track_commit_timestamp')::boolean`).Scan(&on); err != nil {
		t.Fatal(err)
	}
	if !on {
		t.Log("track_commit_timestamp is off: the steps are timed from the old term's ended_at, and without the take's commit")
		commitTS = func(string) string { return "NULL::timestamptz" }
	}
	leader := spawn(0)
	leaderGen := leader.waitFirst(t, 10*time.Second).gen
	follower := spawn(1)
	var out []handoverRound
	for r, kind := range kinds {
		waitWaiting(t, follower.owner)
		time.Sleep(settle)
		h := handoverRound{kind: kind, signal: leader.term()}
		h.first = follower.waitFirst(t, ttl+10*time.Second)
		if h.first.outcome != "committed" {
			t.Errorf("round %d: %s's first write with generation %d: %s", r, follower.owner, h.first.gen, h.first.outcome)
		}
		// from the internal tables, for the commit timestamps: of the
		// old term's end (its history row's last change), of the new
		// term's take (the lease row's, before any renewal)
		var ended, endCommit, takeCommit sql.NullTime
		var how sql.NullString
		var gen int64
		if err := adminDB(t).QueryRow(`SELECT h.ended_at, h.how, `+commitTS("h")+`, `+commitTS("l")+`, l.generation
			FROM hoplock_internal.history AS h, hoplock_internal.lease AS l
			WHERE h.name = $1 AND h.generation = $2 AND l.name = $1`, name, leaderGen).Scan(&ended, &how, &endCommit, &takeCommit, &gen); err != nil {
			t.Fatal(err)
		}
		h.endedAt, h.endCommit, h.how = ended.Time, endCommit.Time, how.String
		if gen == h.first.gen {
			h.takeCommit = takeCommit.Time
		}
		select {
		case <-leader.exited:
		case <-time.After(10 * time.Second):
			t.Fatalf("%s did not exit after SIGTERM", leader.owner)
		}
		h.fnReturned = leader.stamp("end", leaderGen)
		h.leadReturned = leader.stamp("returned", leaderGen)
		h.leaderDials = leader.dials(h.signal, h.first.wrote)
		h.followerDials = follower.dials(h.signal, h.first.wrote)
		out = append(out, h)
		if os.Getenv("HOPLOCK_BENCH_VERBOSE") != "" {
			h.log(t, r)
		}
		leader, follower, leaderGen = follower, spawn(r+2), h.first.gen
	}
	time.Sleep(50 * time.Millisecond)
	for _, c := range all {
		c.cmd.Process.Signal(syscall.SIGTERM)
	}
	for _, c := range all {
		<-c.exited
	}
	checkHistory(t, name, sections(all...))
	return out
}

// log logs round r, in milliseconds.
func (h handoverRound) log(t *testing.T, r int) {
	ms := func(a, b time.Time) string {
		if a.IsZero() || b.IsZero() {
			return "-"
		}
		return fmt.Sprintf("%.2f", float64(b.Sub(a).Microseconds())/1000)
	}
	f := h.first
	t.Logf("round %d %s: %s ms | SIGTERM..fn returned %s, ..end committed %s (ended_at..commit %s), ..take committed %s, ..Wait returned %s, ..fn %s, ..write committed %s | Lead returned %s after the end's commit | dials: leader %d, follower %d | %s",
		r, h.kind.name, ms(h.signal, f.wrote), ms(h.signal, h.fnReturned), ms(h.fnReturned, h.endCommit), ms(h.endedAt, h.endCommit),
		ms(h.endCommit, h.takeCommit), ms(h.takeCommit, f.waited), ms(f.waited, f.began), ms(f.began, f.wrote),
		ms(h.endCommit, h.leadReturned), h.leaderDials, h.followerDials, h.how)
}

// spread summarises measurements with p95 too.
type spread []time.Duration

func (d spread) String() string {
	if len(d) == 0 {
		return "(none)"
	}
	p := durations(d).percentile
	r := func(x time.Duration) time.Duration { return x.Round(10 * time.Microsecond) }
	return fmt.Sprintf("p50 %v, p95 %v, p99 %v, max %v (n=%d)", r(p(0.5)), r(p(0.95)), r(p(0.99)), r(p(1)), len(d))
}

// handoverStats are a kind's rounds, taken apart.
type handoverStats struct {
	total, fnStart, fnReturnToFn                        spread
	leaderFn, leaderEnd, endToFn, endToTake, takeToWait spread
	waitToFn, fnToWrite                                 spread
	how                                                 map[string]int
	leaderDials, followerDials                          int // rounds with a dial
}

func statsOf(rounds []handoverRound, kind handoverKind) handoverStats {
	s := handoverStats{how: map[string]int{}}
	add := func(d *spread, from, to time.Time) {
		if !from.IsZero() && !to.IsZero() {
			*d = append(*d, to.Sub(from))
		}
	}
	for _, h := range rounds {
		if h.kind.name != kind.name {
			continue
		}
		f := h.first
		end := h.endCommit
		if end.IsZero() {
			end = h.endedAt
		}
		add(&s.total, h.signal, f.wrote)
		add(&s.fnStart, h.signal, f.began)
		add(&s.fnReturnToFn, h.fnReturned, f.began)
		add(&s.leaderFn, h.signal, h.fnReturned)
		add(&s.leaderEnd, h.fnReturned, end)
		add(&s.endToFn, end, f.began)
		add(&s.endToTake, end, h.takeCommit)
		add(&s.takeToWait, h.takeCommit, f.waited)
		add(&s.waitToFn, f.waited, f.began)
		add(&s.fnToWrite, f.began, f.wrote)
		s.how[h.how]++
		if h.leaderDials > 0 {
			s.leaderDials++
		}
		if h.followerDials > 0 {
			s.followerDials++
		}
	}
	return s
}

// report logs a kind's figures, and prints the first measured ones as
// measurements (scripts/test-go collects them).
func (s handoverStats) report(t *testing.T, what string, measured int) {
	var hows []string
	for how, n := range s.how {
		hows = append(hows, fmt.Sprintf("%s %d", how, n))
	}
	sort.Strings(hows)
	lines := []string{
		fmt.Sprintf("%s: SIGTERM -> follower's first fenced write committed: %v", what, s.total),
		fmt.Sprintf("%s: SIGTERM -> follower fn start: %v", what, s.fnStart),
		fmt.Sprintf("%s: its fn found ctx done and returned -> follower fn start: %v", what, s.fnReturnToFn),
		fmt.Sprintf("%s, steps: SIGTERM -> leader's fn returned: %v", what, s.leaderFn),
		fmt.Sprintf("%s, steps: leader's fn returned -> its term's end committed (server): %v", what, s.leaderEnd),
		fmt.Sprintf("%s, steps: term's end committed (server) -> follower fn start: %v", what, s.endToFn),
		fmt.Sprintf("%s, steps: term's end committed -> follower's term committed (its wait's take, server): %v", what, s.endToTake),
		fmt.Sprintf("%s, steps: follower's term committed (server) -> its Wait returned: %v", what, s.takeToWait),
		fmt.Sprintf("%s, steps: follower's Wait returned -> its fn start: %v", what, s.waitToFn),
		fmt.Sprintf("%s, steps: follower fn start -> its first fenced write committed: %v", what, s.fnToWrite),
		fmt.Sprintf("%s: terms ended %s; rounds in which the leader opened a connection %d, the follower %d",
			what, strings.Join(hows, ", "), s.leaderDials, s.followerDials),
	}
	for i, l := range lines {
		t.Log(l)
		if i < measured {
			fmt.Printf("measure: %s\n", l)
		}
	}
}

// The handover the issue asks for, against the one it replaces: SIGTERM of
// the leader process to the follower's first fenced write committed,
// handed over (hoplock_handoff) and released (the follower's hoplock_wait
// takes the freed lease); and both once more with the stopped leader's
// own teardown out of the way, to show what it costs. 50 rounds
// (HOPLOCK_BENCH_ROUNDS) of each kind, interleaved, between the same kind
// of processes; HOPLOCK_BENCH_KINDS picks the kinds (handoff, release,
// handoff-nolinger, release-nolinger -- the default -- and handoff-late,
// release-late, handoff-exit-late). A
// benchmark: it runs only with HOPLOCK_BENCH_HANDOVER set
// (bench/handover.sh sets it).
func TestProcessHandoverBench(t *testing.T) {
	testDSN(t)
	if os.Getenv("HOPLOCK_BENCH_HANDOVER") == "" {
		t.Skip("a benchmark: HOPLOCK_BENCH_HANDOVER is not set (bench/handover.sh sets it)")
	}
	n := 50
	if v, err := strconv.Atoi(os.Getenv("HOPLOCK_BENCH_ROUNDS")); err == nil && v > 0 {
		n = v
	}
	const settle = 100 * time.Millisecond
	variants := []handoverKind{handOff, releaseRace, handOffNoLinger, releaseNoLinger}
	if v := os.Getenv("HOPLOCK_BENCH_KINDS"); v != "" {
		variants = nil
	next:
		for _, name := range strings.Split(v, ",") {
			for _, k := range handoverKinds {
				if k.name == name {
					variants = append(variants, k)
					continue next
				}
			}
			t.Fatalf("HOPLOCK_BENCH_KINDS: no kind %q", name)
		}
	}
	var kinds []handoverKind
	for i := 0; i < n; i++ {
		kinds = append(kinds, variants...)
	}
	loadBefore := loadAverage()
	began := time.Now()
	rounds := gracefulRounds(t, kinds, settle)
	loadAfter := loadAverage()
	var stats []handoverStats
	for _, kind := range variants {
		s := statsOf(rounds, kind)
		if s.how[kind.ends] != n {
			t.Errorf("%s: %d of %d terms ended %q: %v", kind.name, s.how[kind.ends], n, kind.ends, s.how)
		}
		if p := durations(s.total).percentile(1); p > 2*time.Second {
			t.Errorf("%s: a handover took %v, as if the follower waited for the TTL", kind.name, p)
		}
		s.report(t, fmt.Sprintf("%s (%d rounds of %d kinds interleaved, settle %v)", kind.what, n, len(variants), settle), 100)
		stats = append(stats, s)
	}
	if out := os.Getenv("HOPLOCK_BENCH_OUT"); out != "" {
		md := handoverTables(variants, stats, n, settle, began, loadBefore, loadAfter)
		if err := os.WriteFile(out, []byte(md), 0o644); err != nil {
			t.Error(err)
		}
	}
}

// loadAverage returns the first three fields of /proc/loadavg, or "?".
func loadAverage() string {
	b, err := os.ReadFile("/proc/loadavg")
	if f := strings.Fields(string(b)); err == nil && len(f) >= 3 {
		return strings.Join(f[:3], " ")
	}
	return "?"
}

// handoverTables renders the benchmark's figures in Markdown.
func handoverTables(kinds []handoverKind, stats []handoverStats, n int, settle time.Duration, began time.Time, loadBefore, loadAfter string) string {
	var b strings.Builder
	ms := func(d time.Duration) string { return fmt.Sprintf("%.2f", float64(d.Microseconds())/1000) }
	rank := "by nearest rank"
	if int(math.Ceil(0.99*float64(n))) == n {
		rank += fmt.Sprintf(", which with %d rounds is the slowest", n)
	}
	fmt.Fprintf(&b, "Run %s, %d rounds of each kind interleaved (%s), each with a follower process waiting in `hoplock_wait` for %v or more; load average %s before, %s after. SIGTERM of the leader process → the follower's first fenced write committed, in ms (goal: p99 ≤ 5 ms; p99 %s):\n\n",
		began.UTC().Format("2006-01-02 15:04 UTC"), n, kindNames(kinds), settle, loadBefore, loadAfter, rank)
	b.WriteString("| handover | p50 | p95 | p99 | max | p99 ≤ 5 ms | terms ended |\n| --- | --- | --- | --- | --- | --- | --- |\n")
	for i, k := range kinds {
		s := stats[i]
		p := durations(s.total).percentile
		goal := "met"
		if p(0.99) > 5*time.Millisecond {
			goal = "missed"
		}
		var hows []string
		for how, c := range s.how {
			hows = append(hows, fmt.Sprintf("%s %d", how, c))
		}
		sort.Strings(hows)
		fmt.Fprintf(&b, "| %s | %s | %s | %s | %s | %s | %s |\n", k.what, ms(p(0.5)), ms(p(0.95)), ms(p(0.99)), ms(p(1)), goal, strings.Join(hows, ", "))
	}
	b.WriteString("\nTaken apart, p50 / p99 in ms (the server's clock, from `hoplock_history` and the commit timestamps, and the processes' are the one clock of this machine):\n\n| step |")
	for _, k := range kinds {
		fmt.Fprintf(&b, " %s |", k.name)
	}
	b.WriteString("\n| --- |")
	for range kinds {
		b.WriteString(" --- |")
	}
	b.WriteString("\n")
	steps := []struct {
		what string
		get  func(handoverStats) spread
	}{
		{"SIGTERM → the leader's fn returned (it finishes the write it is making)", func(s handoverStats) spread { return s.leaderFn }},
		{"the leader's fn returned → its term's end committed (handoff or release)", func(s handoverStats) spread { return s.leaderEnd }},
		{"the end committed → the follower's term committed (its wait took it)", func(s handoverStats) spread { return s.endToTake }},
		{"the follower's term committed → its Wait returned", func(s handoverStats) spread { return s.takeToWait }},
		{"its Wait returned → its fn began", func(s handoverStats) spread { return s.waitToFn }},
		{"its fn began → its first fenced write committed (one INSERT)", func(s handoverStats) spread { return s.fnToWrite }},
		{"(the end committed → the follower's fn began)", func(s handoverStats) spread { return s.endToFn }},
		{"(SIGTERM → the follower's fn began)", func(s handoverStats) spread { return s.fnStart }},
	}
	for _, st := range steps {
		fmt.Fprintf(&b, "| %s |", st.what)
		for _, s := range stats {
			d := st.get(s)
			if len(d) == 0 {
				b.WriteString(" – |")
				continue
			}
			p := durations(d).percentile
			fmt.Fprintf(&b, " %s / %s |", ms(p(0.5)), ms(p(0.99)))
		}
		b.WriteString("\n")
	}
	b.WriteString("| rounds in which the leader / the follower opened a connection |")
	for _, s := range stats {
		fmt.Fprintf(&b, " %d / %d |", s.leaderDials, s.followerDials)
	}
	b.WriteString("\n")
	return b.String()
}

func kindNames(kinds []handoverKind) string {
	var names []string
	for _, k := range kinds {
		names = append(names, k.name)
	}
	return strings.Join(names, ", ")
}

// The Elector's backend as a child sees it: with HOPLOCK_TEST_HANDOVER=release
// the Elector finds no hoplock.HandOffer in it, otherwise it does.
func TestChildBackendHandOffer(t *testing.T) {
	if _, ok := any(childBackend{}).(hoplock.HandOffer); ok {
		t.Error("childBackend is a HandOffer: the release variant would hand over")
	}
	if _, ok := any(handingBackend{}).(hoplock.HandOffer); !ok {
		t.Error("handingBackend is no HandOffer")
	}
	for _, b := range []any{childBackend{}, handingBackend{}} {
		for what, ok := range map[string]bool{
			"Waiter":          is[hoplock.Waiter](b),
			"Renewer":         is[hoplock.Renewer](b),
			"Releaser":        is[hoplock.Releaser](b),
			"HolderReader":    is[hoplock.HolderReader](b),
			"Watcher":         is[hoplock.Watcher](b),
			"CandidateWaiter": is[hoplock.CandidateWaiter](b),
			"Proclaimer":      is[hoplock.Proclaimer](b),
		} {
			if !ok {
				t.Errorf("%T is no %s", b, what)
			}
		}
	}
}

func is[T any](v any) bool {
	_, ok := v.(T)
	return ok
}
