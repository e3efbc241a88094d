//go:build go1.21

package postgres_test

import (
	"io"
	"log/slog"

	hoplock "github.com/hoplock/hoplock/clients/go"
)

// textLogger logs text to w at the info level: log/slog's.
func textLogger(w io.Writer) *hoplock.Logger {
	return slog.New(slog.NewTextHandler(w, nil))
}
