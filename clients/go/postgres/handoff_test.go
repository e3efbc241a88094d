package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

// candidate is an Elector of the lease name on a pool of its own, that
// waits in the server for as long as the test runs (Poll a minute), with
// a priority and a value.
func candidate(t *testing.T, name, owner string, priority int) *hoplock.Elector {
	t.Helper()
	db := openNode(t, "hoplock-test-cand-"+owner).db
	e := elector(postgres.New(db, name, postgres.Options{Schema: testSchema()}), owner, 3*time.Second)
	e.Poll = time.Minute
	e.Priority = priority
	e.Value = "addr-" + owner
	return e
}

// isCandidate reports whether owner waits in hoplock_wait for name.
func isCandidate(t *testing.T, name, owner string) bool {
	t.Helper()
	var n int
	err := adminDB(t).QueryRow(q(`SELECT count(*) FROM %s.hoplock_candidates WHERE name = $1 AND owner = $2`), name, owner).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// Handoff gives the term to the best candidate (priority first), or to
// the one named; the new leader's fn starts with its value, any process
// reads it with Leader, and the old leader's context ends with
// ErrHandedOff. A handoff to nobody waiting, or by an Elector that does
// not lead, changes nothing.
func TestHandoffToCandidate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	ea, eb, ec := candidate(t, name, "A", 0), candidate(t, name, "B", 0), candidate(t, name, "C", 5)
	a := campaign(ctx, ea, nil)
	sa := a.waitStarted(t, 5*time.Second)
	if sa.lease.Value != "addr-A" {
		t.Errorf("A's lease has value %q", sa.lease.Value)
	}
	observer := &hoplock.Elector{Backend: postgres.New(adminDB(t), name, postgres.Options{Schema: testSchema()})}
	st, v, err := observer.Leader(ctx)
	if err != nil || st.Owner != "A" || st.Generation != sa.lease.Generation || v != "addr-A" {
		t.Fatalf("Leader = %+v, %q, %v; want A, addr-A", st, v, err)
	}
	if err := eb.Handoff(ctx, ""); !errors.Is(err, hoplock.ErrNoLease) {
		t.Errorf("Handoff by an Elector that does not lead: %v", err)
	}
	if err := ea.Handoff(ctx, ""); !errors.Is(err, hoplock.ErrNoCandidate) {
		t.Errorf("Handoff with nobody waiting: %v", err)
	}
	b := campaign(ctx, eb, nil)
	eventually(t, 5*time.Second, "B waits", func() bool { return isCandidate(t, name, "B") })
	c := campaign(ctx, ec, nil)
	eventually(t, 5*time.Second, "C waits", func() bool { return isCandidate(t, name, "C") })
	if err := ea.Handoff(ctx, "Z"); !errors.Is(err, hoplock.ErrNoCandidate) {
		t.Errorf("Handoff to an owner not waiting: %v", err)
	}
	if o, g, _ := holder(t, name); o != "A" || g != sa.lease.Generation {
		t.Fatalf("after failed handoffs the holder is %s/%d", o, g)
	}

	// to the first: C, of the higher priority, though B waits longer
	t0 := time.Now()
	if err := ea.Handoff(ctx, ""); err != nil {
		t.Fatalf("Handoff: %v", err)
	}
	la := a.waitLost(t, 2*time.Second)
	if !errors.Is(la.cause, hoplock.ErrHandedOff) {
		t.Errorf("A lost for %v, want ErrHandedOff", la.cause)
	}
	sc := c.waitStarted(t, 2*time.Second)
	if err := <-a.done; !errors.Is(err, context.Canceled) {
		t.Errorf("A's Lead = %v", err)
	}
	if _, how := termEnd(t, name, sa.lease.Generation); how != "handed off" {
		t.Errorf("A's term ended by %q, want handed off", how)
	}
	if sc.lease.Value != "addr-C" || sc.lease.Generation <= sa.lease.Generation {
		t.Errorf("C's lease %+v after generation %d", sc.lease, sa.lease.Generation)
	}
	if st, v, err := observer.Leader(ctx); err != nil || st.Owner != "C" || v != "addr-C" {
		t.Errorf("Leader = %+v, %q, %v; want C, addr-C", st, v, err)
	}
	fmt.Printf("measure: Elector.Handoff called -> the candidate's fn running: %v\n", sc.at.Sub(t0).Round(10*time.Microsecond))

	// to the one named
	a = campaign(ctx, ea, nil)
	eventually(t, 5*time.Second, "A waits", func() bool { return isCandidate(t, name, "A") })
	if err := ec.Handoff(ctx, "B"); err != nil {
		t.Fatalf("Handoff to B: %v", err)
	}
	if lc := c.waitLost(t, 2*time.Second); !errors.Is(lc.cause, hoplock.ErrHandedOff) {
		t.Errorf("C lost for %v", lc.cause)
	}
	sb := b.waitStarted(t, 2*time.Second)
	if sb.lease.Owner != "B" || sb.lease.Value != "addr-B" {
		t.Errorf("B's lease %+v", sb.lease)
	}
	<-c.done
	close(b.stop)
	<-b.done
	a.waitStarted(t, 2*time.Second)
	close(a.stop)
	<-a.done
	if _, _, err := observer.Leader(ctx); !errors.Is(err, hoplock.ErrNoLease) {
		t.Errorf("Leader with nobody leading: %v", err)
	}
}

