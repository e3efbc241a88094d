//go:build go1.21

package hoplock_test

import (
	"log/slog"
	"testing"
)

// On Go 1.21 and later, Elector.Logger takes the standard *slog.Logger.
func TestLoggerSlog(t *testing.T) {
	var logged lockedBuffer
	logger := slog.New(slog.NewTextHandler(&logged, &slog.HandlerOptions{Level: slog.LevelDebug}))
	checkElectorLogs(t, logger, &logged)
}
