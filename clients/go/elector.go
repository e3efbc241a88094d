package hoplock

import (
	"context"
	"errors"
	"fmt"
	"sync/atomic"
	"time"
)

// Defaults of the Elector's settings.
const (
	DefaultTTL            = 15 * time.Second
	DefaultReleaseTimeout = 5 * time.Second
	// DefaultHandoffLinger is Elector.HandoffLinger's default.
	DefaultHandoffLinger = 100 * time.Millisecond
)

// maxSlots is the most terms of a lease hoplock runs at once
// (Elector.Slots).
const maxSlots = 1000

// Elector campaigns for a lease, renews it while it leads, and tells its
// program when it leads and when it has lost. Set its fields, then call
// Lead or Run; it is not to be changed while either runs. One Elector (and
// one Owner) campaigns at a time: run Lead or Run once at a time per
// Owner.
//
// Leadership is judged by this process's monotonic clock alone: a term is
// taken as lost no later than the send time of its last successful renewal
// plus TTL, whatever the wall clocks say. The backend's own clock, which
// the lease's ExpiresAt follows, lets the next leader in no earlier than
// that, so the two terms never overlap while the clocks run at the same
// rate.
type Elector struct {
	// Backend stores the lease (required). A backend that implements
	// Waiter, Renewer, Releaser, HolderReader or Watcher (the postgres
	// backend implements all) is used through them.
	Backend Backend

	// Owner identifies this process in the lease (required); unique per
	// process and lease, such as host name and process id.
	Owner string

	// TTL is how long a term lasts without renewal (default 15s).
	TTL time.Duration

	// Renew is how often a leader renews: it must be less than TTL
	// (default TTL/3). A renewal that fails with a transient error is
	// retried sooner, backing off, until the TTL runs out.
	Renew time.Duration

	// Poll is how often a follower reads the lease while another holds
	// it, when the backend cannot wait for it (default Renew); with a
	// Waiter, how long each wait in the backend lasts.
	Poll time.Duration

	// ReleaseTimeout bounds the release at the end of each term, which
	// runs on a fresh context (default 5s, at most TTL).
	ReleaseTimeout time.Duration

	// HandoffLinger is how long Lead and Run wait, on a graceful stop
	// (their context ended), after handing the term over or releasing
	// it, before they return (default 100ms; negative: not at all). The
	// next leader's first milliseconds then do not compete with this
	// process's teardown -- its connections closing, each a server
	// process exiting, and its own exit -- for the same cores: on two
	// cores that teardown took 4.5-5 ms at the median, most of the
	// handover's tail (bench/HISTORY.md, section 9). A stop is that much
	// slower; the new leader leads no later.
	HandoffLinger time.Duration

	// Now is the wall clock that stamps ExpiresAt when writing through a
	// plain Backend, and by which a follower judges such a lease expired
	// (default time.Now). It plays no part in deciding whether this
	// Elector still leads, nor with backends that keep their own clock.
	Now func() time.Time

	// Logger, if set, is told of terms begun and lost (Info), renewals
	// (Debug) and errors retried (Warn). On Go 1.21 and later it is a
	// log/slog logger (*slog.Logger); built with an older Go, a
	// golang.org/x/exp/slog one. See the type Logger.
	Logger *Logger

	// Priority ranks this Elector among the candidates waiting for the
	// lease: a freed or handed-over lease goes to the highest priority,
	// among equals to the one waiting longest (default 0). Only with a
	// backend that implements CandidateWaiter (the postgres backend,
	// against hoplock 1.2 and later); ignored otherwise.
	Priority int

	// Value is published with each term this Elector begins (an address
	// to send work to the leader, say): given with the wait that begins
	// the term, and proclaimed (Proclaimer) when the term began without
	// it. Any process reads it with Leader. Ignored by backends that keep
	// no values (hoplock 1.1).
	Value string

	// MinHold, if positive, is how long each term this Elector begins
	// keeps the lease from other owners at least: a term released (or
	// ended with its session) sooner than MinHold after it began keeps
	// the lease free of any other owner until then, as if still held,
	// though this Elector no longer leads; this Elector (its Owner) may
	// take it again meanwhile. A term handed over (Handoff, a step-down,
	// a graceful stop with a candidate waiting) keeps no hold. For work
	// that must run at most once per period, whoever runs it. At most
	// TTL. Only with a backend that implements CandidateWaiter and can
	// hold terms (the postgres backend, against hoplock 1.2 and later):
	// with any other, Lead and Run return an error wrapping
	// ErrUnsupported rather than lead without the hold.
	MinHold time.Duration

	// Slots, if above 1, lets up to Slots Electors of different Owners
	// lead the lease at once ("N workers at most"), each in a term of its
	// own with its own generation (its fencing token); one more waits
	// until a term ends. Every Elector of the lease must give the same
	// Slots (the server refuses another number: an error marked
	// Permanent). Leader reports one of the running terms. Only with a
	// backend that implements CandidateWaiter and Renewer and can run
	// several terms (the postgres backend, against hoplock 1.2 and
	// later): with any other, Lead and Run return an error wrapping
	// ErrUnsupported rather than lead alone. 0 or 1: one term at a time.
	Slots int

	active atomic.Value // *term: the running term, for Handoff
	health atomic.Value // *health: what Health judges by
}

