package memory_test

import (
	"testing"

	"hoplock"
	"hoplock/backendtest"
	"hoplock/memory"
)

func TestConformance(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) hoplock.Backend { return memory.New() })
}

// The compare-and-swap alone, as a plain Backend presents it.
func TestConformancePlain(t *testing.T) {
	backendtest.Run(t, func(t *testing.T) hoplock.Backend {
		return struct{ hoplock.Backend }{memory.New()}
	})
}
