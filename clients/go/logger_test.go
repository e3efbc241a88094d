//go:build go1.21

package hoplock_test

import (
	"io"
	"log/slog"
	"testing"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// On Go 1.21 and later, Elector.Logger takes the standard *slog.Logger.
func TestLoggerSlog(t *testing.T) {
	var logged lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	checkElectorLogs(t, logger, &logged)
}

// testLogger is a Logger writing text to w at the debug level.
func testLogger(w io.Writer) *hoplock.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}
