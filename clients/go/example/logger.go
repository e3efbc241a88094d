//go:build go1.21

package main

import (
	"log/slog"
	"os"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// newLogger is a text logger to standard error, at the debug level if
// debug: log/slog's on Go 1.21 and later.
func newLogger(debug bool) *hoplock.Logger {
	level := slog.LevelInfo
	if debug {
		level = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level}))
}
