package hoplock_test

import (
	"bytes"
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/memory"
)

// lockedBuffer is a bytes.Buffer safe for concurrent use, for logs.
type lockedBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// failOnce is a plain Backend whose first Read fails with a transient
// error.
type failOnce struct {
	hoplock.Backend
	mu     sync.Mutex
	failed bool
}

func (b *failOnce) Read(ctx context.Context) (*hoplock.State, string, error) {
	b.mu.Lock()
	failed := b.failed
	b.failed = true
	b.mu.Unlock()
	if !failed {
		return nil, "", errors.New("connection refused, as a test")
	}
	return b.Backend.Read(ctx)
}

// checkElectorLogs leads one term with logger, which writes text to
// logged at the debug level, and checks what the Elector logged: the
// retried error (Warn) and the release (Debug), each with the owner.
func checkElectorLogs(t *testing.T, logger *hoplock.Logger, logged *lockedBuffer) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	e := &hoplock.Elector{
		Backend: &failOnce{Backend: memory.New()},
		Owner:   "logger-test",
		TTL:     time.Second,
		Logger:  logger,
	}
	var gen int64
	err := e.Lead(ctx, func(ctx context.Context, l hoplock.Lease) error {
		gen = l.Generation
		return nil
	})
	if err != nil {
		t.Fatalf("Lead: %v", err)
	}
	out := logged.String()
	for _, want := range []string{
		"hoplock: campaign failed, retrying",
		"connection refused, as a test",
		"hoplock: released",
		"owner=logger-test",
		"generation=" + strconv.FormatInt(gen, 10),
	} {
		if !strings.Contains(out, want) {
			t.Errorf("the log lacks %q:\n%s", want, out)
		}
	}
}