// elector is an Elector's settings, checked and defaulted, with the
// optional interfaces of its Backend found once.
type elector struct {
	e        *Elector
	b        Backend
	waiter   Waiter
	cwaiter  CandidateWaiter
	procl    Proclaimer
	handoff  HandOffer
	renewer  Renewer
	releaser Releaser
	holder   HolderReader
	watcher  Watcher

	owner          string
	linger         time.Duration
	cand           Candidate
	ttl            time.Duration
	renew          time.Duration
	poll           time.Duration
	releaseTimeout time.Duration
	guard          time.Duration
	now            func() time.Time
	log            *Logger
	health         *health
}

func (e *Elector) config() (*elector, error) {
	if e.Backend == nil {
		return nil, errors.New("hoplock: Elector.Backend is nil")
	}
	if e.Owner == "" {
		return nil, errors.New("hoplock: Elector.Owner is empty")
	}
	c := &elector{
		e:              e,
		b:              e.Backend,
		owner:          e.Owner,
		cand:           Candidate{Priority: e.Priority, Value: e.Value, MinHold: e.MinHold, Slots: e.Slots},
		ttl:            e.TTL,
		renew:          e.Renew,
		poll:           e.Poll,
		releaseTimeout: e.ReleaseTimeout,
		linger:         e.HandoffLinger,
		now:            e.Now,
		log:            e.Logger,
	}
	if c.ttl == 0 {
		c.ttl = DefaultTTL
	}
	if c.ttl < 0 {
		return nil, fmt.Errorf("hoplock: Elector.TTL is negative (%v)", c.ttl)
	}
	if c.renew == 0 {
		c.renew = c.ttl / 3
	}
	if c.renew <= 0 || c.renew >= c.ttl {
		return nil, fmt.Errorf("hoplock: Elector.Renew (%v) must be positive and less than TTL (%v)", c.renew, c.ttl)
	}
	if c.cand.MinHold < 0 || c.cand.MinHold > c.ttl {
		return nil, fmt.Errorf("hoplock: Elector.MinHold (%v) must not be negative nor more than TTL (%v)", c.cand.MinHold, c.ttl)
	}
	if c.cand.Slots < 0 || c.cand.Slots > maxSlots {
		return nil, fmt.Errorf("hoplock: Elector.Slots (%d) must be 0 to %d", c.cand.Slots, maxSlots)
	}
	if c.poll == 0 {
		c.poll = c.renew
	}
	if c.poll < 0 {
		return nil, fmt.Errorf("hoplock: Elector.Poll is negative (%v)", c.poll)
	}
	if c.linger == 0 {
		c.linger = DefaultHandoffLinger
	}
	if c.releaseTimeout == 0 {
		c.releaseTimeout = DefaultReleaseTimeout
		if c.releaseTimeout > c.ttl {
			c.releaseTimeout = c.ttl
		}
	}
	if c.releaseTimeout < 0 {
		return nil, fmt.Errorf("hoplock: Elector.ReleaseTimeout is negative (%v)", c.releaseTimeout)
	}
	if c.now == nil {
		c.now = time.Now
	}
	// The term's context is cancelled this much before its deadline, so
	// that timer latency never lets it outlive the deadline.
	c.guard = c.ttl / 50
	if c.guard > 50*time.Millisecond {
		c.guard = 50 * time.Millisecond
	}
	c.waiter, _ = e.Backend.(Waiter)
	c.renewer, _ = e.Backend.(Renewer)
	c.releaser, _ = e.Backend.(Releaser)
	c.holder, _ = e.Backend.(HolderReader)
	c.watcher, _ = e.Backend.(Watcher)
	c.cwaiter, _ = e.Backend.(CandidateWaiter)
	c.procl, _ = e.Backend.(Proclaimer)
	c.handoff, _ = e.Backend.(HandOffer)
	if c.cand.MinHold > 0 && c.cwaiter == nil {
		return nil, fmt.Errorf("hoplock: Elector.MinHold needs a backend that implements CandidateWaiter: %w", ErrUnsupported)
	}
	if c.cand.Slots > 1 && (c.cwaiter == nil || c.renewer == nil) {
		return nil, fmt.Errorf("hoplock: Elector.Slots needs a backend that implements CandidateWaiter and Renewer: %w", ErrUnsupported)
	}
	c.health = newHealth(c)
	e.setHealth(c.health)
	return c, nil
}

