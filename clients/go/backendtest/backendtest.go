// Package backendtest checks a hoplock.Backend against the contract the
// Elector relies on, and each optional interface it implements (Waiter,
// Renewer, Releaser, HolderReader, Watcher) against theirs.
//
// A backend's own tests call Run:
//
//	func TestConformance(t *testing.T) {
//		backendtest.Run(t, func(t *testing.T) hoplock.Backend {
//			return newBackendForAFreshLease(t)
//		})
//	}
package backendtest

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// Run runs the conformance tests as subtests of t. newBackend returns a
// Backend for a lease that nobody has used yet; it is called once per
// subtest. Timings are generous (a lease of a few seconds, waits of a few
// hundred milliseconds) so that a backend on a real server passes on a
// busy machine; the backend's clock and the test's may differ by at most
// a second.
func Run(t *testing.T, newBackend func(t *testing.T) hoplock.Backend) {
	tests := []struct {
		name string
		fn   func(*testing.T, hoplock.Backend)
	}{
		{"ReadEmpty", testReadEmpty},
		{"WriteThenRead", testWriteThenRead},
		{"WriteNeedsCurrentHandle", testWriteNeedsCurrentHandle},
		{"RenewalKeepsGeneration", testRenewalKeepsGeneration},
		{"NewTermHasGreaterGeneration", testNewTermGreaterGeneration},
		{"HandlesDiffer", testHandlesDiffer},
		{"Delete", testDelete},
		{"GenerationsSurviveDelete", testGenerationsSurviveDelete},
		{"OneOfConcurrentWritesWins", testConcurrentWrites},
		{"CancelledContext", testCancelledContext},
		{"Waiter", testWaiter},
		{"WaiterTakesOverExpired", testWaiterExpiry},
		{"Renewer", testRenewer},
		{"Releaser", testReleaser},
		{"HolderReader", testHolder},
		{"Watcher", testWatcher},
	}
	for _, tc := range tests {
		tc := tc
		t.Run(tc.name, func(t *testing.T) { tc.fn(t, newBackend(t)) })
	}
}

const (
	lease     = 5 * time.Second // how long the terms written here last
	clockSkew = time.Second     // how far the backend's clock may be off
)

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func read(t *testing.T, b hoplock.Backend) (*hoplock.State, string) {
	t.Helper()
	s, h, err := b.Read(ctxFor(t))
	if errors.Is(err, hoplock.ErrNoLease) {
		return nil, ""
	}
	if err != nil {
		t.Fatalf("Read: %v", err)
	}
	return s, h
}

func write(t *testing.T, b hoplock.Backend, prev, owner string, gen int64) (*hoplock.State, string) {
	t.Helper()
	s := &hoplock.State{Owner: owner, Generation: gen, ExpiresAt: time.Now().Add(lease)}
	h, err := b.Write(ctxFor(t), prev, s)
	if err != nil {
		t.Fatalf("Write(%q, owner %q, generation %d): %v", prev, owner, gen, err)
	}
	if h == "" {
		t.Fatalf("Write(%q, owner %q): empty handle", prev, owner)
	}
	return s, h
}

func testReadEmpty(t *testing.T, b hoplock.Backend) {
	s, h, err := b.Read(ctxFor(t))
	if errors.Is(err, hoplock.ErrNoLease) {
		return
	}
	if err != nil || s != nil || h != "" {
		t.Fatalf("Read of a new lease = (%v, %q, %v), want (nil, \"\", nil) or ErrNoLease", s, h, err)
	}
}

func testWriteThenRead(t *testing.T, b hoplock.Backend) {
	want, h := write(t, b, "", "owner-a", 1)
	if want.Owner != "owner-a" || want.Generation < 1 {
		t.Fatalf("Write wrote back %+v", *want)
	}
	got, gh := read(t, b)
	if got == nil {
		t.Fatal("Read after Write: no state")
	}
	if gh != h {
		t.Errorf("Read handle %q, Write returned %q", gh, h)
	}
	if got.Owner != "owner-a" || got.Generation != want.Generation {
		t.Errorf("Read %+v, Write stored %+v", *got, *want)
	}
	if d := got.ExpiresAt.Sub(time.Now().Add(lease)); d > clockSkew || d < -clockSkew {
		t.Errorf("ExpiresAt %v is %v off the %v asked for", got.ExpiresAt, d, lease)
	}
}

