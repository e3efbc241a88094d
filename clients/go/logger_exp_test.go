//go:build !go1.21

package hoplock_test

import (
	"testing"

	"golang.org/x/exp/slog"
)

// Before Go 1.21, Elector.Logger takes golang.org/x/exp/slog's Logger
// (Debian 12's: slog.New returns a value).
func TestLoggerExpSlog(t *testing.T) {
	var logged lockedBuffer
	logger := slog.New(slog.HandlerOptions{Level: slog.DebugLevel}.NewTextHandler(&logged))
	checkElectorLogs(t, &logger, &logged)
}
