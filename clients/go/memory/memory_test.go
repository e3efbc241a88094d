package memory_test

import (
	"testing"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/backendtest"
	"github.com/hoplock/hoplock/clients/go/memory"
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
