package hoplock_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/memory"
)

const (
	ttl   = 300 * time.Millisecond
	renew = 100 * time.Millisecond
	// observe is how late fn's goroutine may see its context end after
	// it was cancelled, on a busy machine.
	observe = 50 * time.Millisecond
)

// faulty wraps a memory backend with injectable failures: every call
// returns err, or blocks until its context ends while hang is set.
type faulty struct {
	m           *memory.Backend
	mu          sync.Mutex
	err         error
	hang        bool
	hangRelease bool
	renewals    int
}

func newFaulty(m *memory.Backend) *faulty { return &faulty{m: m} }

func (f *faulty) set(err error, hang bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.err, f.hang = err, hang
}

func (f *faulty) check(ctx context.Context) error {
	f.mu.Lock()
	err, hang := f.err, f.hang
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return err
}

func (f *faulty) Read(ctx context.Context) (*hoplock.State, string, error) {
	if err := f.check(ctx); err != nil {
		return nil, "", err
	}
	return f.m.Read(ctx)
}

func (f *faulty) Write(ctx context.Context, prev string, s *hoplock.State) (string, error) {
	if err := f.check(ctx); err != nil {
		return "", err
	}
	f.mu.Lock()
	f.renewals++
	f.mu.Unlock()
	return f.m.Write(ctx, prev, s)
}

func (f *faulty) Delete(ctx context.Context, h string) error {
	if err := f.releaseCheck(ctx); err != nil {
		return err
	}
	return f.m.Delete(ctx, h)
}

func (f *faulty) Wait(ctx context.Context, owner string, ttl, timeout time.Duration) (*hoplock.Lease, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	return f.m.Wait(ctx, owner, ttl, timeout)
}

func (f *faulty) Renew(ctx context.Context, owner string, ttl time.Duration, gen int64) (*hoplock.Lease, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	f.mu.Lock()
	f.renewals++
	f.mu.Unlock()
	return f.m.Renew(ctx, owner, ttl, gen)
}

func (f *faulty) Release(ctx context.Context, owner string, gen int64) error {
	if err := f.releaseCheck(ctx); err != nil {
		return err
	}
	return f.m.Release(ctx, owner, gen)
}

func (f *faulty) releaseCheck(ctx context.Context) error {
	f.mu.Lock()
	hang := f.hangRelease
	f.mu.Unlock()
	if hang {
		<-ctx.Done()
		return ctx.Err()
	}
	return f.check(ctx)
}

func (f *faulty) Holder(ctx context.Context) (*hoplock.Lease, error) {
	if err := f.check(ctx); err != nil {
		return nil, err
	}
	return f.m.Holder(ctx)
}

func (f *faulty) Watch(ctx context.Context) <-chan struct{} { return f.m.Watch(ctx) }

func (f *faulty) renewCount() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.renewals
}

// modes runs a test against a backend with the optional interfaces and
// against the same as a plain Backend.
func modes(t *testing.T, fn func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend)) {
	t.Run("full", func(t *testing.T) { fn(t, func(b hoplock.Backend) hoplock.Backend { return b }) })
	t.Run("plain", func(t *testing.T) {
		fn(t, func(b hoplock.Backend) hoplock.Backend { return struct{ hoplock.Backend }{b} })
	})
}

