package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/stdlib"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

// poolerDSN is the connection string of a transaction pooler (PgBouncer
// in transaction mode) in front of the test server: scripts/test-go
// starts one and sets HOPLOCK_TEST_POOLER_DSN.
func poolerDSN(t *testing.T) string {
	t.Helper()
	testDSN(t)
	dsn := os.Getenv("HOPLOCK_TEST_POOLER_DSN")
	if dsn == "" {
		t.Skip("HOPLOCK_TEST_POOLER_DSN is not set (scripts/test-go sets it when pgbouncer is installed)")
	}
	return dsn
}

// openPooled opens a pool that connects through the pooler, with lib/pq
// or with pgx. Transaction pooling needs every statement sent in one go
// (a Sync ends the transaction, and with it the hold on the server's
// connection): lib/pq with binary_parameters, which sends parse, bind and
// execute together (else it prepares first, and the statement is gone
// when it binds); pgx describing statements once instead of preparing
// them.
func openPooled(t *testing.T, app string, pq bool) *sql.DB {
	t.Helper()
	dsn := poolerDSN(t) + " application_name=" + app
	if pq {
		db, err := sql.Open("postgres", dsn+" binary_parameters=yes")
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { db.Close() })
		return db
	}
	cfg, err := pgx.ParseConfig(dsn + " statement_cache_mode=describe")
	if err != nil {
		t.Fatal(err)
	}
	db := stdlib.OpenDB(*cfg)
	t.Cleanup(func() { db.Close() })
	return db
}

// Behind PgBouncer in transaction pooling mode, LISTEN hears nothing; with
// FollowWatch (and with lib/pq, which follows with hoplock_watch anyway)
// the leader hears a forced release within milliseconds, not at its next
// renewal, and the follower, waiting through the pooler too, takes over.
// When both stop, nothing of theirs waits in the server.
func TestBehindTransactionPooler(t *testing.T) {
	poolerDSN(t)
	for _, tc := range []struct {
		mode   string
		pq     bool
		follow postgres.Follow
	}{
		{"pgx-watch", false, postgres.FollowWatch},
		{"pq", true, postgres.FollowListen},
		{"pgx-listen", false, postgres.FollowListen}, // the control: deaf here
	} {
		tc := tc
		t.Run(tc.mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := leaseName(t)
			appA, appB := "hoplock-test-pooler-a-"+tc.mode, "hoplock-test-pooler-b-"+tc.mode
			opts := postgres.Options{Schema: testSchema(), Follow: tc.follow, WatchPoll: time.Hour}
			const ttl = 9 * time.Second // renewals every 3s
			a := campaign(ctx, elector(postgres.New(openPooled(t, appA, tc.pq), name, opts), "A", ttl), nil)
			sa := a.waitStarted(t, 5*time.Second)
			b := campaign(ctx, elector(postgres.New(openPooled(t, appB, tc.pq), name, opts), "B", ttl), nil)
			b.notStarted(t, 300*time.Millisecond)
			if tc.follow == postgres.FollowWatch || tc.pq {
				eventually(t, 5*time.Second, "A waits in hoplock_watch", func() bool { return inCall(t, appA, "hoplock_watch") == 1 })
			}
			forced := time.Now()
			adminExec(t, q("SELECT %s.hoplock_force_release($1)"), name)
			var la lostInfo
			if tc.mode == "pgx-listen" {
				select {
				case la = <-a.lost:
					if la.at.Sub(forced) < 500*time.Millisecond {
						t.Fatalf("LISTEN heard the release through the pooler (%v): is it in transaction mode?", la.at.Sub(forced))
					}
				case <-time.After(time.Second):
					la = a.waitLost(t, ttl/3)
				}
			} else {
				la = a.waitLost(t, ttl/3)
				if d := la.at.Sub(forced); d > 500*time.Millisecond {
					t.Errorf("A heard of the forced release %v later", d)
				}
			}
			// (B may have led by the time A looked)
			if !errors.Is(la.cause, hoplock.ErrNoLease) && !errors.Is(la.cause, hoplock.ErrLeaseHeld) {
				t.Errorf("LossCause = %v, want ErrNoLease or ErrLeaseHeld", la.cause)
			}
			sb := b.waitStarted(t, 2*time.Second)
			if sb.lease.Generation <= sa.lease.Generation {
				t.Errorf("generation %d after %d", sb.lease.Generation, sa.lease.Generation)
			}
			fmt.Printf("measure: behind PgBouncer (transaction pooling), %s: forced release -> leader's context cancelled %v; follower led %v after the release\n",
				tc.mode, la.at.Sub(forced).Round(100*time.Microsecond), sb.at.Sub(forced).Round(100*time.Microsecond))
			<-a.done
			close(b.stop)
			<-b.done
			// (5 s: a cancel through the pooler under load took over 2 s once
			// in five clean-clone runs; an uncancelled watch would stay for
			// DefaultWatchWait, 10 s)
			eventually(t, 5*time.Second, "nothing of A's or B's left waiting in the server", func() bool {
				return inCall(t, appA, "hoplock_w") == 0 && inCall(t, appB, "hoplock_w") == 0
			})
		})
	}
}
