package hoplock_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/memory"
)

func ExampleElector_Lead() {
	backend := memory.New() // postgres.New(db, "billing-scheduler", postgres.Options{}) in production
	e := &hoplock.Elector{Backend: backend, Owner: "host-a:4242", TTL: time.Second}

	err := e.Lead(context.Background(), func(ctx context.Context, lease hoplock.Lease) error {
		fmt.Println("leading as", lease.Owner, "in generation", lease.Generation)
		// Work here until ctx ends, fencing writes with lease.Generation.
		return nil
	})
	fmt.Println("Lead:", err)

	s, _, _ := backend.Read(context.Background())
	fmt.Println("released:", s == nil)
	// Output:
	// leading as host-a:4242 in generation 1
	// Lead: <nil>
	// released: true
}

func ExampleElector_Run() {
	backend := memory.New()
	e := &hoplock.Elector{Backend: backend, Owner: "host-a:4242", TTL: 300 * time.Millisecond}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	for ev := range e.Run(ctx) {
		switch ev.Kind {
		case hoplock.EventAcquired:
			fmt.Println("acquired generation", ev.Lease.Generation)
		case hoplock.EventRenewed:
			fmt.Println("renewed")
			cancel() // shut down: Run releases, reports the loss, closes the channel
		case hoplock.EventLost:
			fmt.Println("lost:", ev.Err)
		}
	}
	// Output:
	// acquired generation 1
	// renewed
	// lost: context canceled
}

func ExampleElector_HealthHandler() {
	e := &hoplock.Elector{Backend: memory.New(), Owner: "host-a:4242", TTL: time.Second}

	mux := http.NewServeMux()
	mux.Handle("/healthz", e.HealthHandler()) // the liveness probe: 200, or 503 and why
	srv := httptest.NewServer(mux)            // http.ListenAndServe(":8080", mux) in production
	defer srv.Close()

	err := e.Lead(context.Background(), func(ctx context.Context, lease hoplock.Lease) error {
		resp, err := http.Get(srv.URL + "/healthz")
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		fmt.Printf("leading: %d %s", resp.StatusCode, body)
		fmt.Println("Health:", e.Health()) // the same check, without HTTP
		return nil
	})
	fmt.Println("Lead:", err)
	// Output:
	// leading: 200 ok
	// Health: <nil>
	// Lead: <nil>
}
