package hoplock

import (
	"context"
	"strconv"
	"sync"
	"time"
)

// EventKind says what happened to an Elector's leadership.
type EventKind int

// The kinds of Event.
const (
	// EventAcquired: this Elector leads, in the term of Event.Lease.
	EventAcquired EventKind = iota + 1
	// EventRenewed: the term was renewed; Event.Lease has its new
	// expiry and Deadline.
	EventRenewed
	// EventLost: this Elector no longer leads (Event.Err says why), or
	// could not campaign (Event.Err says why, Event.Lease is zero).
	EventLost
)

func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventRenewed:
		return "renewed"
	case EventLost:
		return "lost"
	}
	return "EventKind(" + strconv.Itoa(int(k)) + ")"
}

// Event is a change of an Elector's leadership, as Run reports it.
type Event struct {
	Kind  EventKind
	Lease Lease
	// Err is why leadership was lost (see LossCause; ctx.Err() when
	// Run's context ended), or why a campaign could not go on.
	Err error
}

// Run campaigns for the lease until ctx ends, leading whenever it can, and
// reports on the returned channel each term acquired, renewed and lost.
// When ctx ends, Run hands the lease over to the first waiting candidate
// or, when none waits (or the backend cannot hand over), releases it (on a
// fresh context bounded by ReleaseTimeout), reports the last term lost
// with ctx.Err(), and then closes the channel. A renewal that reports a
// step-down request ends the term at once: Run reports EventLost with
// ErrStepDown, hands the term over by Lead's rule -- to the candidate of
// the owner the request named (Lease.StepDownTo), if it names one and
// that owner waits; else to the first waiting candidate; if none waits,
// it releases -- and campaigns again.
//
// Events are delivered in order without ever holding up the renewals: a
// receiver that falls behind gets consecutive EventRenewed of one term
// merged into the latest. After ctx ends, events the receiver has not
// taken within ReleaseTimeout are dropped, and the channel is closed.
//
// An event reaches the receiver some time after the fact. Code that must
// not act as leader after the term is lost should run under Lead, whose
// context is cancelled in time, and fence its writes.
//
// A permanent backend error (see Permanent) is reported as an EventLost
// with a zero Lease, and the campaign is tried again a TTL later. If the
// Elector's settings are invalid, the channel carries one such event and
// is closed.
func (e *Elector) Run(ctx context.Context) <-chan Event {
	out := make(chan Event)
	q := newEventQueue(out)
	c, err := e.config()
	if err != nil {
		q.push(Event{Kind: EventLost, Err: err})
		q.finish(DefaultReleaseTimeout)
		return out
	}
	go c.run(ctx, q)
	return out
}

func (c *elector) run(ctx context.Context, q *eventQueue) {
	defer q.finish(c.releaseTimeout)
	wake, stopWatch := c.watch(ctx)
	defer stopWatch()
	for {
		lease, sent, err := c.campaign(ctx, wake)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			q.push(Event{Kind: EventLost, Err: err})
			if !sleep(ctx, c.ttl, nil) {
				return
			}
			continue
		}
		t := c.startTerm(ctx, lease, sent, wake, q)
		c.e.setActive(t)
		<-t.ctx.Done()
		cause := t.lossCause()
		t.stop()
		c.e.setActive(nil)
		if cause == nil {
			cause = ctx.Err()
		}
		l := t.current()
		q.push(Event{Kind: EventLost, Lease: l, Err: cause})
		c.end(t, ctx.Err() != nil)
		if ctx.Err() != nil {
			return
		}
	}
}

// eventQueue hands events to a channel without ever blocking the sender.
type eventQueue struct {
	out    chan<- Event
	mu     sync.Mutex
	items  []queued
	seq    uint64
	wake   chan struct{}
	finish func(grace time.Duration)
}

type queued struct {
	ev  Event
	seq uint64
}

func newEventQueue(out chan<- Event) *eventQueue {
	q := &eventQueue{out: out, wake: make(chan struct{}, 1)}
	graceCh := make(chan time.Duration, 1)
	q.finish = func(grace time.Duration) { graceCh <- grace }
	go q.deliver(graceCh)
	return q
}

// push queues ev, merging it into a queued EventRenewed of the same term.
func (q *eventQueue) push(ev Event) {
	q.mu.Lock()
	q.seq++
	n := len(q.items)
	if n > 0 && ev.Kind == EventRenewed && q.items[n-1].ev.Kind == EventRenewed &&
		q.items[n-1].ev.Lease.Generation == ev.Lease.Generation {
		q.items[n-1] = queued{ev, q.seq}
	} else {
		q.items = append(q.items, queued{ev, q.seq})
	}
	q.mu.Unlock()
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

func (q *eventQueue) deliver(graceCh <-chan time.Duration) {
	defer close(q.out)
	var expired <-chan time.Time
	finishing := false
	for {
		q.mu.Lock()
		if len(q.items) == 0 {
			q.mu.Unlock()
			if finishing {
				return
			}
			select {
			case <-q.wake:
			case g := <-graceCh:
				finishing = true
				timer := time.NewTimer(g)
				defer timer.Stop()
				expired = timer.C
			}
			continue
		}
		head := q.items[0]
		q.mu.Unlock()
		select {
		case q.out <- head.ev:
			q.mu.Lock()
			if len(q.items) > 0 && q.items[0].seq == head.seq {
				q.items = q.items[1:]
			}
			q.mu.Unlock()
		case <-q.wake:
			// The head may have been merged: offer it again.
		case g := <-graceCh:
			finishing = true
			timer := time.NewTimer(g)
			defer timer.Stop()
			expired = timer.C
		case <-expired:
			return
		}
	}
}