// When Lead's context ends while it leads, the Elector hands the term to
// the waiting candidate instead of releasing it; with nobody waiting it
// releases.
func TestGracefulStopHandsOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	ea, eb := candidate(t, name, "A", 0), candidate(t, name, "B", 0)
	actx, stopA := context.WithCancel(ctx)
	a := campaign(actx, ea, nil)
	sa := a.waitStarted(t, 5*time.Second)
	b := campaign(ctx, eb, nil)
	eventually(t, 5*time.Second, "B waits", func() bool { return isCandidate(t, name, "B") })
	t0 := time.Now()
	stopA()
	sb := b.waitStarted(t, 2*time.Second)
	<-a.done
	if _, how := termEnd(t, name, sa.lease.Generation); how != "handed off" {
		t.Errorf("A's term ended by %q, want handed off", how)
	}
	if sb.lease.AcquiredAt.IsZero() || sb.lease.Value != "addr-B" {
		t.Errorf("B's lease %+v", sb.lease)
	}
	fmt.Printf("measure: graceful stop (Lead's context cancelled) -> the candidate's fn running: %v\n", sb.at.Sub(t0).Round(10*time.Microsecond))

	// nobody waits: released
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	close(b.stop)
	<-b.done
	b = campaign(bctx, eb, nil)
	sb = b.waitStarted(t, 5*time.Second)
	stopB()
	<-b.done
	if _, how := termEnd(t, name, sb.lease.Generation); how != "released" {
		t.Errorf("B's term ended by %q, want released", how)
	}
}

// A step-down request reaches the leader at its next renewal: its fn's
// context ends with ErrStepDown while the term still holds, and when fn
// returns the Elector hands the term to the waiting candidate. Under Run,
// the term is handed over at once, reported lost with ErrStepDown.
func TestStepDownHandsOff(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	ea, eb := candidate(t, name, "A", 0), candidate(t, name, "B", 0)
	ea.TTL = 900 * time.Millisecond
	a := campaign(ctx, ea, nil)
	sa := a.waitStarted(t, 5*time.Second)
	b := campaign(ctx, eb, nil)
	eventually(t, 5*time.Second, "B waits", func() bool { return isCandidate(t, name, "B") })
	adminExec(t, q("SELECT %s.hoplock_request_step_down($1)"), name)
	la := a.waitLost(t, 2*time.Second)
	if !errors.Is(la.cause, hoplock.ErrStepDown) {
		t.Errorf("A's context ended for %v, want ErrStepDown", la.cause)
	}
	sb := b.waitStarted(t, 2*time.Second)
	<-a.done
	if _, how := termEnd(t, name, sa.lease.Generation); how != "handed off" {
		t.Errorf("A's term ended by %q, want handed off", how)
	}
	if sb.at.Before(la.at) {
		t.Errorf("B's fn started before A's fn saw its context end")
	}

	// Run
	ea.TTL = 900 * time.Millisecond
	rctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	events := ea.Run(rctx)
	eventually(t, 5*time.Second, "A waits", func() bool { return isCandidate(t, name, "A") })
	close(b.stop)
	<-b.done
	var gen int64
	for ev := range events {
		switch {
		case ev.Kind == hoplock.EventAcquired && gen == 0:
			gen = ev.Lease.Generation
			b = campaign(ctx, eb, nil)
			eventually(t, 5*time.Second, "B waits", func() bool { return isCandidate(t, name, "B") })
			adminExec(t, q("SELECT %s.hoplock_request_step_down($1)"), name)
		case ev.Kind == hoplock.EventLost:
			if !errors.Is(ev.Err, hoplock.ErrStepDown) {
				t.Errorf("Run lost its term for %v, want ErrStepDown", ev.Err)
			}
			b.waitStarted(t, 3*time.Second)
			if _, how := termEnd(t, name, gen); how != "handed off" {
				t.Errorf("Run's term ended by %q, want handed off", how)
			}
			stopRun()
			for range events {
			}
		}
	}
	close(b.stop)
	<-b.done
}

