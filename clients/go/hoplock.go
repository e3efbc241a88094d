package hoplock

import (
	"context"
	"errors"
	"time"
)

// Errors a Backend reports, and the Elector gives as the reason a term was
// lost (see LossCause).
var (
	// ErrLeaseHeld reports that another owner holds the lease, or that the
	// lease changed since the handle passed in was read.
	ErrLeaseHeld = errors.New("hoplock: lease held by another owner")

	// ErrNoLease reports that there is no lease: nothing is stored, or
	// the term the caller asked about is over.
	ErrNoLease = errors.New("hoplock: no lease")

	// ErrLeaseExpired is the reason a term is lost when no renewal
	// succeeded in time: the last successful renewal was sent a TTL ago,
	// by this process's monotonic clock. When renewals failed, the error
	// says why the last one did.
	ErrLeaseExpired = errors.New("hoplock: lease expired before it could be renewed")

	// ErrHandedOff is the reason a term is lost when this Elector handed
	// it over to a waiting candidate (Elector.Handoff).
	ErrHandedOff = errors.New("hoplock: term handed over to another candidate")

	// ErrStepDown is the reason a term's context is cancelled when a
	// renewal reported that a step-down was requested
	// (hoplock_request_step_down): the Elector hands the term over once
	// the function it runs returns.
	ErrStepDown = errors.New("hoplock: asked to step down")

	// ErrNoCandidate reports a handoff that found no candidate waiting
	// (none at all, or not the one named), or a term that was no longer
	// the caller's; the term goes on.
	ErrNoCandidate = errors.New("hoplock: no candidate to hand the term to")

	// ErrUnsupported reports that the backend (or the server behind it:
	// hoplock before 1.2) cannot do what was asked.
	ErrUnsupported = errors.New("hoplock: not supported by the backend")
)

// State is what a Backend stores for a lease: who holds it, in which term,
// and until when.
type State struct {
	// Owner identifies the holder. It must be unique per process (and
	// per Elector): host name and process id, say.
	Owner string

	// Generation numbers the term. A new term always has a greater
	// generation than the state it replaces; renewals keep it. It is the
	// fencing token: pass it to hoplock_fence, or stamp rows checked by
	// hoplock_fenced, so that writes of an earlier term are refused.
	Generation int64

	// ExpiresAt is when the term lapses unless renewed, by the clock of
	// whoever wrote it: the PostgreSQL server's clock for the postgres
	// backend, the Elector's Now for a plain Backend. The Elector never
	// compares it with its own clock to decide whether it still leads.
	ExpiresAt time.Time
}

// IsExpired reports whether ExpiresAt has passed by the local wall clock.
// It is only as good as the agreement between this clock and the clock
// that set ExpiresAt.
func (s State) IsExpired() bool { return s.expiredAt(time.Now()) }

// TTL returns how long the state has left by the local wall clock: zero
// once it has expired. Like IsExpired, it trusts the clocks to agree.
func (s State) TTL() time.Duration {
	if d := time.Until(s.ExpiresAt); d > 0 {
		return d
	}
	return 0
}

func (s State) expiredAt(now time.Time) bool { return !now.Before(s.ExpiresAt) }

// Lease is one term of leadership, as the Elector hands it to the function
// it runs (Elector.Lead) or reports it in events (Elector.Run).
type Lease struct {
	// Handle is the backend's version of the stored state this term last
	// wrote, for Backend.Write and Backend.Delete.
	Handle string

	// State is the term as stored: its Owner, its Generation (the
	// fencing token) and its ExpiresAt (by the backend's clock).
	State

	// AcquiredAt is when the term began, by the backend's clock (the
	// server's, for PostgreSQL); through a plain Backend, by the
	// Elector's Now when it wrote the term.
	AcquiredAt time.Time

	// Deadline is when, by this process's clock, the term lapses unless
	// it is renewed: the send time of its last successful renewal (or of
	// the call that began it) plus the TTL. It carries a monotonic clock
	// reading: compare it with time.Now only, as time.Until(l.Deadline).
	// Zero in leases returned by a backend.
	Deadline time.Time

	// Value is what the holder proclaimed for the term (its address,
	// say; see Elector.Value), or "" if nothing, or if the backend
	// keeps no values.
	Value string

	// StepDown reports that a step-down of the term was requested
	// (hoplock_request_step_down): its holder is to hand it over.
	StepDown bool

	// StepDownTo is the owner a step-down request named
	// (hoplock_request_step_down's to_owner, or a candidate that asked
	// for itself with preempt => true), or "" for any candidate. A
	// Renewer fills it only in a lease that reports StepDown (the
	// postgres backend reads it from hoplock_leases then); "" elsewhere.
	StepDownTo string
}