func elector(b hoplock.Backend, owner string) *hoplock.Elector {
	return &hoplock.Elector{Backend: b, Owner: owner, TTL: ttl, Renew: renew, Poll: 20 * time.Millisecond}
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// leading runs Lead in the background and returns once fn has started,
// with fn's context and lease; fn runs until its context ends or stop is
// closed. done receives Lead's result.
type leading struct {
	ctx       context.Context
	lease     hoplock.Lease
	stop      chan struct{}
	done      chan error
	cancelled chan time.Time // when fn saw its context end
}

func lead(t *testing.T, ctx context.Context, e *hoplock.Elector) *leading {
	t.Helper()
	l := &leading{stop: make(chan struct{}), done: make(chan error, 1), cancelled: make(chan time.Time, 1)}
	started := make(chan struct{})
	go func() {
		l.done <- e.Lead(ctx, func(ctx context.Context, lease hoplock.Lease) error {
			l.ctx, l.lease = ctx, lease
			close(started)
			select {
			case <-ctx.Done():
				l.cancelled <- time.Now()
				return ctx.Err()
			case <-l.stop:
				return nil
			}
		})
	}()
	select {
	case <-started:
	case err := <-l.done:
		t.Fatalf("Lead returned %v before leading", err)
	case <-time.After(10 * time.Second):
		t.Fatal("not leading after 10s")
	}
	return l
}

func TestConfigErrors(t *testing.T) {
	m := memory.New()
	for _, e := range []*hoplock.Elector{
		{Owner: "a"},
		{Backend: m},
		{Backend: m, Owner: "a", TTL: -time.Second},
		{Backend: m, Owner: "a", TTL: time.Second, Renew: time.Second},
		{Backend: m, Owner: "a", TTL: time.Second, Poll: -1},
		{Backend: m, Owner: "a", TTL: time.Second, MinHold: -1},
		{Backend: m, Owner: "a", TTL: time.Second, MinHold: 2 * time.Second},
		// the memory backend cannot hold terms
		{Backend: m, Owner: "a", TTL: time.Second, MinHold: time.Second},
	} {
		err := e.Lead(context.Background(), func(context.Context, hoplock.Lease) error { return nil })
		if err == nil {
			t.Errorf("Lead with %+v: no error", *e)
		}
		ev, ok := <-e.Run(context.Background())
		if !ok || ev.Kind != hoplock.EventLost || ev.Err == nil {
			t.Errorf("Run with %+v: first event %+v", *e, ev)
		}
	}
}

// A MinHold the backend cannot keep is refused, never ignored.
func TestMinHoldUnsupported(t *testing.T) {
	e := &hoplock.Elector{Backend: memory.New(), Owner: "a", TTL: time.Second, MinHold: time.Second}
	err := e.Lead(context.Background(), func(context.Context, hoplock.Lease) error { return nil })
	if !errors.Is(err, hoplock.ErrUnsupported) {
		t.Errorf("Lead with MinHold on the memory backend: %v, want ErrUnsupported", err)
	}
}

func TestLeadRunsFnAndReleases(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		m := memory.New()
		e := elector(wrap(m), "a")
		sentinel := errors.New("done")
		var got hoplock.Lease
		err := e.Lead(testContext(t), func(ctx context.Context, l hoplock.Lease) error {
			got = l
			if ctx.Err() != nil {
				t.Error("fn's context already ended")
			}
			return sentinel
		})
		if !errors.Is(err, sentinel) {
			t.Fatalf("Lead = %v, want fn's error", err)
		}
		if got.Owner != "a" || got.Generation < 1 || got.Handle == "" {
			t.Errorf("lease %+v", got)
		}
		if d := time.Until(got.Deadline); d > ttl || d < ttl/2 {
			t.Errorf("deadline %v away, TTL %v", d, ttl)
		}
		if s, _, _ := m.Read(context.Background()); s != nil {
			t.Errorf("after Lead: %+v still stored, want released", *s)
		}
	})
}

func TestGenerationsIncrease(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		b := wrap(memory.New())
		var last int64
		for i := 0; i < 5; i++ {
			owner := fmt.Sprintf("owner-%d", i%2)
			err := elector(b, owner).Lead(testContext(t), func(_ context.Context, l hoplock.Lease) error {
				if l.Generation <= last {
					t.Errorf("term %d: generation %d after %d", i, l.Generation, last)
				}
				last = l.Generation
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
		}
	})
}