// Against a hoplock without hoplock_handoff and hoplock_proclaim (1.1: a
// schema here with the 1.1 functions alone, calling hoplock's), an
// Elector with a priority and a value leads all the same, Handoff says
// ErrUnsupported, and a graceful stop releases.
func TestHandoffUnsupported(t *testing.T) {
	const old = "hoplock_test_v11"
	adminExec(t, "DROP SCHEMA IF EXISTS "+old+" CASCADE")
	adminExec(t, "CREATE SCHEMA "+old)
	for _, f := range []string{
		"hoplock_wait(name text, owner text, ttl interval, timeout interval, session_bound boolean) RETURNS %s.hoplock_lease LANGUAGE sql AS 'SELECT %s.hoplock_wait(name, owner, ttl, timeout, session_bound)'",
		"hoplock_renew(name text, owner text, ttl interval, generation bigint) RETURNS %s.hoplock_lease LANGUAGE sql AS 'SELECT %s.hoplock_renew(name, owner, ttl, generation)'",
		"hoplock_release(name text, owner text, generation bigint) RETURNS boolean LANGUAGE sql AS 'SELECT %s.hoplock_release(name, owner, generation)'",
		"hoplock_release(name text, owner text) RETURNS boolean LANGUAGE sql AS 'SELECT %s.hoplock_release(name, owner)'",
		"hoplock_holder(name text) RETURNS %s.hoplock_lease LANGUAGE sql AS 'SELECT %s.hoplock_holder(name)'",
	} {
		adminExec(t, q("CREATE FUNCTION "+old+"."+f))
	}
	t.Cleanup(func() { adminExec(t, "DROP SCHEMA "+old+" CASCADE") })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	mk := func(owner string) *hoplock.Elector {
		db := openNode(t, "hoplock-test-v11-"+owner).db
		e := elector(postgres.New(db, name, postgres.Options{Schema: old}), owner, 3*time.Second)
		e.Priority, e.Value = 3, "addr-"+owner
		return e
	}
	ea, eb := mk("A"), mk("B")
	actx, stopA := context.WithCancel(ctx)
	a := campaign(actx, ea, nil)
	sa := a.waitStarted(t, 5*time.Second)
	if sa.lease.Value != "" {
		t.Errorf("value %q from a server that keeps none", sa.lease.Value)
	}
	if err := ea.Handoff(ctx, ""); !errors.Is(err, hoplock.ErrUnsupported) {
		t.Errorf("Handoff = %v, want ErrUnsupported", err)
	}
	b := campaign(ctx, eb, nil)
	time.Sleep(200 * time.Millisecond)
	stopA()
	b.waitStarted(t, 2*time.Second)
	<-a.done
	if _, how := termEnd(t, name, sa.lease.Generation); how != "released" {
		t.Errorf("A's term ended by %q, want released", how)
	}
	close(b.stop)
	<-b.done
}

