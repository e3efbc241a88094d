package postgres

import (
	"context"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// Options.NoCancel: a wait or a watch that the caller stops is left to end
// by itself in the server, within its own timeout, instead of being
// cancelled with a cancel request. PgBouncer 1.18 and 1.19 can crash on a
// cancel request whose client goes away before PgBouncer has passed it on
// (README, "Through PgBouncer"); a process that stops its Elector and
// exits at once is such a client.

// uncancelledSlack bounds, beyond the server-side timeout of the call, how
// long a call left to finish by itself may take (a pool to wait for, a
// slow server); past it the driver gives up the connection.
const uncancelledSlack = time.Minute

// waitUncancelled is wait for Options.NoCancel: the wait runs on a context
// of its own, bounded by its timeout. When ctx ends first it returns
// ctx.Err() at once, and leaves the wait to finish by itself: a term the
// wait then begins for owner is released (it was never reported to anyone).
func (b *Backend) waitUncancelled(ctx context.Context, owner string, timeout time.Duration,
	query string, args ...any) (*hoplock.Lease, error) {
	// ended already: no wait to leave behind (waitOn would not connect)
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	type result struct {
		l   *hoplock.Lease
		err error
	}
	done := make(chan result, 1)
	wctx, cancel := context.WithTimeout(detached{ctx}, timeout+uncancelledSlack)
	go func() {
		l, err := b.waitOn(wctx, query, args...)
		done <- result{l, err}
	}()
	select {
	case r := <-done:
		cancel()
		return r.l, r.err
	case <-ctx.Done():
	}
	b.abandon(owner)
	go func() {
		defer b.abandonEnded(owner)
		defer cancel()
		r := <-done
		if r.l == nil {
			return
		}
		rctx, rcancel := context.WithTimeout(detached{ctx}, uncancelledSlack)
		defer rcancel()
		_ = b.Release(rctx, owner, r.l.Generation)
	}()
	return nil, ctx.Err()
}

// abandonedWaits counts an owner's waits left to end by themselves.
type abandonedWaits struct {
	n    int
	over chan struct{} // closed when n falls to 0
}

// A wait left to end by itself and a later call of the same owner must not
// overlap: whichever of the two begins a term, the other, the same owner,
// extends it and is given it too, and the abandoned wait's release would
// end the term the later call returned (an Elector stopped and led again).
// So a call that may begin or extend a term of owner (Wait, WaitCandidate,
// Write) first waits, within its ctx, for the abandoned waits of owner on
// this Backend to end, releases included: at most their timeout.

// abandon counts a wait of owner left to end by itself.
func (b *Backend) abandon(owner string) {
	b.abandonedMu.Lock()
	defer b.abandonedMu.Unlock()
	if b.abandoned == nil {
		b.abandoned = map[string]*abandonedWaits{}
	}
	w := b.abandoned[owner]
	if w == nil {
		w = &abandonedWaits{over: make(chan struct{})}
		b.abandoned[owner] = w
	}
	w.n++
}

// abandonEnded: a wait of owner left to end by itself is over, and so is
// the release of the term it began, if any.
func (b *Backend) abandonEnded(owner string) {
	b.abandonedMu.Lock()
	defer b.abandonedMu.Unlock()
	w := b.abandoned[owner]
	w.n--
	if w.n == 0 {
		close(w.over)
		delete(b.abandoned, owner)
	}
}

// awaitAbandoned waits until no wait of owner left to end by itself is
// running on this Backend, or ctx ends.
func (b *Backend) awaitAbandoned(ctx context.Context, owner string) error {
	for {
		b.abandonedMu.Lock()
		w := b.abandoned[owner]
		b.abandonedMu.Unlock()
		if w == nil {
			return nil
		}
		select {
		case <-w.over:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// watchUncancelled is watchOnce for Options.NoCancel: the hoplock_watch
// call runs on a context of its own, bounded by WatchWait. When ctx ends
// first it returns ctx.Err() at once and leaves the call to finish by
// itself, its events to no one.
func (b *Backend) watchUncancelled(ctx context.Context, after *int64, out chan<- struct{}) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	a := *after
	sig := make(chan struct{}, 1)
	done := make(chan error, 1)
	wctx, cancel := context.WithTimeout(detached{ctx}, b.opts.WatchWait+uncancelledSlack)
	go func() {
		defer cancel()
		done <- b.watchOnce(wctx, &a, sig)
	}()
	for {
		select {
		case err := <-done:
			*after = a
			select {
			case <-sig:
				signal(out)
			default:
			}
			return err
		case <-sig:
			signal(out)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// detached carries a context's values without its end.
type detached struct{ parent context.Context }

func (detached) Deadline() (time.Time, bool)         { return time.Time{}, false }
func (detached) Done() <-chan struct{}               { return nil }
func (detached) Err() error                          { return nil }
func (d detached) Value(key interface{}) interface{} { return d.parent.Value(key) }