func TestOneLeaderAtATime(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		b := wrap(memory.New())
		ctx, cancel := context.WithTimeout(testContext(t), 1500*time.Millisecond)
		defer cancel()
		var (
			leaders, maxLeaders, terms int32
			wg                         sync.WaitGroup
		)
		for i := 0; i < 3; i++ {
			e := elector(b, fmt.Sprintf("owner-%d", i))
			wg.Add(1)
			go func() {
				defer wg.Done()
				for ctx.Err() == nil {
					_ = e.Lead(ctx, func(ctx context.Context, l hoplock.Lease) error {
						n := atomic.AddInt32(&leaders, 1)
						defer atomic.AddInt32(&leaders, -1)
						atomic.AddInt32(&terms, 1)
						for {
							m := atomic.LoadInt32(&maxLeaders)
							if n <= m || atomic.CompareAndSwapInt32(&maxLeaders, m, n) {
								break
							}
						}
						select {
						case <-time.After(20 * time.Millisecond):
						case <-ctx.Done():
						}
						return nil
					})
				}
			}()
		}
		wg.Wait()
		if maxLeaders != 1 {
			t.Errorf("%d leaders at once", maxLeaders)
		}
		if terms < 5 {
			t.Errorf("only %d terms in 1.5s", terms)
		}
	})
}

// A leader cut off from its backend gives up no later than the send time
// of its last successful renewal plus TTL; the follower leads only after.
func TestCutOffLeaderGivesUpBeforeTakeover(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		m := memory.New()
		fa := newFaulty(m)
		ctx := testContext(t)
		a := lead(t, ctx, elector(wrap(fa), "a"))
		time.Sleep(2 * renew)

		bStarted := make(chan time.Time, 1)
		aCtx := a.ctx
		go func() {
			_ = elector(wrap(m), "b").Lead(ctx, func(ctx context.Context, l hoplock.Lease) error {
				if aCtx.Err() == nil {
					t.Error("the follower leads while the old leader's context is live")
				}
				bStarted <- time.Now()
				<-ctx.Done()
				return nil
			})
		}()

		cut := time.Now()
		fa.set(errors.New("connection reset by peer"), false)
		var aLost time.Time
		select {
		case aLost = <-a.cancelled:
		case <-time.After(5 * ttl):
			t.Fatal("the cut-off leader still leads after 5 TTLs")
		}
		if d := aLost.Sub(cut); d > ttl+observe {
			t.Errorf("the cut-off leader gave up %v after the cut, more than the TTL %v", d, ttl)
		}
		if cause := hoplock.LossCause(a.ctx); !errors.Is(cause, hoplock.ErrLeaseExpired) {
			t.Errorf("LossCause = %v, want ErrLeaseExpired", cause)
		}
		select {
		case <-bStarted:
		case <-time.After(5 * ttl):
			t.Fatal("the follower did not take over")
		}
		<-a.done
	})
}

func TestTransientErrorsAreRetried(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		fa := newFaulty(memory.New())
		a := lead(t, testContext(t), elector(wrap(fa), "a"))
		time.Sleep(renew)
		// Failing for less than TTL - Renew leaves time to renew.
		fa.set(errors.New("SQLSTATE 55P03: could not lock table"), false)
		time.Sleep(ttl - renew - 50*time.Millisecond)
		fa.set(nil, false)
		time.Sleep(2 * ttl)
		select {
		case <-a.ctx.Done():
			t.Fatalf("lost the lease over transient errors: %v", hoplock.LossCause(a.ctx))
		default:
		}
		close(a.stop)
		if err := <-a.done; err != nil {
			t.Fatal(err)
		}
	})
}