// A step-down request that names a candidate hands the term to that
// candidate, not to the first in order (under Run); one that names an
// owner who does not wait hands it to the first candidate (under Lead).
func TestStepDownToNamedCandidate(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	ea, eb, ec := candidate(t, name, "A", 0), candidate(t, name, "B", 0), candidate(t, name, "C", 0)
	for _, e := range []*hoplock.Elector{ea, eb, ec} {
		e.TTL = 900 * time.Millisecond
	}

	// Run leads as C; B, then A wait: asked to step down to A, C hands
	// the term to A, though B waits longer
	rctx, stopRun := context.WithCancel(ctx)
	defer stopRun()
	events := ec.Run(rctx)
	var (
		a, b *leader
		gen  int64
		sa   startInfo
	)
	for gen == 0 || a == nil {
		ev := <-events
		switch {
		case ev.Kind == hoplock.EventAcquired && gen == 0:
			gen = ev.Lease.Generation
			b = campaign(ctx, eb, nil)
			eventually(t, 5*time.Second, "B waits", func() bool { return isCandidate(t, name, "B") })
			a = campaign(ctx, ea, nil)
			eventually(t, 5*time.Second, "A waits", func() bool { return isCandidate(t, name, "A") })
			adminExec(t, q("SELECT %s.hoplock_request_step_down($1, 'A')"), name)
		case ev.Kind == hoplock.EventLost:
			t.Fatalf("Run lost its term before it was asked to step down: %v", ev.Err)
		}
	}
	for ev := range events {
		if ev.Kind != hoplock.EventLost {
			continue
		}
		if !errors.Is(ev.Err, hoplock.ErrStepDown) || ev.Lease.Generation != gen {
			t.Errorf("Run lost generation %d for %v, want %d for ErrStepDown", ev.Lease.Generation, ev.Err, gen)
		}
		break
	}
	sa = a.waitStarted(t, 3*time.Second)
	if sa.lease.Owner != "A" || sa.lease.Generation <= gen {
		t.Errorf("A's lease %+v after generation %d", sa.lease, gen)
	}
	if _, how := termEnd(t, name, gen); how != "handed off" {
		t.Errorf("Run's term ended by %q, want handed off", how)
	}
	b.notStarted(t, 50*time.Millisecond)

	// Lead leads as A; B, then C (Run again) wait: asked to step down
	// to Z, who does not wait, A hands the term to the first, B
	eventually(t, 5*time.Second, "C waits", func() bool { return isCandidate(t, name, "C") })
	adminExec(t, q("SELECT %s.hoplock_request_step_down($1, 'Z')"), name)
	if la := a.waitLost(t, 2*time.Second); !errors.Is(la.cause, hoplock.ErrStepDown) {
		t.Errorf("A's context ended for %v, want ErrStepDown", la.cause)
	}
	sb := b.waitStarted(t, 2*time.Second)
	<-a.done
	if sb.lease.Owner != "B" || sb.lease.Generation <= sa.lease.Generation {
		t.Errorf("B's lease %+v after generation %d", sb.lease, sa.lease.Generation)
	}
	if _, how := termEnd(t, name, sa.lease.Generation); how != "handed off" {
		t.Errorf("A's term ended by %q, want handed off", how)
	}
	stopRun()
	for ev := range events {
		if ev.Kind == hoplock.EventAcquired {
			t.Errorf("Run acquired generation %d", ev.Lease.Generation)
		}
	}
	close(b.stop)
	<-b.done
}

