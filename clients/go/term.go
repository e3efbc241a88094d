package hoplock

import (
	"context"
	"fmt"
	"sync"
	"time"
)

// term is one term of leadership while it runs: it renews the lease,
// confirms announced changes, and cancels its context when the term is
// lost or its deadline comes.
type term struct {
	c      *elector
	ctx    context.Context
	cancel context.CancelFunc

	mu        sync.Mutex
	lease     Lease
	deadline  time.Time // send time of the last successful renewal + TTL
	timer     *time.Timer
	lost      bool
	cause     error
	stepping  bool // a renewal reported a step-down request
	handedOff bool // Handoff gave the term to another candidate

	// calls keeps renewals, confirmations and Handoff from running at
	// the same time.
	calls   sync.Mutex
	lastErr error // the last transient renewal error, for the cause

	events *eventQueue // told of the term's events, if set (Run)

	stopOnce sync.Once
	stopped  chan struct{}
	done     chan struct{}
}

type termKey struct{}

// termContext is a term's context. Its Err also looks at the deadline
// itself: a process that was stopped (SIGSTOP, a paused VM) past its
// deadline learns from Err, the first thing it asks on resuming, that the
// term is lost -- before the deadline's timer has had a chance to fire.
type termContext struct {
	context.Context
	t *term
}

func (c termContext) Err() error {
	if err := c.Context.Err(); err != nil {
		return err
	}
	c.t.expire()
	return c.Context.Err()
}