func testWriteNeedsCurrentHandle(t *testing.T, b hoplock.Backend) {
	s1, h1 := write(t, b, "", "owner-a", 1)
	ctx := ctxFor(t)
	for _, prev := range []string{"", "no-such-handle"} {
		_, err := b.Write(ctx, prev, &hoplock.State{Owner: "owner-b", Generation: s1.Generation + 1, ExpiresAt: time.Now().Add(lease)})
		if !errors.Is(err, hoplock.ErrLeaseHeld) {
			t.Errorf("Write(%q) over a stored state: %v, want ErrLeaseHeld", prev, err)
		}
	}
	_, h2 := write(t, b, h1, "owner-a", s1.Generation)
	_, err := b.Write(ctx, h1, &hoplock.State{Owner: "owner-b", Generation: s1.Generation + 1, ExpiresAt: time.Now().Add(lease)})
	if !errors.Is(err, hoplock.ErrLeaseHeld) {
		t.Errorf("Write with a stale handle: %v, want ErrLeaseHeld", err)
	}
	got, gh := read(t, b)
	if got == nil || gh != h2 || got.Owner != "owner-a" {
		t.Errorf("after refused writes: Read = (%v, %q), want owner-a with handle %q", got, gh, h2)
	}
}

func testRenewalKeepsGeneration(t *testing.T, b hoplock.Backend) {
	s1, h1 := write(t, b, "", "owner-a", 1)
	s2, _ := write(t, b, h1, "owner-a", s1.Generation)
	if s2.Generation != s1.Generation {
		t.Errorf("same owner, same generation: stored generation %d, was %d", s2.Generation, s1.Generation)
	}
	got, _ := read(t, b)
	if got == nil || got.Generation != s1.Generation {
		t.Errorf("Read after renewal: %+v, want generation %d", got, s1.Generation)
	}
}

func testNewTermGreaterGeneration(t *testing.T, b hoplock.Backend) {
	s1, h1 := write(t, b, "", "owner-a", 1)
	s2, _ := write(t, b, h1, "owner-b", s1.Generation+1)
	if s2.Generation <= s1.Generation {
		t.Errorf("new term: generation %d, not greater than %d", s2.Generation, s1.Generation)
	}
	got, _ := read(t, b)
	if got == nil || got.Owner != "owner-b" || got.Generation != s2.Generation {
		t.Errorf("Read after new term: %+v, want owner-b generation %d", got, s2.Generation)
	}
}

func testHandlesDiffer(t *testing.T, b hoplock.Backend) {
	seen := map[string]bool{}
	s, h := write(t, b, "", "owner-a", 1)
	seen[h] = true
	for i := 0; i < 5; i++ {
		_, h = write(t, b, h, "owner-a", s.Generation)
		if seen[h] {
			t.Fatalf("handle %q returned twice", h)
		}
		seen[h] = true
	}
}

func testDelete(t *testing.T, b hoplock.Backend) {
	ctx := ctxFor(t)
	if err := b.Delete(ctx, "no-such-handle"); !errors.Is(err, hoplock.ErrNoLease) {
		t.Errorf("Delete with nothing stored: %v, want ErrNoLease", err)
	}
	s1, h1 := write(t, b, "", "owner-a", 1)
	_, h2 := write(t, b, h1, "owner-a", s1.Generation)
	if err := b.Delete(ctx, h1); !errors.Is(err, hoplock.ErrLeaseHeld) {
		t.Errorf("Delete with a stale handle: %v, want ErrLeaseHeld", err)
	}
	if err := b.Delete(ctx, h2); err != nil {
		t.Fatalf("Delete with the current handle: %v", err)
	}
	if s, h := read(t, b); s != nil || h != "" {
		t.Errorf("Read after Delete = (%+v, %q), want nothing", s, h)
	}
	if err := b.Delete(ctx, h2); !errors.Is(err, hoplock.ErrNoLease) {
		t.Errorf("second Delete: %v, want ErrNoLease", err)
	}
	write(t, b, "", "owner-b", 1)
}

func testGenerationsSurviveDelete(t *testing.T, b hoplock.Backend) {
	s1, h1 := write(t, b, "", "owner-a", 1)
	s2, h2 := write(t, b, h1, "owner-b", s1.Generation+1)
	if err := b.Delete(ctxFor(t), h2); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	s3, _ := write(t, b, "", "owner-c", 1)
	if s3.Generation <= s2.Generation {
		t.Errorf("a term after Delete has generation %d, not greater than %d before it: fencing tokens would repeat",
			s3.Generation, s2.Generation)
	}
}

func testConcurrentWrites(t *testing.T, b hoplock.Backend) {
	s, h := write(t, b, "", "owner-a", 1)
	const n = 8
	var (
		wg   sync.WaitGroup
		mu   sync.Mutex
		won  []string
		errs []error
	)
	ctx := ctxFor(t)
	for i := 0; i < n; i++ {
		owner := "racer-" + string(rune('a'+i))
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := b.Write(ctx, h, &hoplock.State{Owner: owner, Generation: s.Generation + 1, ExpiresAt: time.Now().Add(lease)})
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				won = append(won, owner)
			} else if !errors.Is(err, hoplock.ErrLeaseHeld) {
				errs = append(errs, err)
			}
		}()
	}
	wg.Wait()
	if len(errs) > 0 {
		t.Fatalf("racing writes failed: %v", errs)
	}
	if len(won) != 1 {
		t.Fatalf("%d of %d racing writes from one handle won (%v), want exactly one", len(won), n, won)
	}
	if got, _ := read(t, b); got == nil || got.Owner != won[0] {
		t.Errorf("Read after the race: %+v, want owner %s", got, won[0])
	}
}