// A candidate that waits with a priority above the running term's and
// preempt => true (a plain connection calling hoplock_wait) asks the
// Elector leading to step down to it; the Elector hands it the term, not
// to B, who waits longer at the same priority without preempting.
func TestPreemptingCandidateTakesOver(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	ea, eb := candidate(t, name, "A", 0), candidate(t, name, "B", 5)
	ea.TTL = 900 * time.Millisecond
	a := campaign(ctx, ea, nil)
	sa := a.waitStarted(t, 5*time.Second)
	b := campaign(ctx, eb, nil)
	eventually(t, 5*time.Second, "B waits", func() bool { return isCandidate(t, name, "B") })

	type waited struct {
		owner string
		gen   int64
		err   error
	}
	got := make(chan waited, 1)
	pdb := openNode(t, "hoplock-test-preempt").db
	go func() {
		var w waited
		w.err = pdb.QueryRowContext(ctx, q(`SELECT l.owner, l.generation
			FROM %s.hoplock_wait($1::text, 'P', '10 s', '20 s', false, 5, 'addr-P', preempt => true) AS l`),
			name).Scan(&w.owner, &w.gen)
		got <- w
	}()
	la := a.waitLost(t, 5*time.Second)
	if !errors.Is(la.cause, hoplock.ErrStepDown) {
		t.Errorf("A's context ended for %v, want ErrStepDown", la.cause)
	}
	<-a.done
	var w waited
	select {
	case w = <-got:
	case <-time.After(5 * time.Second):
		t.Fatal("P's hoplock_wait did not return")
	}
	if w.err != nil || w.owner != "P" || w.gen <= sa.lease.Generation {
		t.Fatalf("P's wait: %+v after generation %d", w, sa.lease.Generation)
	}
	if _, how := termEnd(t, name, sa.lease.Generation); how != "handed off" {
		t.Errorf("A's term ended by %q, want handed off", how)
	}
	b.notStarted(t, 100*time.Millisecond)
	adminExec(t, q("SELECT %s.hoplock_release($1, 'P', $2::bigint)"), name, w.gen)
	b.waitStarted(t, 2*time.Second)
	close(b.stop)
	<-b.done
}

// runStream is a Run's events, renewals left out.
type runStream struct {
	owner  string
	events <-chan hoplock.Event
}

func (s runStream) expect(t *testing.T, kind hoplock.EventKind, owner string) hoplock.Event {
	t.Helper()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				t.Fatalf("%s: Run's channel closed, waiting for %v", s.owner, kind)
			}
			if ev.Kind == hoplock.EventRenewed {
				continue
			}
			if ev.Kind != kind || ev.Lease.Owner != owner {
				t.Fatalf("%s: %v %s/%d (%v), want %v of %s", s.owner, ev.Kind, ev.Lease.Owner, ev.Lease.Generation, ev.Err, kind, owner)
			}
			return ev
		case <-time.After(5 * time.Second):
			t.Fatalf("%s: no %v within 5s", s.owner, kind)
		}
	}
}

// rest returns the events left, once the channel closes.
func (s runStream) rest(t *testing.T) []hoplock.Event {
	t.Helper()
	var evs []hoplock.Event
	limit := time.After(10 * time.Second)
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				return evs
			}
			evs = append(evs, ev)
		case <-limit:
			t.Fatalf("%s: Run's channel still open 10s after its context ended", s.owner)
		}
	}
}

