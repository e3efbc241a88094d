//go:build go1.21

package hoplock

import "log/slog"

// Logger is the logger an Elector writes to: on Go 1.21 and later, the
// standard library's log/slog.Logger, so that Elector.Logger takes a
// program's *slog.Logger (slog.Default(), say) as it is. Built with an
// older Go, it is golang.org/x/exp/slog's Logger instead (logger_exp.go).
type Logger = slog.Logger
