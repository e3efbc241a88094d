//go:build go1.21

package main

import (
	"log/slog"
	"os"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// newLogger is the Elector's logger under -v: text to standard error, at
// the info level (log/slog, Go 1.21 and later).
func newLogger() *hoplock.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, nil))
}