func TestHungRenewalEndsAtDeadline(t *testing.T) {
	fa := newFaulty(memory.New())
	a := lead(t, testContext(t), elector(fa, "a"))
	time.Sleep(renew / 2)
	before := fa.renewCount()
	hungAt := time.Now()
	fa.set(nil, true)
	select {
	case at := <-a.cancelled:
		// The last renewal that succeeded was sent before hungAt.
		if d := at.Sub(hungAt); d > ttl+observe {
			t.Errorf("gave up %v after renewals began to hang, TTL %v", d, ttl)
		}
	case <-time.After(3 * ttl):
		t.Fatal("a hung renewal kept the term alive")
	}
	if fa.renewCount() < before {
		t.Error("no renewal was tried")
	}
	fa.set(nil, false)
	<-a.done
}

func TestLossIsNoticed(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		m := memory.New()
		a := lead(t, testContext(t), elector(wrap(m), "a"))
		// Someone writes over the term.
		_, h, _ := m.Read(context.Background())
		s := &hoplock.State{Owner: "intruder", Generation: a.lease.Generation + 1, ExpiresAt: time.Now().Add(time.Minute)}
		over := time.Now()
		if _, err := m.Write(context.Background(), h, s); err != nil {
			t.Fatal(err)
		}
		select {
		case at := <-a.cancelled:
			limit := renew + observe // the next renewal
			if _, full := wrap(m).(hoplock.Watcher); full {
				limit = observe // told at once
			}
			if d := at.Sub(over); d > limit {
				t.Errorf("noticed the loss %v later, want within %v", d, limit)
			}
		case <-time.After(3 * ttl):
			t.Fatal("loss not noticed")
		}
		if cause := hoplock.LossCause(a.ctx); !errors.Is(cause, hoplock.ErrLeaseHeld) {
			t.Errorf("LossCause = %v, want ErrLeaseHeld", cause)
		}
		if err := <-a.done; !errors.Is(err, context.Canceled) {
			t.Errorf("Lead = %v, want fn's context.Canceled", err)
		}
		if st, _, _ := m.Read(context.Background()); st == nil || st.Owner != "intruder" {
			t.Errorf("the loser's release touched the new term: %+v", st)
		}
	})
}

func TestLeaderClockDoesNotDecideLeadership(t *testing.T) {
	for _, skew := range []time.Duration{time.Hour, -time.Hour} {
		// Through a plain Backend, where Now stamps ExpiresAt.
		fa := newFaulty(memory.New())
		e := elector(struct{ hoplock.Backend }{fa}, "a")
		e.Now = func() time.Time { return time.Now().Add(skew) }
		a := lead(t, testContext(t), e)
		time.Sleep(2 * ttl)
		select {
		case <-a.ctx.Done():
			t.Fatalf("skew %v: lost the lease: %v", skew, hoplock.LossCause(a.ctx))
		default:
		}
		cut := time.Now()
		fa.set(errors.New("network unreachable"), false)
		select {
		case at := <-a.cancelled:
			if d := at.Sub(cut); d > ttl+observe {
				t.Errorf("skew %v: gave up %v after the cut", skew, d)
			}
		case <-time.After(3 * ttl):
			t.Fatalf("skew %v: still leading", skew)
		}
		<-a.done
	}
}

func TestReleaseTimeoutBoundsRelease(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		fa := newFaulty(memory.New())
		fa.hangRelease = true
		e := elector(wrap(fa), "a")
		e.ReleaseTimeout = 50 * time.Millisecond
		var returned time.Time
		start := time.Now()
		err := e.Lead(testContext(t), func(context.Context, hoplock.Lease) error {
			returned = time.Now()
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if d := time.Since(returned); d > 50*time.Millisecond+100*time.Millisecond {
			t.Errorf("Lead returned %v after fn, ReleaseTimeout 50ms (started %v ago)", d, time.Since(start))
		}
	})
}