// Lead waits until this Elector leads, then runs fn with the term's lease
// and a context that is cancelled the moment leadership is lost: when a
// renewal or a confirmed change tells it so, and in any case before the
// send time of the last successful renewal plus TTL, by the local
// monotonic clock. It is also cancelled when ctx is. When fn returns, Lead
// stops renewing, releases the lease on a fresh context bounded by
// ReleaseTimeout, and returns fn's error.
//
// Two ends of a term hand it over instead of releasing it, when the
// backend is a HandOffer: if ctx has ended by the time fn returns (a
// graceful stop), or if a renewal reported a step-down request. The term
// then goes, in one step, to a candidate waiting for the lease, by this
// rule: after a step-down request that named an owner (the lease's
// StepDownTo: hoplock_request_step_down's to_owner, or a candidate that
// asked for itself with preempt => true), to that owner's candidate; if
// that owner does not wait (ErrNoCandidate), if the request named nobody,
// and on a graceful stop, to the first candidate (highest Priority, then
// the longest waiting); if none waits, or the backend (hoplock 1.1)
// cannot hand over, the lease is released as before. A step-down request
// is acted on thus: the renewal that reports it cancels fn's context,
// with LossCause ErrStepDown, while the term still holds the lease
// (renewals stop); when fn returns -- before the deadline, or the term is
// lost and released as usual -- Lead hands the term over and returns fn's
// error.
//
// fn must stop acting as leader when its context is cancelled, and should
// fence its writes with the lease's Generation: a process may pause at any
// moment, for longer than the TTL. LossCause(ctx) tells fn why its term
// ended.
//
// If ctx ends before this Elector leads, Lead returns ctx.Err(); a
// permanent backend error (see Permanent) ends the campaign too, and is
// returned. Transient errors are retried.
func (e *Elector) Lead(ctx context.Context, fn func(ctx context.Context, lease Lease) error) error {
	c, err := e.config()
	if err != nil {
		return err
	}
	wake, stopWatch := c.watch(ctx)
	defer stopWatch()

	lease, sent, err := c.campaign(ctx, wake)
	if err != nil {
		return err
	}
	t := c.startTerm(ctx, lease, sent, wake, nil)
	e.setActive(t)
	err = fn(t.ctx, t.current())
	t.stop()
	e.setActive(nil)
	c.end(t, ctx.Err() != nil)
	return err
}

func (e *Elector) setActive(t *term) { e.active.Store(t) }