func testCancelledContext(t *testing.T, b hoplock.Backend) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := b.Write(ctx, "", &hoplock.State{Owner: "owner-a", Generation: 1, ExpiresAt: time.Now().Add(lease)}); err == nil {
		t.Error("Write with a cancelled context succeeded")
	}
	if s, _ := read(t, b); s != nil {
		t.Errorf("a Write with a cancelled context stored %+v", *s)
	}
}

func testWaiter(t *testing.T, b hoplock.Backend) {
	w, ok := b.(hoplock.Waiter)
	if !ok {
		t.Skip("not a Waiter")
	}
	ctx := ctxFor(t)
	la, err := w.Wait(ctx, "owner-a", lease, time.Second)
	if err != nil || la == nil {
		t.Fatalf("Wait on a free lease = (%v, %v)", la, err)
	}
	if la.Owner != "owner-a" || la.Generation < 1 || la.Handle == "" {
		t.Fatalf("Wait returned %+v", *la)
	}
	if s, h := read(t, b); s == nil || h != la.Handle || s.Generation != la.Generation {
		t.Errorf("Read after Wait = (%+v, %q), want handle %q generation %d", s, h, la.Handle, la.Generation)
	}

	start := time.Now()
	lb, err := w.Wait(ctx, "owner-b", lease, 300*time.Millisecond)
	if err != nil || lb != nil {
		t.Fatalf("Wait on a held lease = (%+v, %v), want (nil, nil) after the timeout", lb, err)
	}
	if d := time.Since(start); d < 250*time.Millisecond {
		t.Errorf("Wait gave up after %v, before its 300ms timeout", d)
	}

	again, err := w.Wait(ctx, "owner-a", lease, time.Second)
	if err != nil || again == nil || again.Generation != la.Generation {
		t.Errorf("Wait by the holder = (%+v, %v), want its running term %d extended", again, err, la.Generation)
	}

	got := make(chan *hoplock.Lease, 1)
	go func() {
		l, err := w.Wait(ctx, "owner-b", lease, 10*time.Second)
		if err != nil {
			t.Errorf("waiting Wait: %v", err)
		}
		got <- l
	}()
	time.Sleep(200 * time.Millisecond)
	_, h := read(t, b)
	released := time.Now()
	if err := b.Delete(ctx, h); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	lb = <-got
	if lb == nil {
		t.Fatal("a waiter did not get the released lease")
	}
	if d := time.Since(released); d > 2*time.Second {
		t.Errorf("a waiter got the released lease %v later", d)
	}
	if lb.Owner != "owner-b" || lb.Generation <= la.Generation {
		t.Errorf("the waiter's term %+v: want owner-b and a generation above %d", *lb, la.Generation)
	}
}

func testWaiterExpiry(t *testing.T, b hoplock.Backend) {
	w, ok := b.(hoplock.Waiter)
	if !ok {
		t.Skip("not a Waiter")
	}
	ctx := ctxFor(t)
	la, err := w.Wait(ctx, "owner-a", 400*time.Millisecond, time.Second)
	if err != nil || la == nil {
		t.Fatalf("Wait on a free lease = (%v, %v)", la, err)
	}
	start := time.Now()
	lb, err := w.Wait(ctx, "owner-b", lease, 10*time.Second)
	if err != nil || lb == nil {
		t.Fatalf("Wait for an expiring lease = (%v, %v)", lb, err)
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Errorf("took over a 400ms term %v later", d)
	}
	if lb.Generation <= la.Generation {
		t.Errorf("the new term's generation %d is not above %d", lb.Generation, la.Generation)
	}
}