func TestCancelWhileCampaigning(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		m := memory.New()
		a := lead(t, testContext(t), elector(wrap(m), "a"))
		ctx, cancel := context.WithCancel(testContext(t))
		done := make(chan error, 1)
		go func() {
			done <- elector(wrap(m), "b").Lead(ctx, func(context.Context, hoplock.Lease) error {
				t.Error("b led while a held the lease")
				return nil
			})
		}()
		time.Sleep(50 * time.Millisecond)
		cancel()
		select {
		case err := <-done:
			if !errors.Is(err, context.Canceled) {
				t.Errorf("Lead = %v, want context.Canceled", err)
			}
		case <-time.After(time.Second):
			t.Fatal("Lead did not return after its context ended")
		}
		close(a.stop)
		<-a.done
	})
}

func TestPermanentErrorEndsCampaign(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		fa := newFaulty(memory.New())
		bad := errors.New("permission denied for function hoplock_wait")
		fa.set(hoplock.Permanent(bad), false)
		err := elector(wrap(fa), "a").Lead(testContext(t), func(context.Context, hoplock.Lease) error {
			t.Error("led despite a permanent error")
			return nil
		})
		if !errors.Is(err, bad) || !hoplock.IsPermanent(err) {
			t.Errorf("Lead = %v, want the permanent error", err)
		}
	})
}

func TestRunEvents(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		m := memory.New()
		ctx, cancel := context.WithCancel(testContext(t))
		defer cancel()
		events := elector(wrap(m), "a").Run(ctx)
		next := func(want hoplock.EventKind) hoplock.Event {
			t.Helper()
			for {
				select {
				case ev, ok := <-events:
					if !ok {
						t.Fatalf("channel closed, waiting for %v", want)
					}
					if ev.Kind == hoplock.EventRenewed && want != hoplock.EventRenewed {
						continue
					}
					if ev.Kind == hoplock.EventLeader && ev.Lease.Owner == "intruder" {
						continue // if read before the intruder let go
					}
					if ev.Kind != want {
						t.Fatalf("event %v (%v), want %v", ev.Kind, ev.Err, want)
					}
					return ev
				case <-time.After(5 * time.Second):
					t.Fatalf("no %v event", want)
				}
			}
		}
		acq := next(hoplock.EventAcquired)
		if acq.Lease.Owner != "a" {
			t.Errorf("acquired %+v", acq.Lease)
		}
		ren := next(hoplock.EventRenewed)
		if ren.Lease.Generation != acq.Lease.Generation || !ren.Lease.Deadline.After(acq.Lease.Deadline) {
			t.Errorf("renewed %+v after %+v", ren.Lease, acq.Lease)
		}

		// Another owner writes over the term: lost; when it lets
		// go, acquired again in a new term.
		_, h, _ := m.Read(ctx)
		s := &hoplock.State{Owner: "intruder", Generation: acq.Lease.Generation + 1, ExpiresAt: time.Now().Add(time.Minute)}
		h, err := m.Write(ctx, h, s)
		if err != nil {
			t.Fatal(err)
		}
		lost := next(hoplock.EventLost)
		if !errors.Is(lost.Err, hoplock.ErrLeaseHeld) {
			t.Errorf("lost: %v, want ErrLeaseHeld", lost.Err)
		}
		if err := m.Delete(ctx, h); err != nil {
			t.Fatal(err)
		}
		again := next(hoplock.EventAcquired)
		if again.Lease.Generation <= s.Generation {
			t.Errorf("new term's generation %d, not above %d", again.Lease.Generation, s.Generation)
		}

		cancel()
		last := next(hoplock.EventLost)
		if !errors.Is(last.Err, context.Canceled) || last.Lease.Generation != again.Lease.Generation {
			t.Errorf("last event %+v", last)
		}
		if _, ok := <-events; ok {
			t.Error("events after the last EventLost")
		}
		if st, _, _ := m.Read(context.Background()); st != nil {
			t.Errorf("channel closed before the release: %+v", *st)
		}
	})
}

