package hoplock_test

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/memory"
)

// probe asks e's HealthHandler once, and returns the status and body.
func probe(t *testing.T, e *hoplock.Elector) (int, string) {
	t.Helper()
	rec := httptest.NewRecorder()
	e.HealthHandler().ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
	body, _ := io.ReadAll(rec.Body)
	return rec.Code, string(body)
}

func wantHealthy(t *testing.T, e *hoplock.Elector, when string) {
	t.Helper()
	if err := e.Health(); err != nil {
		t.Errorf("%s: Health() = %v, want nil", when, err)
	}
	if code, body := probe(t, e); code != http.StatusOK || body != "ok\n" {
		t.Errorf("%s: handler answered %d %q, want 200 \"ok\\n\"", when, code, body)
	}
}

func wantUnhealthy(t *testing.T, e *hoplock.Elector, when, reason string) {
	t.Helper()
	err := e.Health()
	if err == nil || !strings.Contains(err.Error(), reason) {
		t.Errorf("%s: Health() = %v, want an error saying %q", when, err, reason)
	}
	code, body := probe(t, e)
	if code != http.StatusServiceUnavailable || !strings.Contains(body, reason) ||
		strings.Count(body, "\n") != 1 || !strings.HasSuffix(body, "\n") {
		t.Errorf("%s: handler answered %d %q, want 503 and one line saying %q", when, code, body, reason)
	}
}

func TestHealthBeforeAndAfter(t *testing.T) {
	e := elector(memory.New(), "a")
	wantHealthy(t, e, "before Lead")
	if err := e.Lead(testContext(t), func(ctx context.Context, l hoplock.Lease) error {
		wantHealthy(t, e, "leading")
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	wantHealthy(t, e, "after Lead")
}

// A leader whose renewals hang, and whose fn goes on past the end of its
// context, is unhealthy once the TTL has passed since its last renewal;
// healthy again once fn returns.
func TestHealthLeaderStalledPastTTL(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		fa := newFaulty(memory.New())
		e := elector(wrap(fa), "a")
		var during, past error
		err := e.Lead(testContext(t), func(ctx context.Context, l hoplock.Lease) error {
			time.Sleep(renew / 2)
			during = e.Health()
			fa.set(nil, true) // renewals hang from now on
			time.Sleep(ttl + renew)
			past = e.Health()
			wantUnhealthy(t, e, "fn outlived its term", "has not renewed within the TTL")
			fa.set(nil, false)
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
		if during != nil {
			t.Errorf("while renewing: Health() = %v, want nil", during)
		}
		if past == nil || !strings.Contains(past.Error(), "lease expired") {
			t.Errorf("past the TTL: Health() = %v, want it to say the lease expired", past)
		}
		wantHealthy(t, e, "after Lead")
	})
}

// A leader under Run that renews is healthy throughout, and so is Run
// after it ends.
func TestHealthRunLeader(t *testing.T) {
	e := elector(memory.New(), "a")
	ctx, cancel := context.WithCancel(testContext(t))
	defer cancel()
	events := e.Run(ctx)
	ev := <-events
	if ev.Kind != hoplock.EventAcquired {
		t.Fatalf("first event %v, want acquired", ev.Kind)
	}
	wantHealthy(t, e, "leading under Run")
	for deadline := time.Now().Add(2 * ttl); time.Now().Before(deadline); {
		select {
		case <-events:
		case <-time.After(10 * time.Millisecond):
		}
		if err := e.Health(); err != nil {
			t.Fatalf("renewing under Run: Health() = %v", err)
		}
	}
	cancel()
	for range events {
	}
	wantHealthy(t, e, "after Run")
}

// A follower waiting for a lease another owner holds stays healthy, with
// a backend that waits and with one that is polled.
func TestHealthFollowerWaiting(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		m := memory.New()
		ctx := testContext(t)
		a := lead(t, ctx, elector(m, "a"))
		b := elector(wrap(m), "b")
		bctx, stopB := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- b.Lead(bctx, func(ctx context.Context, l hoplock.Lease) error {
				t.Error("b led while a held the lease")
				return nil
			})
		}()
		for end := time.Now().Add(3 * ttl); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			wantHealthy(t, b, "waiting")
		}
		stopB()
		<-done
		wantHealthy(t, b, "after Lead")
		close(a.stop)
		<-a.done
	})
}

// A campaign whose calls hang is wedged: unhealthy once no call has
// returned for Poll + TTL + ReleaseTimeout; healthy again once they
// return.
func TestHealthCampaignWedged(t *testing.T) {
	modes(t, func(t *testing.T, wrap func(hoplock.Backend) hoplock.Backend) {
		fa := newFaulty(memory.New())
		fa.set(nil, true)
		e := elector(wrap(fa), "a")
		ctx, cancel := context.WithCancel(testContext(t))
		defer cancel()
		led := make(chan struct{})
		done := make(chan error, 1)
		go func() {
			done <- e.Lead(ctx, func(ctx context.Context, l hoplock.Lease) error {
				close(led)
				<-ctx.Done()
				return nil
			})
		}()
		time.Sleep(ttl / 2)
		wantHealthy(t, e, "campaign just begun")
		// Poll (20ms) + TTL + ReleaseTimeout (the TTL), and some.
		time.Sleep(20*time.Millisecond + 2*ttl)
		wantUnhealthy(t, e, "calls hung", "campaign wedged")
		fa.set(nil, false)
		cancel() // the hung Wait returns; the campaign ends
		<-done
		wantHealthy(t, e, "after Lead")
	})
}

// Health and the handler are safe to use from many goroutines while the
// Elector campaigns, leads and loses (go test -race), and the handler
// leaves no goroutine behind.
func TestHealthConcurrentNoLeak(t *testing.T) {
	m := memory.New()
	e := elector(m, "a")
	h := e.HealthHandler()
	srv := httptest.NewServer(h)
	before := runtime.NumGoroutine()
	ctx, cancel := context.WithCancel(testContext(t))
	var wg sync.WaitGroup
	for i := 0; i < 4; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for ctx.Err() == nil {
				_ = e.Health()
				rec := httptest.NewRecorder()
				h.ServeHTTP(rec, httptest.NewRequest("GET", "/healthz", nil))
			}
		}()
	}
	for i := 0; i < 5; i++ {
		_ = e.Lead(ctx, func(ctx context.Context, l hoplock.Lease) error {
			time.Sleep(renew + 10*time.Millisecond)
			return nil
		})
	}
	resp, err := srv.Client().Get(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("over HTTP: status %d, want 200", resp.StatusCode)
	}
	cancel()
	wg.Wait()
	srv.Close()
	srv.Client().CloseIdleConnections()
	var after int
	for end := time.Now().Add(2 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		if after = runtime.NumGoroutine(); after <= before || time.Now().After(end) {
			break
		}
	}
	if after > before {
		t.Errorf("%d goroutines before, %d after", before, after)
	}
}
