package hoplock_test

// The end of a term is no failure: a confirmation of an announced change
// still in flight when the term ends (its context cancelled) logs nothing.

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/memory"
)

// slowHolder is a memory backend whose Holder, once entered is closed,
// blocks until its context ends, as a query on a connection would.
type slowHolder struct {
	*memory.Backend
	once    sync.Once
	entered chan struct{}
}

func (b *slowHolder) Holder(ctx context.Context) (*hoplock.Lease, error) {
	b.once.Do(func() { close(b.entered) })
	<-ctx.Done()
	return nil, ctx.Err()
}

func TestTermEndLogsNoConfirmWarning(t *testing.T) {
	var logged lockedBuffer
	m := memory.New()
	b := &slowHolder{Backend: m, entered: make(chan struct{})}
	e := &hoplock.Elector{Backend: b, Owner: "quiet", TTL: ttl, Renew: renew, Poll: 20 * time.Millisecond,
		Logger: testLogger(&logged)}
	err := e.Lead(testContext(t), func(ctx context.Context, l hoplock.Lease) error {
		// A change announced during the term: the Elector confirms it
		// with Holder, which is still running when fn returns.
		if _, err := m.Renew(ctx, "quiet", ttl, l.Generation); err != nil {
			t.Errorf("renew: %v", err)
		}
		select {
		case <-b.entered:
		case <-ctx.Done():
			t.Error("the term ended before the change was confirmed")
		}
		return nil
	})
	if err != nil {
		t.Fatalf("Lead: %v", err)
	}
	out := logged.String()
	if !strings.Contains(out, "hoplock: released") {
		t.Errorf("the log lacks the release:\n%s", out)
	}
	if strings.Contains(out, "level=WARN") {
		t.Errorf("a warning at the end of the term:\n%s", out)
	}
}
