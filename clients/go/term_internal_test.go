package hoplock

import (
	"context"
	"errors"
	"testing"
	"time"
)

// A process stopped past its term's deadline (SIGSTOP) resumes with the
// deadline's timer not fired yet: the term context's Err must report the
// loss all the same, at once, and cancel the context.
func TestTermContextErrChecksDeadline(t *testing.T) {
	c := &elector{owner: "A", ttl: time.Second, guard: 20 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	tm := &term{
		c:        c,
		cancel:   cancel,
		deadline: time.Now().Add(-time.Millisecond),    // passed while "stopped"
		timer:    time.AfterFunc(time.Hour, func() {}), // not fired yet
		stopped:  make(chan struct{}),
		done:     make(chan struct{}),
	}
	tc := termContext{context.WithValue(ctx, termKey{}, tm), tm}
	if err := tc.Err(); !errors.Is(err, context.Canceled) {
		t.Fatalf("Err() = %v right after the deadline passed, want context.Canceled", err)
	}
	select {
	case <-tc.Done():
	default:
		t.Fatal("Done() is still open after Err() reported the loss")
	}
	if cause := LossCause(tc); !errors.Is(cause, ErrLeaseExpired) {
		t.Errorf("LossCause = %v, want ErrLeaseExpired", cause)
	}

	// Before the deadline (less the guard), Err leaves the term alone.
	ctx2, cancel2 := context.WithCancel(context.Background())
	defer cancel2()
	live := &term{c: c, cancel: cancel2, deadline: time.Now().Add(time.Second),
		timer: time.AfterFunc(time.Hour, func() {}), stopped: make(chan struct{}), done: make(chan struct{})}
	if err := (termContext{ctx2, live}).Err(); err != nil {
		t.Errorf("Err() = %v before the deadline", err)
	}
}