func testRenewer(t *testing.T, b hoplock.Backend) {
	r, ok := b.(hoplock.Renewer)
	if !ok {
		t.Skip("not a Renewer")
	}
	ctx := ctxFor(t)
	s, h := write(t, b, "", "owner-a", 1)
	l, err := r.Renew(ctx, "owner-a", lease, s.Generation)
	if err != nil || l == nil {
		t.Fatalf("Renew of the running term = (%v, %v)", l, err)
	}
	if l.Generation != s.Generation || l.Owner != "owner-a" || l.Handle == h {
		t.Errorf("Renew returned %+v (handle before %q)", *l, h)
	}
	if _, err := r.Renew(ctx, "owner-a", lease, s.Generation+1); !errors.Is(err, hoplock.ErrNoLease) {
		t.Errorf("Renew of another generation: %v, want ErrNoLease", err)
	}
	if _, err := r.Renew(ctx, "owner-b", lease, s.Generation); !errors.Is(err, hoplock.ErrNoLease) {
		t.Errorf("Renew by another owner: %v, want ErrNoLease", err)
	}
	short, err := r.Renew(ctx, "owner-a", 200*time.Millisecond, s.Generation)
	if err != nil || short == nil {
		t.Fatalf("Renew for 200ms = (%v, %v)", short, err)
	}
	time.Sleep(400 * time.Millisecond)
	if _, err := r.Renew(ctx, "owner-a", lease, s.Generation); !errors.Is(err, hoplock.ErrNoLease) {
		t.Errorf("Renew of an expired term: %v, want ErrNoLease", err)
	}
}

func testReleaser(t *testing.T, b hoplock.Backend) {
	r, ok := b.(hoplock.Releaser)
	if !ok {
		t.Skip("not a Releaser")
	}
	ctx := ctxFor(t)
	s, _ := write(t, b, "", "owner-a", 1)
	if err := r.Release(ctx, "owner-a", s.Generation+1); !errors.Is(err, hoplock.ErrNoLease) {
		t.Errorf("Release of another generation: %v, want ErrNoLease", err)
	}
	if err := r.Release(ctx, "owner-b", s.Generation); !errors.Is(err, hoplock.ErrNoLease) {
		t.Errorf("Release by another owner: %v, want ErrNoLease", err)
	}
	if err := r.Release(ctx, "owner-a", s.Generation); err != nil {
		t.Fatalf("Release of the running term: %v", err)
	}
	if err := r.Release(ctx, "owner-a", s.Generation); !errors.Is(err, hoplock.ErrNoLease) {
		t.Errorf("second Release: %v, want ErrNoLease", err)
	}
	s2, _ := write(t, b, "", "owner-a", s.Generation+1)
	if err := r.Release(ctx, "owner-a", 0); err != nil {
		t.Errorf("Release of any term of owner-a (generation %d): %v", s2.Generation, err)
	}
}

func testHolder(t *testing.T, b hoplock.Backend) {
	hr, ok := b.(hoplock.HolderReader)
	if !ok {
		t.Skip("not a HolderReader")
	}
	ctx := ctxFor(t)
	if l, err := hr.Holder(ctx); err != nil || l != nil {
		t.Errorf("Holder of a free lease = (%+v, %v), want (nil, nil)", l, err)
	}
	s1, h1 := write(t, b, "", "owner-a", 1)
	l, err := hr.Holder(ctx)
	if err != nil || l == nil || l.Owner != "owner-a" || l.Generation != s1.Generation {
		t.Fatalf("Holder of a held lease = (%+v, %v)", l, err)
	}
	s := &hoplock.State{Owner: "owner-a", Generation: s1.Generation, ExpiresAt: time.Now().Add(200 * time.Millisecond)}
	if _, err := b.Write(ctx, h1, s); err != nil {
		t.Fatalf("Write: %v", err)
	}
	time.Sleep(400 * time.Millisecond)
	if l, err := hr.Holder(ctx); err != nil || l != nil {
		t.Errorf("Holder of an expired lease = (%+v, %v), want (nil, nil)", l, err)
	}
}

func testWatcher(t *testing.T, b hoplock.Backend) {
	w, ok := b.(hoplock.Watcher)
	if !ok {
		t.Skip("not a Watcher")
	}
	ctx, cancel := context.WithCancel(ctxFor(t))
	ch := w.Watch(ctx)
	// A watcher may signal once as it starts (it may have missed
	// changes before): let that pass.
	time.Sleep(300 * time.Millisecond)
	drain(ch)
	s, h := write(t, b, "", "owner-a", 1)
	expectSignal(t, ch, "a new term")
	time.Sleep(100 * time.Millisecond)
	drain(ch)
	write(t, b, h, "owner-b", s.Generation+1)
	expectSignal(t, ch, "another owner's term")
	_, h = read(t, b)
	time.Sleep(100 * time.Millisecond)
	drain(ch)
	if err := b.Delete(ctxFor(t), h); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	expectSignal(t, ch, "a delete")
	cancel()
	deadline := time.After(5 * time.Second)
	for {
		select {
		case _, ok := <-ch:
			if !ok {
				return
			}
		case <-deadline:
			t.Fatal("Watch's channel still open 5s after its context ended")
		}
	}
}

func drain(ch <-chan struct{}) {
	for {
		select {
		case <-ch:
		default:
			return
		}
	}
}

func expectSignal(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case _, ok := <-ch:
		if !ok {
			t.Fatalf("Watch's channel closed before %s", what)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("no signal within 5s of %s", what)
	}
}