// Handoff hands the term this Elector runs now (under Lead or Run) over to
// the candidate waiting for the lease as owner to, or with to "" to the
// first candidate (highest Priority, then the longest waiting), in one
// step: the candidate's wait returns the next term, and nobody leads in
// between. The rule: if, and only if, Handoff returns nil, the term is
// over -- its context is cancelled at once with LossCause ErrHandedOff,
// Lead then returns when fn does (releasing nothing), and Run reports
// EventLost with ErrHandedOff and campaigns again, as a candidate. On any
// error this Elector goes on leading: ErrNoCandidate when no such
// candidate waits (or the term was already over on the backend's side),
// ErrNoLease when this Elector does not lead, ErrUnsupported when the
// backend (hoplock 1.1) cannot hand over, or the backend's error.
// Renewals and Handoff never run at the same time.
func (e *Elector) Handoff(ctx context.Context, to string) error {
	t, _ := e.active.Load().(*term)
	if t == nil {
		return ErrNoLease
	}
	return t.handOver(ctx, to)
}

// Leader returns who leads now, and the value it proclaimed (see Value),
// for any process, leading or not, campaigning or not: the running term
// by the backend's clock (HolderReader), or through a plain Backend the
// stored state unless it has expired by Now. With nobody leading it
// returns ErrNoLease. Only Backend (and Now) need be set.
func (e *Elector) Leader(ctx context.Context) (State, string, error) {
	if e.Backend == nil {
		return State{}, "", errors.New("hoplock: Elector.Backend is nil")
	}
	h, _ := e.Backend.(HolderReader)
	now := time.Now
	if e.Now != nil {
		now = e.Now
	}
	l, err := currentHolder(ctx, e.Backend, h, now)
	switch {
	case err != nil:
		return State{}, "", err
	case l == nil:
		return State{}, "", ErrNoLease
	}
	return l.State, l.Value, nil
}

// currentHolder returns the running term, or nil if nobody leads: from h
// if not nil, else the state b stores unless it has expired by now.
func currentHolder(ctx context.Context, b Backend, h HolderReader, now func() time.Time) (*Lease, error) {
	if h != nil {
		return h.Holder(ctx)
	}
	st, handle, err := b.Read(ctx)
	if err != nil && !errors.Is(err, ErrNoLease) {
		return nil, err
	}
	if st == nil || st.expiredAt(now()) {
		return nil, nil
	}
	return &Lease{Handle: handle, State: *st}, nil
}

// end ends term t once it has stopped: it hands the term over if graceful
// (the caller's context ended while it led) or a step-down was requested,
// and the term still holds; otherwise, or if nobody waits or the backend
// cannot hand over, it releases the lease. A term already handed over is
// left alone. The handoff goes to the candidate the step-down request
// named (StepDownTo), if it named one and that owner waits; else to the
// first waiting candidate.
func (c *elector) end(t *term, graceful bool) {
	t.mu.Lock()
	handedOff, lost, stepping := t.handedOff, t.lost, t.stepping
	l := t.lease
	t.mu.Unlock()
	if handedOff {
		return
	}
	if (graceful || stepping) && !lost && c.handoff != nil {
		ctx, cancel := context.WithTimeout(context.Background(), c.releaseTimeout)
		var (
			nl  *Lease
			err error
		)
		if stepping && l.StepDown && l.StepDownTo != "" {
			nl, err = c.handoff.Handoff(ctx, c.owner, l.Generation, l.StepDownTo)
			if err == nil && nl == nil {
				c.info("the candidate asked for does not wait, handing off to the first",
					"generation", l.Generation, "step_down_to", l.StepDownTo)
			}
		}
		if err == nil && nl == nil {
			nl, err = c.handoff.Handoff(ctx, c.owner, l.Generation, "")
		}
		cancel()
		switch {
		case err == nil && nl != nil:
			c.info("handed off", "generation", l.Generation, "to", nl.Owner, "next_generation", nl.Generation)
			c.lingerAfter(graceful)
			return
		case err == nil, errors.Is(err, ErrUnsupported):
		default:
			c.warn("could not hand the lease over, releasing it", err, "generation", l.Generation)
		}
	}
	c.release(l)
	c.lingerAfter(graceful && !lost)
}

// lingerAfter waits HandoffLinger after a term this Elector ended for its
// graceful stop, so that its caller's teardown comes after the next
// leader's first milliseconds (see Elector.HandoffLinger).
func (c *elector) lingerAfter(graceful bool) {
	if graceful && c.linger > 0 {
		time.Sleep(c.linger)
	}
}

