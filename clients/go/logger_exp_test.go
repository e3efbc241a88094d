//go:build !go1.21

package hoplock_test

import (
	"io"
	"testing"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"golang.org/x/exp/slog"
)

// Before Go 1.21, Elector.Logger takes golang.org/x/exp/slog's Logger
// (Debian 12's: slog.New returns a value).
func TestLoggerExpSlog(t *testing.T) {
	var logged lockedBuffer
	logger := slog.New(slog.HandlerOptions{Level: slog.DebugLevel}.NewTextHandler(&logged))
	checkElectorLogs(t, &logger, &logged)
}

// testLogger is a Logger writing text to w at the debug level.
func testLogger(w io.Writer) *hoplock.Logger {
	logger := slog.New(slog.HandlerOptions{Level: slog.DebugLevel}.NewTextHandler(w))
	return &logger
}
