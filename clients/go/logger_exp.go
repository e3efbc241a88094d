//go:build !go1.21

package hoplock

import "golang.org/x/exp/slog"

// Logger is the logger an Elector writes to: built with a Go older than
// 1.21, which has no log/slog, golang.org/x/exp/slog's Logger (Debian
// 12's version, whose slog.New returns a value: take its address). On
// Go 1.21 and later it is log/slog.Logger (logger.go).
type Logger = slog.Logger