// watch starts the backend's Watch, if it has one, on a context of its
// own; the function returned stops it and waits (up to ReleaseTimeout)
// for it to finish.  The watch outlives the end of ctx until that
// function is called, when Lead or Run returns: a graceful stop does not
// tear down its connection in the middle of handing the term over.
func (c *elector) watch(ctx context.Context) (<-chan struct{}, func()) {
	if c.watcher == nil {
		return nil, func() {}
	}
	wctx, cancel := context.WithCancel(detached{ctx})
	wake := c.watcher.Watch(wctx)
	return wake, func() {
		cancel()
		limit := time.NewTimer(c.releaseTimeout)
		defer limit.Stop()
		for {
			select {
			case _, ok := <-wake:
				if !ok {
					return
				}
			case <-limit.C:
				return
			}
		}
	}
}

// campaign returns a term this Elector has just begun, with the local time
// at which the call that began (or last renewed) it was sent, no earlier
// than Renew ago.
func (c *elector) campaign(ctx context.Context, wake <-chan struct{}) (Lease, time.Time, error) {
	c.health.campaign(true)
	defer c.health.campaign(false)
	retry := c.newBackoff()
	for {
		if err := ctx.Err(); err != nil {
			return Lease{}, time.Time{}, err
		}
		var (
			lease *Lease
			sent  = time.Now()
			pause time.Duration
			err   error
		)
		c.health.heartbeat()
		if c.cwaiter != nil && c.cand != (Candidate{}) {
			lease, err = c.cwaiter.WaitCandidate(ctx, c.owner, c.ttl, c.poll, c.cand)
			if d := time.Since(sent); err == nil && lease == nil && d < c.poll/2 {
				pause = c.poll/2 - d
			}
		} else if c.waiter != nil {
			lease, err = c.waiter.Wait(ctx, c.owner, c.ttl, c.poll)
			if d := time.Since(sent); err == nil && lease == nil && d < c.poll/2 {
				// The wait ended early: do not spin on a backend
				// that cannot wait.
				pause = c.poll/2 - d
			}
		} else {
			lease, sent, pause, err = c.tryWrite(ctx)
		}
		c.health.heartbeat()
		switch {
		case err == nil && lease == nil:
			retry.reset()
			if pause > 0 && !sleep(ctx, pause, wake) {
				return Lease{}, time.Time{}, ctx.Err()
			}
			continue
		case err == nil:
		case ctx.Err() != nil:
			// The call may have begun a term before it was
			// interrupted: end any term of this owner.
			c.cleanup()
			return Lease{}, time.Time{}, ctx.Err()
		case IsPermanent(err):
			return Lease{}, time.Time{}, err
		case errors.Is(err, ErrLeaseHeld):
			// Lost a race for the lease: look again at once.
			continue
		default:
			d := retry.next()
			c.warn("campaign failed, retrying", err, "retry_in", d)
			if !sleep(ctx, d, nil) {
				return Lease{}, time.Time{}, ctx.Err()
			}
			continue
		}
		retry.reset()

		// A term that began long after its call was sent (a wait
		// that lasted) is renewed before it is used, so that its
		// deadline starts from a recent send time. A wait that
		// lasted past the TTL leaves a term this Elector cannot
		// vouch for by its own clock, but renewing it is safe (a
		// renewal by generation succeeds only while the term is
		// still current): it gets Renew to succeed, and the term is
		// dropped only if the renewal says it is over or fails.
		l := *lease
		fresh := true
		limit := sent.Add(c.ttl - c.guard)
		if late := time.Now().Add(c.renew); late.After(limit) {
			limit = late
		}
		for time.Since(sent) >= c.renew {
			s := time.Now()
			if !s.Before(limit) {
				fresh = false
				break
			}
			c.health.heartbeat()
			rctx, cancel := context.WithDeadline(ctx, limit)
			nl, err := c.renewOnce(rctx, l)
			cancel()
			c.health.heartbeat()
			if err == nil {
				l, sent = nl, s
				limit = s.Add(c.ttl - c.guard)
				continue
			}
			l = nl
			if c.definitive(err) || ctx.Err() != nil {
				fresh = false
				break
			}
			if !sleep(ctx, retry.next(), nil) {
				break
			}
		}
		if ctx.Err() != nil || !fresh {
			c.release(l)
			if err := ctx.Err(); err != nil {
				return Lease{}, time.Time{}, err
			}
			continue
		}
		c.proclaim(ctx, &l)
		l.Deadline = sent.Add(c.ttl)
		return l, sent, nil
	}
}