func TestRunDropsEventsNobodyTakes(t *testing.T) {
	m := memory.New()
	ctx, cancel := context.WithCancel(context.Background())
	e := elector(m, "a")
	e.ReleaseTimeout = 50 * time.Millisecond
	events := e.Run(ctx)
	time.Sleep(3 * ttl) // many renewals, nobody reading
	cancel()
	time.Sleep(200 * time.Millisecond)
	var kinds []hoplock.EventKind
	for ev := range events {
		kinds = append(kinds, ev.Kind)
	}
	// Acquired and the merged Renewed may have been taken before the
	// grace ran out; never more than acquired, renewed, lost.
	if len(kinds) > 3 {
		t.Errorf("events %v: renewals were not merged", kinds)
	}
}

func TestLossCauseOutsideATerm(t *testing.T) {
	if err := hoplock.LossCause(context.Background()); err != nil {
		t.Errorf("LossCause(Background) = %v", err)
	}
}

// eventStream reads a Run's events in the background, leaving out
// EventRenewed.
type eventStream struct {
	t      *testing.T
	events <-chan hoplock.Event
}

func (s eventStream) next() hoplock.Event {
	s.t.Helper()
	for {
		select {
		case ev, ok := <-s.events:
			if !ok {
				s.t.Fatal("Run's channel closed")
			}
			if ev.Kind != hoplock.EventRenewed {
				return ev
			}
		case <-time.After(5 * time.Second):
			s.t.Fatal("no event within 5s")
		}
	}
}

func (s eventStream) expect(kind hoplock.EventKind, owner string, gen int64) hoplock.Event {
	s.t.Helper()
	ev := s.next()
	if ev.Kind != kind || ev.Lease.Owner != owner || (gen != 0 && ev.Lease.Generation != gen) {
		s.t.Fatalf("event %v %s/%d (%v), want %v %s/%d", ev.Kind, ev.Lease.Owner, ev.Lease.Generation, ev.Err, kind, owner, gen)
	}
	return ev
}

// quiet checks that nothing but renewals comes for d.
func (s eventStream) quiet(d time.Duration) {
	s.t.Helper()
	limit := time.After(d)
	for {
		select {
		case ev, ok := <-s.events:
			if ok && ev.Kind != hoplock.EventRenewed {
				s.t.Fatalf("event %v %s/%d (%v), want none", ev.Kind, ev.Lease.Owner, ev.Lease.Generation, ev.Err)
			}
		case <-limit:
			return
		}
	}
}

// Run reports each term of another owner once, as EventLeader, while it
// does not lead: the one running when it starts, each that replaces it,
// and after its own term is lost the one that took it; renewals of a term
// reported bring no new event, and its own term is EventAcquired only.
func TestRunReportsLeader(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		m := memory.New()
		bg := context.Background()
		ctx, cancel := context.WithCancel(testContext(t))
		defer cancel()
		x := &hoplock.State{Owner: "X", Generation: 1, ExpiresAt: time.Now().Add(time.Minute)}
		hx, err := m.Write(bg, "", x)
		if err != nil {
			t.Fatal(err)
		}
		s := eventStream{t, elector(wrap(m), "A").Run(ctx)}
		s.expect(hoplock.EventLeader, "X", x.Generation)

		// X renews: changes the Watcher signals, the same term
		for i := 0; i < 5; i++ {
			x.ExpiresAt = time.Now().Add(time.Minute)
			if hx, err = m.Write(bg, hx, x); err != nil {
				t.Fatal(err)
			}
			time.Sleep(10 * time.Millisecond)
		}
		s.quiet(100 * time.Millisecond)

		// Y takes over from X
		y := &hoplock.State{Owner: "Y", Generation: x.Generation + 1, ExpiresAt: time.Now().Add(time.Minute)}
		hy, err := m.Write(bg, hx, y)
		if err != nil {
			t.Fatal(err)
		}
		s.expect(hoplock.EventLeader, "Y", y.Generation)

		// Y lets go: A leads
		if err := m.Delete(bg, hy); err != nil {
			t.Fatal(err)
		}
		acq := s.expect(hoplock.EventAcquired, "A", 0)
		if acq.Lease.Generation <= y.Generation {
			t.Errorf("acquired generation %d after %d", acq.Lease.Generation, y.Generation)
		}

		// Z writes over A's term: lost, then Z leads
		var z *hoplock.State
		for {
			_, h, _ := m.Read(bg)
			z = &hoplock.State{Owner: "Z", Generation: acq.Lease.Generation + 1, ExpiresAt: time.Now().Add(time.Minute)}
			if _, err := m.Write(bg, h, z); err == nil {
				break
			}
		}
		lost := s.expect(hoplock.EventLost, "A", acq.Lease.Generation)
		if !errors.Is(lost.Err, hoplock.ErrLeaseHeld) {
			t.Errorf("lost: %v, want ErrLeaseHeld", lost.Err)
		}
		s.expect(hoplock.EventLeader, "Z", z.Generation)
		s.quiet(100 * time.Millisecond)

		cancel()
		for ev := range s.events {
			if ev.Kind != hoplock.EventRenewed {
				t.Errorf("event %v after Run's context ended, while following", ev.Kind)
			}
		}
	})
}

