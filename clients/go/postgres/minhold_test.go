package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

// A leader with MinHold that releases early (its fn returns at once)
// keeps the lease from another Elector, waiting in the server, until
// MinHold after its term began; then the other leads. Without MinHold the
// other leads at once (the control).
func TestMinHoldKeepsLeaseAfterEarlyRelease(t *testing.T) {
	for _, tc := range []struct {
		hold time.Duration
	}{{2 * time.Second}, {0}} {
		tc := tc
		t.Run("MinHold="+tc.hold.String(), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := leaseName(t)
			mk := func(owner string) *hoplock.Elector {
				db := openNode(t, "hoplock-test-minhold-"+owner).db
				return elector(postgres.New(db, name, postgres.Options{Schema: testSchema()}), owner, 5*time.Second)
			}
			ea, eb := mk("A"), mk("B")
			ea.MinHold = tc.hold
			eb.Poll = time.Minute // waits in the server all along
			a := campaign(ctx, ea, nil)
			sa := a.waitStarted(t, 5*time.Second)
			b := campaign(ctx, eb, nil)
			eventually(t, 5*time.Second, "B waits", func() bool { return isCandidate(t, name, "B") })

			close(a.stop) // A's work is done: Lead releases the term
			if err := <-a.done; err != nil {
				t.Fatalf("A's Lead: %v", err)
			}
			endedAt, how := termEnd(t, name, sa.lease.Generation)
			if how != "released" {
				t.Fatalf("A's term ended by %q, want released", how)
			}
			sb := b.waitStarted(t, tc.hold+5*time.Second)
			early := endedAt.Sub(sa.lease.AcquiredAt)
			after := sb.lease.AcquiredAt.Sub(sa.lease.AcquiredAt)
			t.Logf("MinHold %v: A released %v after its term began; B's term began %v after it",
				tc.hold, early.Round(time.Millisecond), after.Round(time.Millisecond))
			if tc.hold > 0 {
				if early >= tc.hold {
					t.Fatalf("A released %v after its term began: not early", early)
				}
				if after < tc.hold || after > tc.hold+time.Second {
					t.Errorf("B's term began %v after A's, want MinHold (%v), within 1s", after, tc.hold)
				}
			} else if after >= time.Second {
				t.Errorf("without MinHold B's term began %v after A's, want at once", after)
			}
			close(b.stop)
			<-b.done
		})
	}
}

// MinHold against a hoplock without min_hold (1.1's functions) is an
// error at once, wrapping ErrUnsupported: the Elector never leads without
// the hold it was told to keep.
func TestMinHoldOldServer(t *testing.T) {
	const old = "hoplock_test_v11_minhold"
	adminExec(t, "DROP SCHEMA IF EXISTS "+old+" CASCADE")
	adminExec(t, "CREATE SCHEMA "+old)
	for _, f := range []string{
		"hoplock_wait(name text, owner text, ttl interval, timeout interval, session_bound boolean) RETURNS %s.hoplock_lease LANGUAGE sql AS 'SELECT %s.hoplock_wait(name, owner, ttl, timeout, session_bound)'",
		"hoplock_renew(name text, owner text, ttl interval, generation bigint) RETURNS %s.hoplock_lease LANGUAGE sql AS 'SELECT %s.hoplock_renew(name, owner, ttl, generation)'",
		"hoplock_release(name text, owner text, generation bigint) RETURNS boolean LANGUAGE sql AS 'SELECT %s.hoplock_release(name, owner, generation)'",
		"hoplock_release(name text, owner text) RETURNS boolean LANGUAGE sql AS 'SELECT %s.hoplock_release(name, owner)'",
		"hoplock_holder(name text) RETURNS %s.hoplock_lease LANGUAGE sql AS 'SELECT %s.hoplock_holder(name)'",
	} {
		adminExec(t, q("CREATE FUNCTION "+old+"."+f))
	}
	t.Cleanup(func() { adminExec(t, "DROP SCHEMA "+old+" CASCADE") })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	db := openNode(t, "hoplock-test-minhold-old").db
	e := elector(postgres.New(db, name, postgres.Options{Schema: old}), "A", 3*time.Second)
	e.MinHold = time.Second
	t0 := time.Now()
	led := false
	err := e.Lead(ctx, func(context.Context, hoplock.Lease) error { led = true; return nil })
	t.Logf("Lead returned after %v: %v", time.Since(t0).Round(time.Millisecond), err)
	if led {
		t.Error("the Elector led without its hold")
	}
	if !errors.Is(err, hoplock.ErrUnsupported) || !hoplock.IsPermanent(err) {
		t.Errorf("Lead = %v, want a permanent error wrapping ErrUnsupported", err)
	}
	if d := time.Since(t0); d > 2*time.Second {
		t.Errorf("Lead returned after %v, want at once", d)
	}
	if _, _, ok := holder(t, name); ok {
		t.Error("the lease is held")
	}
}
