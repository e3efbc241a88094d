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
	// EventLeader: another instance leads, in the term of Event.Lease
	// (its Owner, Generation, ExpiresAt and Value, as the backend read
	// them; no Deadline): a follower forwards work to the leader's
	// Value. Reported once per term, while this Elector does not lead
	// (see Run).
	EventLeader
)

func (k EventKind) String() string {
	switch k {
	case EventAcquired:
		return "acquired"
	case EventRenewed:
		return "renewed"
	case EventLost:
		return "lost"
	case EventLeader:
		return "leader"
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
// reports on the returned channel each term acquired, renewed and lost,
// and, while it follows, each term of another instance (EventLeader).
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
// EventLeader follows this rule. While this Elector does not lead, Run
// reads who leads (HolderReader, or through a plain Backend the stored
// state unless it has expired by Now, as Leader does): when it starts,
// each time the backend's Watcher signals a possible change, and once
// its own term has ended; with no Watcher, also every Poll. Each read
// that finds a term of another Owner whose Generation is greater than any
// this Run has reported, as EventAcquired or EventLeader, is reported as
// EventLeader with that term. So it is reported once per term (a value
// proclaimed later in the same term is not: read it with Leader), never
// for this Elector's own Owner, never between this Elector's
// EventAcquired and the EventLost of that term, never after the last
// EventLost, and never for a term older than one already reported, even
// when a read comes back late: the generations of the EventLeader events
// rise strictly, each above that of every EventAcquired before it. (An
// EventAcquired is never held back: should a term of its own begin and be
// taken over while a read finds the next term and reports it, the
// EventAcquired comes after that EventLeader.) Each read is bounded by
// Renew; one that fails is tried again, backing off as renewals do. A
// term that begins and ends between two reads goes unreported.
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
	// Every signal of the Watcher goes both to the campaign (and the
	// term) and to the follower that reports EventLeader.
	wake, followWake := fanOut(wake)
	kick := make(chan struct{}, 1)
	fctx, stopFollow := context.WithCancel(ctx)
	followDone := make(chan struct{})
	go func() {
		defer close(followDone)
		c.followLeaders(fctx, q, followWake, kick)
	}()
	defer func() {
		q.stopLeaders()
		stopFollow()
		<-followDone
	}()
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
		if ctx.Err() != nil {
			q.stopLeaders()
		}
		q.push(Event{Kind: EventLost, Lease: l, Err: cause})
		c.end(t, ctx.Err() != nil)
		if ctx.Err() != nil {
			return
		}
		// Following again: who leads now?
		select {
		case kick <- struct{}{}:
		default:
		}
	}
}

// fanOut copies every signal of in to both channels it returns, without
// blocking (a signal the receiver has not taken yet absorbs the next), and
// closes both when in closes. A nil in gives nil channels.
func fanOut(in <-chan struct{}) (<-chan struct{}, <-chan struct{}) {
	if in == nil {
		return nil, nil
	}
	a, b := make(chan struct{}, 1), make(chan struct{}, 1)
	go func() {
		defer close(a)
		defer close(b)
		for range in {
			select {
			case a <- struct{}{}:
			default:
			}
			select {
			case b <- struct{}{}:
			default:
			}
		}
	}()
	return a, b
}

// followLeaders reports, as EventLeader, each new term of another owner
// it reads while this Elector does not lead: at once, then at each signal
// of wake or kick, and with no Watcher every Poll; each read is bounded by
// Renew, and a failed one is retried with backoff. It returns when ctx
// ends.
func (c *elector) followLeaders(ctx context.Context, q *eventQueue, wake, kick <-chan struct{}) {
	var tick <-chan time.Time
	if c.watcher == nil {
		tk := time.NewTicker(c.poll)
		defer tk.Stop()
		tick = tk.C
	}
	retry := c.newBackoff()
	retryTimer := time.NewTimer(time.Hour)
	retryTimer.Stop()
	defer retryTimer.Stop()
	for {
		if q.following() {
			rctx, cancel := context.WithTimeout(ctx, c.renew)
			l, err := currentHolder(rctx, c.b, c.holder, c.now)
			cancel()
			switch {
			case err != nil && ctx.Err() == nil:
				d := retry.next()
				c.debug("could not read who leads, retrying", "err", err, "retry_in", d)
				retryTimer.Reset(d)
			case err == nil:
				retry.reset()
				if l != nil && l.Owner != c.owner && q.offerLeader(*l) {
					c.debug("another instance leads", "leader", l.Owner, "generation", l.Generation)
				}
			}
		}
		select {
		case <-ctx.Done():
			return
		case _, ok := <-wake:
			if !ok {
				wake = nil
			}
		case <-kick:
		case <-tick:
		case <-retryTimer.C:
		}
	}
}

// eventQueue hands events to a channel without ever blocking the sender.
// It also keeps EventLeader in order with the Elector's own terms: under
// the same lock as the queue, it remembers whether a term of this Elector
// runs (from its EventAcquired to its EventLost) and the greatest
// generation reported by EventAcquired or EventLeader.
type eventQueue struct {
	out    chan<- Event
	mu     sync.Mutex
	items  []queued
	seq    uint64
	wake   chan struct{}
	finish func(grace time.Duration)

	leading  bool  // between an EventAcquired and its EventLost
	reported int64 // the greatest generation acquired or reported as led
	done     bool  // no more EventLeader (Run is ending)
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
// An EventAcquired marks this Elector leading, an EventLost not.
func (q *eventQueue) push(ev Event) {
	q.mu.Lock()
	switch ev.Kind {
	case EventAcquired:
		q.leading = true
		if ev.Lease.Generation > q.reported {
			q.reported = ev.Lease.Generation
		}
	case EventLost:
		q.leading = false
	}
	q.pushLocked(ev)
}

// offerLeader queues an EventLeader for the term of l, another owner's,
// unless this Elector leads, Run is ending, or a term of l's generation
// or a later one was reported already; it reports whether it queued it.
func (q *eventQueue) offerLeader(l Lease) bool {
	q.mu.Lock()
	if q.leading || q.done || l.Generation <= q.reported {
		q.mu.Unlock()
		return false
	}
	q.reported = l.Generation
	q.pushLocked(Event{Kind: EventLeader, Lease: l})
	return true
}

// following reports whether an EventLeader could be queued now: this
// Elector does not lead, and Run is not ending.
func (q *eventQueue) following() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	return !q.leading && !q.done
}

// stopLeaders queues no EventLeader from now on.
func (q *eventQueue) stopLeaders() {
	q.mu.Lock()
	q.done = true
	q.mu.Unlock()
}

// pushLocked queues ev; q.mu held, and released.
func (q *eventQueue) pushLocked(ev Event) {
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