// Backend stores the state of one lease with compare-and-swap on an opaque
// handle. The Elector runs on any Backend; backendtest.Run checks one
// against this contract.
//
//   - Read returns the stored state, expired or not, and its handle. With
//     nothing stored it returns (nil, "", nil); the Elector also accepts
//     ErrNoLease then.
//   - Write stores s if prevHandle is the current handle ("" meaning that
//     nothing is stored) and returns the new handle, which differs from
//     every earlier one. Otherwise it returns ErrLeaseHeld and changes
//     nothing. A backend that decides the generation or the expiry itself
//     (PostgreSQL's does, by its own clock) writes what it stored back
//     into s.
//   - Delete removes the state if handle is current. A stale handle gives
//     ErrLeaseHeld, nothing stored gives ErrNoLease.
//
// The Elector's writes carry its Owner; a write that begins a new term
// carries a Generation greater than the state it replaces. After a Delete
// there is no state to compare with, so a backend whose generations serve
// as fencing tokens remembers the greatest it stored and keeps new terms
// above it (the memory and postgres backends do; backendtest checks it).
// Any other error is taken as transient and retried, unless it is marked
// with Permanent.
type Backend interface {
	Read(ctx context.Context) (*State, string, error)
	Write(ctx context.Context, prevHandle string, s *State) (string, error)
	Delete(ctx context.Context, handle string) error
}

// The interfaces below are optional. A Backend that implements them lets
// the Elector do better than compare-and-swap and polling: wait for the
// lease in the backend, renew and release by generation, and hear of
// changes as they happen. The postgres and memory backends implement all
// of them.

// Waiter is a Backend that can wait for the lease on its side.
type Waiter interface {
	// Wait returns a new term for owner (or owner's running term,
	// extended) as soon as the lease can be had, or (nil, nil) when
	// timeout passes first. The term lasts ttl by the backend's clock.
	Wait(ctx context.Context, owner string, ttl, timeout time.Duration) (*Lease, error)
}

// Renewer is a Backend that renews a term by its generation.
type Renewer interface {
	// Renew extends owner's term generation to ttl from now by the
	// backend's clock. It returns ErrNoLease if that term is over or is
	// not owner's, and never brings back a term that has expired. A
	// lease reporting StepDown names in StepDownTo the owner to hand
	// the term to, if the request named one.
	Renew(ctx context.Context, owner string, ttl time.Duration, generation int64) (*Lease, error)
}

// Releaser is a Backend that ends a term by owner and generation.
type Releaser interface {
	// Release ends owner's term generation, or with generation 0 any
	// term owner holds. It returns ErrNoLease if there was no such term.
	// The Elector calls it when each term ends, lost or not, so a
	// backend may free what it kept for the term.
	Release(ctx context.Context, owner string, generation int64) error
}

// HolderReader is a Backend that tells who holds the lease right now, by
// its own clock.
type HolderReader interface {
	// Holder returns the running term, or nil if the lease is free
	// (never taken, released, or expired).
	Holder(ctx context.Context) (*Lease, error)
}

// Watcher is a Backend that tells when the lease may have changed.
type Watcher interface {
	// Watch sends on the returned channel (without blocking, merging
	// signals the receiver has not taken yet) whenever the lease may
	// have changed hands, and also whenever it may have missed such a
	// change (after reconnecting, say). A signal is only a hint: the
	// Elector confirms it with Holder or Read. The channel is closed
	// when ctx ends.
	Watch(ctx context.Context) <-chan struct{}
}

// Candidate is how a campaign waits for the lease: its priority among the
// candidates (higher first, then the one waiting longest), the value to
// proclaim for the term it begins, how long that term keeps the lease
// from other owners at least, even if released sooner (0: no hold), and
// how many terms of the lease may run at once (0 or 1: one).
type Candidate struct {
	Priority int
	Value    string
	MinHold  time.Duration
	Slots    int
}

// CandidateWaiter is a Waiter whose waits are ranked candidates that
// bring a value to the term they begin.
type CandidateWaiter interface {
	// WaitCandidate is Wait as candidate cand. A backend (or server)
	// that cannot rank candidates or keep values ignores them and
	// waits as Wait does. One that cannot hold a term cand.MinHold, or
	// run cand.Slots terms at once, returns an error marked Permanent that
	// wraps ErrUnsupported.
	WaitCandidate(ctx context.Context, owner string, ttl, timeout time.Duration, cand Candidate) (*Lease, error)
}

// Proclaimer is a Backend that publishes a value for a running term.
type Proclaimer interface {
	// Proclaim sets the value of owner's term generation (value ""
	// clears it). It returns ErrNoLease if that term is over or is not
	// owner's, ErrUnsupported if the backend keeps no values.
	Proclaim(ctx context.Context, owner string, generation int64, value string) error
}

// HandOffer is a Backend that hands a running term over to a candidate
// waiting for the lease, in one step: nobody leads in between.
type HandOffer interface {
	// Handoff ends owner's term generation and begins the next for the
	// candidate waiting as owner to (to "": the first, by priority then
	// arrival), and returns that new term. It returns (nil, nil), the
	// term going on, when there is no such candidate or the term is not
	// owner's; ErrUnsupported if the backend cannot hand terms over.
	Handoff(ctx context.Context, owner string, generation int64, to string) (*Lease, error)
}

type permanentError struct{ err error }

func (e permanentError) Error() string { return e.err.Error() }
func (e permanentError) Unwrap() error { return e.err }

// Permanent marks err as one that retrying cannot cure: a missing
// privilege, a function that does not exist, bad arguments. The Elector
// stops campaigning and returns such an error; a renewal that fails with
// one ends the term at once. Every other backend error is taken as
// transient. Permanent(nil) is nil.
func Permanent(err error) error {
	if err == nil || IsPermanent(err) {
		return err
	}
	return permanentError{err}
}

// IsPermanent reports whether err, or an error it wraps, was marked with
// Permanent.
func IsPermanent(err error) bool {
	var p permanentError
	return errors.As(err, &p)
}