// Two Electors under Run: the follower hears of the leader's term, with
// its value, as EventLeader; when the leader hands the term over, it hears
// of the new term the same way, following now, and the new leader gets
// EventAcquired for it, never EventLeader.
func TestRunReportsLeader(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	ea, eb := candidate(t, name, "A", 0), candidate(t, name, "B", 0)
	actx, stopA := context.WithCancel(ctx)
	defer stopA()
	bctx, stopB := context.WithCancel(ctx)
	defer stopB()
	a := runStream{"A", ea.Run(actx)}
	acqA := a.expect(t, hoplock.EventAcquired, "A")
	b := runStream{"B", eb.Run(bctx)}
	la := b.expect(t, hoplock.EventLeader, "A")
	if la.Lease.Generation != acqA.Lease.Generation || la.Lease.Value != "addr-A" || la.Lease.ExpiresAt.IsZero() {
		t.Errorf("B heard of %+v, want A's term %d with addr-A", la.Lease, acqA.Lease.Generation)
	}
	eventually(t, 5*time.Second, "B waits", func() bool { return isCandidate(t, name, "B") })

	t0 := time.Now()
	if err := ea.Handoff(ctx, "B"); err != nil {
		t.Fatalf("Handoff: %v", err)
	}
	if lost := a.expect(t, hoplock.EventLost, "A"); !errors.Is(lost.Err, hoplock.ErrHandedOff) {
		t.Errorf("A lost its term for %v, want ErrHandedOff", lost.Err)
	}
	lb := a.expect(t, hoplock.EventLeader, "B")
	heard := time.Since(t0)
	acqB := b.expect(t, hoplock.EventAcquired, "B")
	if lb.Lease.Generation != acqB.Lease.Generation || lb.Lease.Generation <= acqA.Lease.Generation || lb.Lease.Value != "addr-B" {
		t.Errorf("A heard of %+v; B acquired %d after %d", lb.Lease, acqB.Lease.Generation, acqA.Lease.Generation)
	}
	if o, g, _ := holder(t, name); o != "B" || g != acqB.Lease.Generation {
		t.Errorf("the holder is %s/%d", o, g)
	}
	fmt.Printf("measure: Elector.Handoff called -> the old leader's Run reports EventLeader of the new term: %v\n", heard.Round(10*time.Microsecond))

	stopA()
	for _, ev := range a.rest(t) {
		if ev.Kind != hoplock.EventRenewed {
			t.Errorf("A, following, after its context ended: %v %s/%d", ev.Kind, ev.Lease.Owner, ev.Lease.Generation)
		}
	}
	stopB()
	evs := b.rest(t)
	if n := len(evs); n == 0 || evs[n-1].Kind != hoplock.EventLost || !errors.Is(evs[n-1].Err, context.Canceled) {
		t.Errorf("B's last events %v", evs)
	}
	for _, ev := range evs {
		if ev.Kind == hoplock.EventLeader || ev.Kind == hoplock.EventAcquired {
			t.Errorf("B after its own term: %v %s/%d", ev.Kind, ev.Lease.Owner, ev.Lease.Generation)
		}
	}
}

// The renewals read step_down_to only when they report a step-down: none
// of a term's ordinary renewals does, the one that reports the request
// does, once.
func TestStepDownToReadOnlyOnStepDown(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	b := postgres.New(openNode(t, "hoplock-test-stepdownto").db, name, postgres.Options{Schema: testSchema()})
	type read struct {
		gen int64
		to  string
		err error
	}
	reads := make(chan read, 10)
	postgres.SetStepDownHook(b, func(gen int64, to string, err error) { reads <- read{gen, to, err} })
	ea := elector(b, "A", 300*time.Millisecond)
	eb := candidate(t, name, "B", 0)
	a := campaign(ctx, ea, nil)
	sa := a.waitStarted(t, 5*time.Second)
	bl := campaign(ctx, eb, nil)
	eventually(t, 5*time.Second, "B waits", func() bool { return isCandidate(t, name, "B") })
	time.Sleep(time.Second) // about ten renewals, every 100 ms
	var renewed time.Time
	err := adminDB(t).QueryRowContext(ctx, q(`SELECT renewed_at FROM %s.hoplock_leases WHERE name = $1`), name).Scan(&renewed)
	if err != nil {
		t.Fatal(err)
	}
	if renewed.Sub(sa.lease.AcquiredAt) < 700*time.Millisecond {
		t.Fatalf("A's term last renewed %v after it began", renewed.Sub(sa.lease.AcquiredAt))
	}
	select {
	case r := <-reads:
		t.Fatalf("step_down_to read after an ordinary renewal: %+v", r)
	default:
	}
	adminExec(t, q("SELECT %s.hoplock_request_step_down($1, 'B')"), name)
	// (5 s: a renewal every 100 ms learns of it, but a loaded machine --
	// valgrind beside this -- once took longer than 2 s)
	a.waitLost(t, 5*time.Second)
	bl.waitStarted(t, 5*time.Second)
	<-a.done
	select {
	case r := <-reads:
		if r.gen != sa.lease.Generation || r.to != "B" || r.err != nil {
			t.Errorf("step_down_to read %+v, want B for generation %d", r, sa.lease.Generation)
		}
	default:
		t.Fatal("no read of step_down_to after the step-down request")
	}
	if n := len(reads); n != 0 {
		t.Errorf("%d more reads of step_down_to", n)
	}
	close(bl.stop)
	<-bl.done
}
