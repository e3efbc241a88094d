package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

// Slots: two Electors of a lease with Slots 2 lead at once, each its own
// term (a generation of its own), and stay leading across the other's
// changes (a change announced is no loss); a third waits in the server
// and leads as soon as one stops.
func TestSlotsTwoLeadAtOnce(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	mk := func(owner string) *hoplock.Elector {
		db := openNode(t, "hoplock-test-slots-"+owner).db
		e := elector(postgres.New(db, name, postgres.Options{Schema: testSchema()}), owner, 3*time.Second)
		e.Slots = 2
		e.Poll = time.Minute // waits in the server all along
		return e
	}
	a := campaign(ctx, mk("A"), nil)
	sa := a.waitStarted(t, 5*time.Second)
	b := campaign(ctx, mk("B"), nil)
	sb := b.waitStarted(t, 5*time.Second)
	if sa.lease.Generation == sb.lease.Generation {
		t.Fatalf("A and B lead with one generation, %d", sa.lease.Generation)
	}
	c := campaign(ctx, mk("C"), nil)
	eventually(t, 5*time.Second, "C waits", func() bool { return isCandidate(t, name, "C") })
	c.notStarted(t, 500*time.Millisecond)

	t0 := time.Now()
	close(a.stop)
	if err := <-a.done; err != nil {
		t.Fatalf("A's Lead: %v", err)
	}
	sc := c.waitStarted(t, 5*time.Second)
	t.Logf("C led %v after A stopped", sc.at.Sub(t0).Round(time.Millisecond))
	select {
	case l := <-b.lost:
		t.Fatalf("B lost its term when A's ended and C's began: %v", l.cause)
	case <-time.After(time.Second):
	}
	if sc.lease.Generation <= sa.lease.Generation || sc.lease.Generation <= sb.lease.Generation {
		t.Errorf("C's generation %d is not above A's %d and B's %d", sc.lease.Generation, sa.lease.Generation, sb.lease.Generation)
	}
	close(b.stop)
	close(c.stop)
	<-b.done
	<-c.done
}

// An Elector that gives a lease another number of slots than its leader's
// fails at once with a permanent error, and never leads.
func TestSlotsDisagree(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	db := openNode(t, "hoplock-test-slots-disagree").db
	ea := elector(postgres.New(db, name, postgres.Options{Schema: testSchema()}), "A", 3*time.Second)
	ea.Slots = 3
	a := campaign(ctx, ea, nil)
	a.waitStarted(t, 5*time.Second)
	eb := elector(postgres.New(db, name, postgres.Options{Schema: testSchema()}), "B", 3*time.Second)
	led := false
	err := eb.Lead(ctx, func(context.Context, hoplock.Lease) error { led = true; return nil })
	if led || err == nil || !hoplock.IsPermanent(err) {
		t.Errorf("B without Slots: Lead = %v (led %v), want a permanent error", err, led)
	}
	close(a.stop)
	<-a.done
	if err := (&hoplock.Elector{Backend: postgres.New(db, name, postgres.Options{}), Owner: "x", Slots: -1}).Lead(ctx,
		func(context.Context, hoplock.Lease) error { return nil }); err == nil || errors.Is(err, hoplock.ErrUnsupported) {
		t.Errorf("Slots -1: Lead = %v, want a configuration error", err)
	}
}
