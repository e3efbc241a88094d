//go:build !go1.21

package main

import (
	"os"

	"golang.org/x/exp/slog"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// newLogger is a text logger to standard error, at the debug level if
// debug: golang.org/x/exp/slog's before Go 1.21.
func newLogger(debug bool) *hoplock.Logger {
	level := slog.InfoLevel
	if debug {
		level = slog.DebugLevel
	}
	logger := slog.New(slog.HandlerOptions{Level: level}.NewTextHandler(os.Stderr))
	return &logger
}