// LossCause returns why the term whose context ctx is (or derives from)
// was lost: ErrLeaseHeld if another owner took the lease, ErrNoLease if
// the term ended (released, expired, or forced out), an error wrapping
// ErrLeaseExpired if no renewal succeeded within the TTL, ErrHandedOff if
// Elector.Handoff gave it to another candidate, ErrStepDown if a step-down
// was requested (the term then still holds the lease until the function
// returns, and is handed over), or a permanent backend error. It returns nil while the term holds, when the term ended
// for another reason (the parent context, or fn returning), or for a
// context that is not a term's.
func LossCause(ctx context.Context) error {
	t, ok := ctx.Value(termKey{}).(*term)
	if !ok {
		return nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cause
}

// startTerm begins running the term of lease, whose last successful call
// was sent at sent; its context derives from parent.
func (c *elector) startTerm(parent context.Context, lease Lease, sent time.Time, wake <-chan struct{}, events *eventQueue) *term {
	t := &term{
		c:       c,
		lease:   lease,
		events:  events,
		stopped: make(chan struct{}),
		done:    make(chan struct{}),
	}
	ctx, cancel := context.WithCancel(parent)
	t.cancel = cancel
	t.deadline = sent.Add(c.ttl)
	t.lease.Deadline = t.deadline
	t.timer = time.AfterFunc(time.Until(t.deadline)-c.guard, t.expire)
	c.health.lead(t.deadline)
	t.ctx = termContext{context.WithValue(ctx, termKey{}, t), t}
	// A hint left over from the campaign says nothing about this term.
	select {
	case <-wake:
	default:
	}
	c.info("leading", "generation", lease.Generation, "deadline_in", time.Until(t.deadline))
	if events != nil {
		events.push(Event{Kind: EventAcquired, Lease: t.lease})
	}
	go t.loop(sent, wake)
	return t
}

// current returns the lease as of the last successful renewal.
func (t *term) current() Lease {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.lease
}

// loop renews the lease every Renew, retrying transient errors, and
// confirms announced changes, until the term is lost or stopped.
func (t *term) loop(sent time.Time, wake <-chan struct{}) {
	defer close(t.done)
	c := t.c
	retry := c.newBackoff()
	next := time.NewTimer(time.Until(sent.Add(c.renew)))
	defer next.Stop()
	for {
		select {
		case <-t.stopped:
			return
		case <-t.ctx.Done():
			return
		case _, ok := <-wake:
			if !ok {
				wake = nil
				continue
			}
			if t.ctx.Err() != nil {
				return // the term ended meanwhile: nothing to confirm
			}
			t.calls.Lock()
			ctx, cancel := context.WithTimeout(t.ctx, c.renew)
			err, failed := c.confirm(ctx, t.current())
			cancel()
			t.calls.Unlock()
			if failed != nil {
				// A check cut short by the end of the term (fn
				// returned, the term was lost or stepped down) is
				// no failure: the renewals go on otherwise.
				if t.ctx.Err() != nil {
					return
				}
				c.warn("could not confirm the lease after a change was announced", failed)
				continue
			}
			if err != nil {
				t.lose(err)
				return
			}
		case <-next.C:
			s := time.Now()
			t.mu.Lock()
			limit := t.deadline
			t.mu.Unlock()
			if s.Add(c.renew).Before(limit) {
				limit = s.Add(c.renew)
			}
			t.calls.Lock()
			ctx, cancel := context.WithDeadline(t.ctx, limit)
			l, err := c.renewOnce(ctx, t.current())
			cancel()
			t.calls.Unlock()
			switch {
			case err == nil:
				if !t.extend(l, s) {
					return
				}
				if l.StepDown {
					t.stepDown()
					return
				}
				retry.reset()
				next.Reset(time.Until(s.Add(c.renew)))
			case c.definitive(err):
				t.setLease(l)
				t.lose(err)
				return
			case t.ctx.Err() != nil:
				return
			default:
				d := retry.next()
				c.warn("renewal failed, retrying", err, "generation", l.Generation, "retry_in", d)
				t.mu.Lock()
				t.lastErr = err
				t.mu.Unlock()
				next.Reset(d)
			}
		}
	}
}

// extend records a successful renewal sent at s; it reports false if the
// term was lost meanwhile (a late success does not bring it back).
func (t *term) extend(l Lease, s time.Time) bool {
	t.mu.Lock()
	if t.lost {
		t.mu.Unlock()
		return false
	}
	t.deadline = s.Add(t.c.ttl)
	l.Deadline = t.deadline
	t.lease = l
	t.lastErr = nil
	t.timer.Stop()
	t.timer = time.AfterFunc(time.Until(t.deadline)-t.c.guard, t.expire)
	t.c.health.renewed(t.deadline)
	if t.events != nil {
		t.events.push(Event{Kind: EventRenewed, Lease: l})
	}
	t.mu.Unlock()
	t.c.debug("renewed", "generation", l.Generation, "deadline_in", time.Until(l.Deadline))
	return true
}

func (t *term) setLease(l Lease) {
	t.mu.Lock()
	defer t.mu.Unlock()
	l.Deadline = t.deadline
	t.lease = l
}

// expire runs when the deadline timer fires.
func (t *term) expire() {
	t.mu.Lock()
	if t.lost || time.Until(t.deadline) > t.c.guard {
		// Lost already, or a renewal moved the deadline and armed a
		// new timer.
		t.mu.Unlock()
		return
	}
	cause := ErrLeaseExpired
	if t.lastErr != nil {
		cause = fmt.Errorf("%w (last renewal: %v)", ErrLeaseExpired, t.lastErr)
	}
	t.mu.Unlock()
	t.lose(cause)
}

// lose ends the term for cause, cancelling its context.
func (t *term) lose(cause error) {
	t.mu.Lock()
	if t.lost {
		t.mu.Unlock()
		return
	}
	t.lost = true
	t.cause = cause
	t.timer.Stop()
	gen := t.lease.Generation
	t.mu.Unlock()
	t.c.health.lost(cause)
	t.cancel()
	t.c.info("lost the lease", "generation", gen, "cause", cause)
}

// stop ends the term without loss (its function returned, or its parent
// context ended) and waits for the renewals to stop.
func (t *term) stop() {
	t.stopOnce.Do(func() { close(t.stopped) })
	t.mu.Lock()
	t.timer.Stop()
	t.mu.Unlock()
	t.cancel()
	<-t.done
	t.c.health.follow()
}

// stepDown cancels the term's context for a step-down request, with cause
// ErrStepDown; the term is not lost, so that it can be handed over when
// its function returns.
func (t *term) stepDown() {
	t.mu.Lock()
	if t.lost || t.stepping {
		t.mu.Unlock()
		return
	}
	t.stepping = true
	t.cause = ErrStepDown
	gen := t.lease.Generation
	t.mu.Unlock()
	t.cancel()
	t.c.info("asked to step down", "generation", gen)
}

// handOver hands the term to the candidate to ("" the first) and ends it
// with cause ErrHandedOff (see Elector.Handoff).
func (t *term) handOver(ctx context.Context, to string) error {
	c := t.c
	if c.handoff == nil {
		return ErrUnsupported
	}
	t.calls.Lock()
	defer t.calls.Unlock()
	t.mu.Lock()
	over := t.lost || t.handedOff
	gen := t.lease.Generation
	t.mu.Unlock()
	if over {
		return ErrNoLease
	}
	nl, err := c.handoff.Handoff(ctx, c.owner, gen, to)
	if err != nil {
		return err
	}
	if nl == nil {
		return ErrNoCandidate
	}
	t.mu.Lock()
	t.handedOff = true
	t.mu.Unlock()
	c.info("handed off", "generation", gen, "to", nl.Owner, "next_generation", nl.Generation)
	t.lose(ErrHandedOff)
	return nil
}

// lossCause returns why the term was lost, or nil.
func (t *term) lossCause() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.cause
}
