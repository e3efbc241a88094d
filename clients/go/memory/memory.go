// Package memory is an in-memory hoplock.Backend, for tests: one lease,
// shared by every Elector given the same *Backend, in one process.
//
// Besides the Backend's compare-and-swap it implements the optional
// interfaces (Waiter, Renewer, Releaser, HolderReader, Watcher) the way
// the postgres backend does, by its own clock: a waiting Elector takes over
// the moment the lease is released, and generations never go back, even
// after a Delete. Wrap it in a struct that embeds only hoplock.Backend to
// test the Elector's plain compare-and-swap path.
package memory

import (
	"context"
	"strconv"
	"sync"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// Backend is one lease in memory. The zero value is ready to use; so is
// New's.
type Backend struct {
	// Now is the backend's clock (default time.Now): it stamps the
	// terms begun by Wait and decides expiry for Wait, Renew, Release
	// and Holder. Set it before first use.
	Now func() time.Time

	mu         sync.Mutex
	state      *hoplock.State
	handle     string
	acquiredAt time.Time
	floor      int64         // the greatest generation ever stored
	version    uint64        // counts the states stored, to make handles
	changes    uint64        // counts the changes, for Watch
	changed    chan struct{} // closed at the next change, if not nil
}

// New returns an empty lease.
func New() *Backend { return &Backend{} }

var (
	_ hoplock.Backend      = (*Backend)(nil)
	_ hoplock.Waiter       = (*Backend)(nil)
	_ hoplock.Renewer      = (*Backend)(nil)
	_ hoplock.Releaser     = (*Backend)(nil)
	_ hoplock.HolderReader = (*Backend)(nil)
	_ hoplock.Watcher      = (*Backend)(nil)
)

func (b *Backend) now() time.Time {
	if b.Now != nil {
		return b.Now()
	}
	return time.Now()
}

// changedLocked returns the channel closed at the next change. b.mu held.
func (b *Backend) changedLocked() chan struct{} {
	if b.changed == nil {
		b.changed = make(chan struct{})
	}
	return b.changed
}

// storeLocked stores s (nil: nothing) under a new handle and wakes the
// waiters and watchers. b.mu held.
func (b *Backend) storeLocked(s *hoplock.State) {
	if s == nil {
		b.state, b.handle = nil, ""
	} else {
		cp := *s
		b.state = &cp
		b.version++
		b.handle = "m" + strconv.FormatUint(b.version, 10)
		if s.Generation > b.floor {
			b.floor = s.Generation
		}
	}
	b.changes++
	if b.changed != nil {
		close(b.changed)
		b.changed = nil
	}
}

func (b *Backend) leaseLocked() *hoplock.Lease {
	return &hoplock.Lease{Handle: b.handle, State: *b.state, AcquiredAt: b.acquiredAt}
}

// Read returns the stored state, expired or not, and its handle; with
// nothing stored, (nil, "", nil).
func (b *Backend) Read(ctx context.Context) (*hoplock.State, string, error) {
	if err := ctx.Err(); err != nil {
		return nil, "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == nil {
		return nil, "", nil
	}
	cp := *b.state
	return &cp, b.handle, nil
}

// Write stores s if prevHandle is the current handle ("" if nothing is
// stored). A write that begins a new term (another owner or generation, or
// nothing stored before) gets a generation greater than any stored
// before, which it writes back into s.
func (b *Backend) Write(ctx context.Context, prevHandle string, s *hoplock.State) (string, error) {
	if err := ctx.Err(); err != nil {
		return "", err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if prevHandle != b.handle {
		return "", hoplock.ErrLeaseHeld
	}
	if b.state == nil || b.state.Owner != s.Owner || b.state.Generation != s.Generation {
		if s.Generation <= b.floor {
			s.Generation = b.floor + 1
		}
		b.acquiredAt = b.now()
	}
	b.storeLocked(s)
	return b.handle, nil
}

// Delete removes the state if handle is current.
func (b *Backend) Delete(ctx context.Context, handle string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.state == nil:
		return hoplock.ErrNoLease
	case handle != b.handle:
		return hoplock.ErrLeaseHeld
	}
	b.storeLocked(nil)
	return nil
}

// Wait returns a new term for owner as soon as the lease is free or
// expired (or owner's running term, extended), or (nil, nil) after
// timeout.
func (b *Backend) Wait(ctx context.Context, owner string, ttl, timeout time.Duration) (*hoplock.Lease, error) {
	give := time.NewTimer(timeout)
	defer give.Stop()
	for {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		b.mu.Lock()
		now := b.now()
		switch {
		case b.state == nil || expired(b.state, now):
			b.acquiredAt = now
			b.storeLocked(&hoplock.State{Owner: owner, Generation: b.floor + 1, ExpiresAt: now.Add(ttl)})
			l := b.leaseLocked()
			b.mu.Unlock()
			return l, nil
		case b.state.Owner == owner:
			s := *b.state
			s.ExpiresAt = now.Add(ttl)
			b.storeLocked(&s)
			l := b.leaseLocked()
			b.mu.Unlock()
			return l, nil
		}
		changed := b.changedLocked()
		expiry := time.NewTimer(b.state.ExpiresAt.Sub(now))
		b.mu.Unlock()
		select {
		case <-changed:
		case <-expiry.C:
		case <-give.C:
			expiry.Stop()
			return nil, nil
		case <-ctx.Done():
			expiry.Stop()
			return nil, ctx.Err()
		}
		expiry.Stop()
	}
}

// Renew extends owner's running term generation to ttl from now.
func (b *Backend) Renew(ctx context.Context, owner string, ttl time.Duration, generation int64) (*hoplock.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	now := b.now()
	if b.state == nil || expired(b.state, now) || b.state.Owner != owner || b.state.Generation != generation {
		return nil, hoplock.ErrNoLease
	}
	s := *b.state
	s.ExpiresAt = now.Add(ttl)
	b.storeLocked(&s)
	return b.leaseLocked(), nil
}

// Release ends owner's running term generation (any term of owner's if
// generation is 0).
func (b *Backend) Release(ctx context.Context, owner string, generation int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == nil || expired(b.state, b.now()) || b.state.Owner != owner ||
		(generation != 0 && b.state.Generation != generation) {
		return hoplock.ErrNoLease
	}
	b.storeLocked(nil)
	return nil
}

// Holder returns the running term, or nil if the lease is free.
func (b *Backend) Holder(ctx context.Context) (*hoplock.Lease, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.state == nil || expired(b.state, b.now()) {
		return nil, nil
	}
	return b.leaseLocked(), nil
}

// Watch signals every change of the lease until ctx ends.
func (b *Backend) Watch(ctx context.Context) <-chan struct{} {
	out := make(chan struct{}, 1)
	b.mu.Lock()
	seen := b.changes
	b.mu.Unlock()
	go func() {
		defer close(out)
		for {
			b.mu.Lock()
			changed, now := b.changedLocked(), b.changes
			b.mu.Unlock()
			if now != seen {
				seen = now
				select {
				case out <- struct{}{}:
				default:
				}
				continue
			}
			select {
			case <-changed:
			case <-ctx.Done():
				return
			}
		}
	}()
	return out
}

func expired(s *hoplock.State, now time.Time) bool { return !now.Before(s.ExpiresAt) }