// proclaim publishes Value for the term of l if it began without it. A
// failure is logged, not fatal: the term is no less this Elector's.
func (c *elector) proclaim(ctx context.Context, l *Lease) {
	if c.cand.Value == "" || l.Value == c.cand.Value || c.procl == nil {
		return
	}
	pctx, cancel := context.WithTimeout(ctx, c.renew)
	err := c.procl.Proclaim(pctx, c.owner, l.Generation, c.cand.Value)
	cancel()
	switch {
	case err == nil:
		l.Value = c.cand.Value
	case errors.Is(err, ErrUnsupported):
	default:
		c.warn("could not proclaim the value", err, "generation", l.Generation)
	}
}

// tryWrite is one step of a campaign through a plain Backend: read the
// lease, and begin a new term if it is free, expired, or an earlier term
// of this owner. It returns a nil lease and how long to wait before the
// next try when another owner holds it.
func (c *elector) tryWrite(ctx context.Context) (*Lease, time.Time, time.Duration, error) {
	st, handle, err := c.b.Read(ctx)
	if errors.Is(err, ErrNoLease) {
		st, handle, err = nil, "", nil
	}
	if err != nil {
		return nil, time.Time{}, 0, err
	}
	now := c.now()
	if st != nil && st.Owner != c.owner && !st.expiredAt(now) {
		pause := st.ExpiresAt.Sub(now) + time.Millisecond
		if pause > c.poll {
			pause = c.poll
		}
		return nil, time.Time{}, pause, nil
	}
	next := &State{Owner: c.owner, Generation: 1, ExpiresAt: now.Add(c.ttl)}
	if st != nil {
		next.Generation = st.Generation + 1
	}
	sent := time.Now()
	h, err := c.b.Write(ctx, handle, next)
	if err != nil {
		return nil, time.Time{}, 0, err
	}
	return &Lease{Handle: h, State: *next, AcquiredAt: now}, sent, 0, nil
}

// errTermChanged reports a renewal through a plain Backend that stored a
// new term instead of extending the running one.
var errTermChanged = fmt.Errorf("%w: the backend began a new term instead of renewing", ErrNoLease)

// renewOnce renews the term of l once. It returns the renewed lease, or on
// failure the lease as it now stands for release.
func (c *elector) renewOnce(ctx context.Context, l Lease) (Lease, error) {
	if c.renewer != nil {
		nl, err := c.renewer.Renew(ctx, c.owner, c.ttl, l.Generation)
		if err != nil {
			return l, err
		}
		if nl == nil || nl.Generation != l.Generation {
			return l, ErrNoLease
		}
		if nl.AcquiredAt.IsZero() {
			nl.AcquiredAt = l.AcquiredAt
		}
		nl.Deadline = l.Deadline
		return *nl, nil
	}
	s := &State{Owner: c.owner, Generation: l.Generation, ExpiresAt: c.now().Add(c.ttl)}
	h, err := c.b.Write(ctx, l.Handle, s)
	if err != nil {
		return l, err
	}
	nl := Lease{Handle: h, State: *s, AcquiredAt: l.AcquiredAt, Deadline: l.Deadline}
	if s.Generation != l.Generation {
		return nl, errTermChanged
	}
	return nl, nil
}