// staleReads is a memory backend whose Read and Holder answer late: what
// they return may be out of date by up to 20 ms.
type staleReads struct {
	*memory.Backend
	n atomic.Int64
}

func (s *staleReads) delay() {
	time.Sleep(time.Duration(s.n.Add(7)%21) * time.Millisecond)
}

func (s *staleReads) Read(ctx context.Context) (*hoplock.State, string, error) {
	st, h, err := s.Backend.Read(ctx)
	s.delay()
	return st, h, err
}

func (s *staleReads) Holder(ctx context.Context) (*hoplock.Lease, error) {
	l, err := s.Backend.Holder(ctx)
	s.delay()
	return l, err
}

// Two Electors under Run, their terms forced out over and over, with
// terms of a third owner in between, reading who leads late (staleReads):
// in each one's events the generations of EventLeader rise strictly, each
// above every EventAcquired before it, no EventLeader names its own owner
// or comes while its own term runs, and none comes after the channel's
// last EventLost.
func TestRunLeaderEventsInOrder(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		m := memory.New()
		stale := &staleReads{Backend: m}
		bg := context.Background()
		ctx, cancel := context.WithCancel(testContext(t))
		defer cancel()
		type result struct {
			owner  string
			events []hoplock.Event
		}
		results := make(chan result, 2)
		for _, owner := range []string{"A", "B"} {
			owner := owner
			events := elector(wrap(stale), owner).Run(ctx)
			go func() {
				r := result{owner: owner}
				for ev := range events {
					r.events = append(r.events, ev)
				}
				results <- r
			}()
		}
		for i := 0; i < 40; i++ {
			time.Sleep(time.Duration(5+i%4*10) * time.Millisecond)
			st, h, err := m.Read(bg)
			if err != nil || st == nil {
				continue
			}
			if i%5 == 4 {
				// a third owner writes over the term, then lets go
				x := &hoplock.State{Owner: "X", Generation: st.Generation + 1, ExpiresAt: time.Now().Add(time.Minute)}
				if hx, err := m.Write(bg, h, x); err == nil {
					time.Sleep(30 * time.Millisecond)
					_ = m.Delete(bg, hx)
				}
				continue
			}
			_ = m.Delete(bg, h) // forced out
		}
		cancel()
		leaders := 0
		for i := 0; i < 2; i++ {
			r := <-results
			var acquired, last int64 // the last acquired, the last acquired or led
			leading := false
			for j, ev := range r.events {
				switch {
				case ev.Kind == hoplock.EventLeader && ev.Lease.Generation <= last,
					ev.Kind == hoplock.EventAcquired && ev.Lease.Generation <= acquired:
					t.Errorf("%s: event %d, %v of generation %d after %d (acquired %d)", r.owner, j, ev.Kind, ev.Lease.Generation, last, acquired)
				}
				switch ev.Kind {
				case hoplock.EventAcquired:
					acquired = ev.Lease.Generation
					if acquired > last {
						last = acquired
					}
				case hoplock.EventLeader:
					last = ev.Lease.Generation
				}
				switch ev.Kind {
				case hoplock.EventAcquired:
					leading = true
				case hoplock.EventLost:
					leading = false
				case hoplock.EventLeader:
					leaders++
					if ev.Lease.Owner == r.owner || leading {
						t.Errorf("%s: event %d, EventLeader of %s/%d (leading: %v)", r.owner, j, ev.Lease.Owner, ev.Lease.Generation, leading)
					}
				}
			}
			for j, ev := range r.events {
				if ev.Kind == hoplock.EventLost && errors.Is(ev.Err, context.Canceled) && j != len(r.events)-1 {
					t.Errorf("%s: %v after the last EventLost", r.owner, r.events[j+1].Kind)
				}
			}
		}
		if leaders == 0 {
			t.Error("no EventLeader at all")
		}
	})
}

