package hoplock

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"time"
)

// health is what Elector.Health judges by, updated by the campaign and
// the term of the Lead or Run that runs now (or ran last). Its methods do
// nothing on a nil *health (an elector made without config).
type health struct {
	mu          sync.Mutex
	ttl         time.Duration
	wedge       time.Duration // campaign wedged past this long without a call returning
	leading     bool          // a term runs: from its start until it stops
	deadline    time.Time     // send time of the last successful renewal + TTL
	cause       error         // why the running term was lost, if it was
	campaigning bool
	beat        time.Time // when a call of the campaign last began or ended
}

func newHealth(c *elector) *health {
	return &health{ttl: c.ttl, wedge: c.poll + c.ttl + c.releaseTimeout}
}

func (h *health) campaign(on bool) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.campaigning, h.beat = on, time.Now()
	h.mu.Unlock()
}

// heartbeat records a call of the campaign beginning or ending.
func (h *health) heartbeat() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.beat = time.Now()
	h.mu.Unlock()
}

func (h *health) lead(deadline time.Time) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.leading, h.deadline, h.cause = true, deadline, nil
	h.mu.Unlock()
}

func (h *health) renewed(deadline time.Time) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.deadline = deadline
	h.mu.Unlock()
}

func (h *health) lost(cause error) {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.cause = cause
	h.mu.Unlock()
}

func (h *health) follow() {
	if h == nil {
		return
	}
	h.mu.Lock()
	h.leading, h.cause = false, nil
	h.mu.Unlock()
}

func (h *health) judge(now time.Time) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	switch {
	case h.leading && now.After(h.deadline):
		late := now.Sub(h.deadline).Round(time.Millisecond)
		if h.cause != nil {
			return fmt.Errorf("hoplock: leads but has not renewed within the TTL (%v late; the term was lost: %v)", late, h.cause)
		}
		return fmt.Errorf("hoplock: leads but has not renewed within the TTL (%v late)", late)
	case h.campaigning && now.Sub(h.beat) > h.wedge:
		return fmt.Errorf("hoplock: campaign wedged: no call returned for %v", now.Sub(h.beat).Round(time.Millisecond))
	}
	return nil
}

func (e *Elector) setHealth(h *health) { e.health.Store(h) }

// Health reports whether this Elector is healthy: nil, or an error that
// says in one line why not. It is unhealthy while it believes it leads --
// a term began and Lead's function has not returned, or Run has not
// processed the term's end -- but no renewal succeeded within the TTL
// (the term's deadline passed: its function outlives its context, or the
// process was stopped or starved); and while its campaign is wedged: no
// call to the backend returned for Poll + TTL + ReleaseTimeout. A
// follower waiting for the lease, an Elector that neither leads nor
// campaigns, and one whose Lead or Run has not begun are healthy. Health
// makes no call to the backend and never blocks; it is safe to call from
// any goroutine, at any time.
//
// It is the check of a liveness probe: HealthHandler serves it over HTTP,
// like client-go's HealthzAdaptor.
func (e *Elector) Health() error {
	h, _ := e.health.Load().(*health)
	if h == nil {
		return nil
	}
	return h.judge(time.Now())
}

// HealthHandler returns an http.Handler that answers each request with
// Health: status 200 and "ok" when healthy, status 503 and Health's
// error, one line, otherwise. The body is plain text, and never cached.
// It starts no goroutine, and may be mounted before Lead or Run begin
// (it answers 200 until then).
//
//	mux.Handle("/healthz", e.HealthHandler())
func (e *Elector) HealthHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		if err := e.Health(); err != nil {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.ReplaceAll(err.Error(), "\n", " "))
			return
		}
		w.WriteHeader(http.StatusOK)
		fmt.Fprintln(w, "ok")
	})
}
