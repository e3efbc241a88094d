//go:build !go1.21

package postgres_test

import (
	"io"

	"golang.org/x/exp/slog"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// textLogger logs text to w at the info level: golang.org/x/exp/slog's.
func textLogger(w io.Writer) *hoplock.Logger {
	logger := slog.New(slog.NewTextHandler(w))
	return &logger
}