// heldHolder is a memory backend whose Holder, once armed, holds the next
// call after it has read the lease, until released: its answer is out of
// date by then.
type heldHolder struct {
	*memory.Backend
	armed   atomic.Bool
	held    chan hoplock.Lease
	release chan struct{}
}

func (h *heldHolder) Holder(ctx context.Context) (*hoplock.Lease, error) {
	l, err := h.Backend.Holder(ctx)
	if h.armed.CompareAndSwap(true, false) {
		var seen hoplock.Lease
		if l != nil {
			seen = *l
		}
		h.held <- seen
		<-h.release
	}
	return l, err
}

// A read of who leads that comes back after this Elector has acquired a
// later term, and lost it, is not reported: EventLeader never goes back
// to a term older than one already reported.
func TestRunLeaderNeverGoesBack(t *testing.T) {
	m := memory.New()
	h := &heldHolder{Backend: m, held: make(chan hoplock.Lease), release: make(chan struct{})}
	bg := context.Background()
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	x := &hoplock.State{Owner: "X", Generation: 1, ExpiresAt: time.Now().Add(time.Minute)}
	hx, err := m.Write(bg, "", x)
	if err != nil {
		t.Fatal(err)
	}
	s := eventStream{t, elector(h, "A").Run(ctx)}
	s.expect(hoplock.EventLeader, "X", x.Generation)

	// Y takes over; the follower's read of it is held
	h.armed.Store(true)
	y := &hoplock.State{Owner: "Y", Generation: x.Generation + 1, ExpiresAt: time.Now().Add(time.Minute)}
	hy, err := m.Write(bg, hx, y)
	if err != nil {
		t.Fatal(err)
	}
	select {
	case l := <-h.held:
		if l.Owner != "Y" {
			t.Fatalf("held read of %s/%d, want Y", l.Owner, l.Generation)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no read of who leads after Y took over")
	}

	// meanwhile Y lets go, A leads, and Z writes over A's term
	if err := m.Delete(bg, hy); err != nil {
		t.Fatal(err)
	}
	acq := s.expect(hoplock.EventAcquired, "A", 0)
	var z *hoplock.State
	for {
		_, hz, _ := m.Read(bg)
		z = &hoplock.State{Owner: "Z", Generation: acq.Lease.Generation + 1, ExpiresAt: time.Now().Add(time.Minute)}
		if _, err := m.Write(bg, hz, z); err == nil {
			break
		}
	}
	s.expect(hoplock.EventLost, "A", acq.Lease.Generation)

	// the read of Y comes back now: not reported; Z is
	close(h.release)
	s.expect(hoplock.EventLeader, "Z", z.Generation)
	s.quiet(100 * time.Millisecond)
}
