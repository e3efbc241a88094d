//go:build !go1.21

package main

import (
	"os"

	"golang.org/x/exp/slog"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// newLogger is the Elector's logger under -v: text to standard error, at
// the info level (golang.org/x/exp/slog, before Go 1.21).
func newLogger() *hoplock.Logger {
	logger := slog.New(slog.HandlerOptions{}.NewTextHandler(os.Stderr))
	return &logger
}