// confirm checks, after a hint that the lease may have changed, whether
// the term of l still holds it. It returns why not (nil if it does), and
// the error of the check itself if it could not tell (then lost is nil).
func (c *elector) confirm(ctx context.Context, l Lease) (lost, failed error) {
	if c.cand.Slots > 1 {
		// the holder is one of several: ask for this term itself
		nl, err := c.renewer.Renew(ctx, c.owner, c.ttl, l.Generation)
		switch {
		case err != nil && !c.definitive(err):
			return nil, err
		case err != nil:
			return err, nil
		case nl == nil || nl.Generation != l.Generation:
			return ErrNoLease, nil
		}
		return nil, nil
	}
	var cur *State
	if c.holder != nil {
		h, err := c.holder.Holder(ctx)
		if err != nil {
			return nil, err
		}
		if h != nil {
			cur = &h.State
		}
	} else {
		st, _, err := c.b.Read(ctx)
		if err != nil && !errors.Is(err, ErrNoLease) {
			return nil, err
		}
		cur = st
	}
	switch {
	case cur == nil:
		return ErrNoLease, nil
	case cur.Owner != c.owner || cur.Generation != l.Generation:
		return ErrLeaseHeld, nil
	}
	return nil, nil
}

// definitive reports whether a renewal error means the term is over, as
// opposed to one worth retrying.
func (c *elector) definitive(err error) bool {
	return errors.Is(err, ErrNoLease) || errors.Is(err, ErrLeaseHeld) || IsPermanent(err)
}

// release ends the term of l on a fresh context bounded by
// ReleaseTimeout. A term that is already over is no error.
func (c *elector) release(l Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), c.releaseTimeout)
	defer cancel()
	var err error
	if c.releaser != nil {
		err = c.releaser.Release(ctx, c.owner, l.Generation)
	} else {
		err = c.b.Delete(ctx, l.Handle)
	}
	switch {
	case err == nil:
		c.debug("released", "generation", l.Generation)
	case errors.Is(err, ErrNoLease), errors.Is(err, ErrLeaseHeld):
	default:
		c.warn("could not release the lease", err, "generation", l.Generation)
	}
}

// cleanup ends any term of this owner after a campaign call was
// interrupted, on a fresh context bounded by ReleaseTimeout.
func (c *elector) cleanup() {
	ctx, cancel := context.WithTimeout(context.Background(), c.releaseTimeout)
	defer cancel()
	if c.releaser != nil {
		_ = c.releaser.Release(ctx, c.owner, 0)
		return
	}
	st, h, err := c.b.Read(ctx)
	if err == nil && st != nil && st.Owner == c.owner {
		_ = c.b.Delete(ctx, h)
	}
}

// sleep waits for d, a signal on wake, or the end of ctx; it reports
// whether ctx is still live.
func sleep(ctx context.Context, d time.Duration, wake <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
		return false
	}
	return true
}

// backoff spaces out retries after transient errors: from Renew/10 (at
// least 5ms), doubling, up to Renew/2.
type backoff struct{ min, max, cur time.Duration }

func (c *elector) newBackoff() *backoff {
	b := &backoff{min: c.renew / 10, max: c.renew / 2}
	if b.min < 5*time.Millisecond {
		b.min = 5 * time.Millisecond
	}
	if b.max < b.min {
		b.max = b.min
	}
	return b
}

func (b *backoff) next() time.Duration {
	if b.cur == 0 {
		b.cur = b.min
	} else if b.cur *= 2; b.cur > b.max {
		b.cur = b.max
	}
	return b.cur
}

func (b *backoff) reset() { b.cur = 0 }

func (c *elector) debug(msg string, args ...any) {
	if c.log != nil {
		c.log.Debug("hoplock: "+msg, append([]any{"owner", c.owner}, args...)...)
	}
}

func (c *elector) info(msg string, args ...any) {
	if c.log != nil {
		c.log.Info("hoplock: "+msg, append([]any{"owner", c.owner}, args...)...)
	}
}

func (c *elector) warn(msg string, err error, args ...any) {
	if c.log != nil {
		c.log.Warn("hoplock: "+msg, append([]any{"owner", c.owner, "err", err}, args...)...)
	}
}

// detached is a context with the values of its parent but never done:
// context.WithoutCancel, which Go 1.19 does not have.
type detached struct{ parent context.Context }

func (detached) Deadline() (time.Time, bool)         { return time.Time{}, false }
func (detached) Done() <-chan struct{}               { return nil }
func (detached) Err() error                          { return nil }
func (d detached) Value(key interface{}) interface{} { return d.parent.Value(key) }
