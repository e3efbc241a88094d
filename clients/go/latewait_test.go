package hoplock_test

// A campaign whose wait outlasts the TTL (Poll > TTL) and is granted the
// lease late in it: the Elector renews that term and leads it, rather
// than releasing it unused and campaigning again.

import (
	"context"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/memory"
)

func TestWaitOutlastingTTLKeepsItsTerm(t *testing.T) {
	ctx := testContext(t)
	m := memory.New()
	held, err := m.Wait(ctx, "holder", 30*time.Second, time.Second)
	if err != nil || held == nil {
		t.Fatalf("holder: %v %v", held, err)
	}
	go func() {
		time.Sleep(ttl + 200*time.Millisecond) // past the candidate's TTL, within its wait
		if err := m.Release(context.Background(), "holder", held.Generation); err != nil {
			t.Errorf("release: %v", err)
		}
	}()
	e := &hoplock.Elector{Backend: m, Owner: "late", TTL: ttl, Renew: renew, Poll: 5 * time.Second}
	var got hoplock.Lease
	err = e.Lead(ctx, func(ctx context.Context, l hoplock.Lease) error {
		got = l
		if ctx.Err() != nil {
			t.Error("fn's context already ended")
		}
		if d := time.Until(l.Deadline); d <= 0 || d > ttl {
			t.Errorf("deadline %v away, TTL %v", d, ttl)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Lead: %v", err)
	}
	if got.Generation != held.Generation+1 {
		t.Errorf("led generation %d, want %d: the term granted late was released unused",
			got.Generation, held.Generation+1)
	}
}
