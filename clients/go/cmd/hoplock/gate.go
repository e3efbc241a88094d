package main

// The backend of hoplock run: the postgres backend, whose waits end at a
// deadline (--skip: at once; --timeout), after which the campaign gives
// up with errGaveUp instead of waiting again.

import (
	"context"
	"errors"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

// errGaveUp ends a campaign that did not get the lease by its deadline.
var errGaveUp = errors.New("the lease is held by another owner")

// gate is a postgres.Backend whose waits end by deadline (zero: never).
// Every other method, renewals and handoffs among them, is the backend's.
type gate struct {
	*postgres.Backend
	deadline time.Time
}

// Wait is the backend's Wait, shortened to end by the deadline; once a
// wait has come back empty at the deadline, the campaign gives up (a
// permanent error, so the Elector does not wait again).
func (g *gate) Wait(ctx context.Context, owner string, ttl, timeout time.Duration) (*hoplock.Lease, error) {
	return g.bounded(timeout, func(timeout time.Duration) (*hoplock.Lease, error) {
		return g.Backend.Wait(ctx, owner, ttl, timeout)
	})
}

// WaitCandidate is the backend's WaitCandidate, bounded as Wait is.
func (g *gate) WaitCandidate(ctx context.Context, owner string, ttl, timeout time.Duration, cand hoplock.Candidate) (*hoplock.Lease, error) {
	return g.bounded(timeout, func(timeout time.Duration) (*hoplock.Lease, error) {
		return g.Backend.WaitCandidate(ctx, owner, ttl, timeout, cand)
	})
}

func (g *gate) bounded(timeout time.Duration, wait func(time.Duration) (*hoplock.Lease, error)) (*hoplock.Lease, error) {
	if g.deadline.IsZero() {
		return wait(timeout)
	}
	left := time.Until(g.deadline)
	if left < 0 {
		left = 0
	}
	if left < timeout {
		timeout = left
	}
	l, err := wait(timeout)
	switch {
	case err == nil && l == nil && time.Until(g.deadline) <= time.Millisecond:
		return nil, hoplock.Permanent(errGaveUp)
	case err != nil && time.Since(g.deadline) > connectTimeout:
		// no answer by the deadline, nor for connectTimeout more
		return nil, hoplock.Permanent(err)
	}
	return l, err
}
