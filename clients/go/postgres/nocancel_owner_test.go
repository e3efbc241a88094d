package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

// Options.NoCancel and the same owner again: a wait left to end by itself
// and a new wait of the same owner on the same Backend (an Elector
// stopped and led again). Were both to wait for the name, whichever took
// the term when the holder releases it, the other would extend it, and
// the abandoned wait's release would end the term the new wait returned
// (in either order: the new wait ranked higher takes it first). The term
// the new wait returns must still be held once the abandoned wait is
// over.
func TestNoCancelSameOwner(t *testing.T) {
	for _, order := range []string{"abandoned-first", "new-first"} {
		t.Run(order, func(t *testing.T) {
			name := leaseName(t)
			app := "hoplock-test-nocancel-owner-" + order
			if _, err := adminDB(t).Exec(q(`SELECT %s.hoplock_acquire($1, 'A', '30 s')`), name); err != nil {
				t.Fatal(err)
			}
			b := postgres.New(openNode(t, app).db, name, postgres.Options{Schema: testSchema(), NoCancel: true})

			// The first wait, stopped: left waiting in the server.
			ctx, stop := context.WithCancel(context.Background())
			first := make(chan error, 1)
			go func() {
				_, err := b.Wait(ctx, "B", 30*time.Second, 5*time.Second)
				first <- err
			}()
			eventually(t, 5*time.Second, "the first wait waits", func() bool { return waiting(t, app) == 1 })
			stop()
			if err := <-first; !errors.Is(err, context.Canceled) {
				t.Fatalf("first Wait = %v, want context.Canceled", err)
			}

			// The same owner again, on the same Backend.
			type result struct {
				l   *hoplock.Lease
				err error
			}
			second := make(chan result, 1)
			go func() {
				// new-first: the new wait ranks higher, takes the term,
				// and the abandoned wait extends it afterwards.
				prio := 0
				if order == "new-first" {
					prio = 10
				}
				l, err := b.WaitCandidate(context.Background(), "B", 30*time.Second, 5*time.Second,
					hoplock.Candidate{Priority: prio})
				second <- result{l, err}
			}()
			// Both wait, or the new one waits for the abandoned one.
			eventually(t, 5*time.Second, "a wait waits", func() bool { return waiting(t, app) >= 1 })
			time.Sleep(200 * time.Millisecond)
			var ok bool
			if err := adminDB(t).QueryRow(q(`SELECT %s.hoplock_release($1, 'A')`), name).Scan(&ok); err != nil || !ok {
				t.Fatalf("release A: %v %v", ok, err)
			}
			r := <-second
			if r.err != nil || r.l == nil {
				t.Fatalf("new Wait = %v, %v; want a term", r.l, r.err)
			}
			eventually(t, 5*time.Second, "no wait left", func() bool { return waiting(t, app) == 0 })
			time.Sleep(300 * time.Millisecond)
			if owner, gen, held := holder(t, name); !held || owner != "B" || gen != r.l.Generation {
				t.Fatalf("holder = %q g%d (held %v), want B g%d: the term the new wait returned was ended",
					owner, gen, held, r.l.Generation)
			}
			if err := b.Release(context.Background(), "B", r.l.Generation); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A Wait whose context has already ended, with NoCancel, starts no wait
// in the server: nothing is left waiting for a term it would only
// release, nor delays the owner's next call.
func TestNoCancelEndedContext(t *testing.T) {
	name := leaseName(t)
	app := "hoplock-test-nocancel-ended"
	if _, err := adminDB(t).Exec(q(`SELECT %s.hoplock_acquire($1, 'A', '30 s')`), name); err != nil {
		t.Fatal(err)
	}
	b := postgres.New(openNode(t, app).db, name, postgres.Options{Schema: testSchema(), NoCancel: true})
	ctx, stop := context.WithCancel(context.Background())
	stop()
	if _, err := b.Wait(ctx, "B", 30*time.Second, 5*time.Second); !errors.Is(err, context.Canceled) {
		t.Fatalf("Wait = %v, want context.Canceled", err)
	}
	time.Sleep(300 * time.Millisecond)
	if n := waiting(t, app); n != 0 {
		t.Fatalf("%d waits in the server for a Wait whose context had ended", n)
	}
}
