package postgres_test

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/hoplock/hoplock/clients/go/postgres"
)

// Options.NoCancel: a wait its caller stops returns at once, without a
// cancel request -- the server still runs it -- and the term that wait
// then begins (the holder released meanwhile) is released, never left to
// its TTL. Without NoCancel the same stop cancels the wait in the server.
func TestNoCancel(t *testing.T) {
	for _, noCancel := range []bool{false, true} {
		t.Run(fmt.Sprintf("NoCancel=%v", noCancel), func(t *testing.T) {
			name := leaseName(t)
			app := fmt.Sprintf("hoplock-test-nocancel-%v", noCancel)
			if _, err := adminDB(t).Exec(fmt.Sprintf(`SELECT %s.hoplock_acquire($1, 'A', '30 s')`, testSchema()), name); err != nil {
				t.Fatal(err)
			}
			b := postgres.New(openNode(t, app).db, name, postgres.Options{Schema: testSchema(), NoCancel: noCancel})
			ctx, stop := context.WithCancel(context.Background())
			done := make(chan error, 1)
			go func() {
				l, err := b.Wait(ctx, "B", 30*time.Second, 5*time.Second)
				if l != nil {
					err = fmt.Errorf("Wait returned a term: %+v", *l)
				}
				done <- err
			}()
			eventually(t, 5*time.Second, "B waits in hoplock_wait", func() bool { return waiting(t, app) > 0 })
			stopped := time.Now()
			stop()
			select {
			case err := <-done:
				if !errors.Is(err, context.Canceled) {
					t.Fatalf("Wait = %v, want context.Canceled", err)
				}
			case <-time.After(3 * time.Second):
				t.Fatal("Wait did not return within 3s of its context's end")
			}
			t.Logf("Wait returned %v after its context ended", time.Since(stopped).Round(time.Millisecond))
			time.Sleep(300 * time.Millisecond)
			if still := waiting(t, app) > 0; still != noCancel {
				t.Fatalf("300ms after the stop, the server still waits: %v, want %v", still, noCancel)
			}
			if !noCancel {
				return
			}
			// The abandoned wait takes the lease A releases, and gives
			// it up at once.
			var ok bool
			if err := adminDB(t).QueryRow(fmt.Sprintf(`SELECT %s.hoplock_release($1, 'A')`, testSchema()), name).Scan(&ok); err != nil || !ok {
				t.Fatalf("release A: %v %v", ok, err)
			}
			var ended string
			eventually(t, 5*time.Second, "the abandoned wait's term is released", func() bool {
				err := adminDB(t).QueryRow(fmt.Sprintf(`SELECT h.how FROM %s.hoplock_history AS h
					WHERE h.name = $1 AND h.owner = 'B'`, testSchema()), name).Scan(&ended)
				return err == nil
			})
			if ended != "released" {
				t.Fatalf("B's term ended %q, want released", ended)
			}
			eventually(t, 5*time.Second, "the wait's connection is idle again", func() bool { return waiting(t, app) == 0 })
		})
	}
}
