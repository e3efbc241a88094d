package postgres_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/backendtest"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

func TestConformance(t *testing.T) {
	pgxDB := openNode(t, "hoplock-test-conformance-pgx").db
	pqDB := openPq(t, "hoplock-test-conformance-pq")
	for _, tc := range []struct {
		name string
		db   *sql.DB
		opts postgres.Options
	}{
		{"pgx", pgxDB, postgres.Options{Schema: testSchema()}},
		{"pgx-session-bound", pgxDB, postgres.Options{Schema: testSchema(), SessionBound: true}},
		{"pq", pqDB, postgres.Options{Schema: testSchema(), WatchPoll: 100 * time.Millisecond}},
	} {
		tc := tc
		t.Run(tc.name, func(t *testing.T) {
			backendtest.Run(t, func(t *testing.T) hoplock.Backend {
				return postgres.New(tc.db, leaseName(t), tc.opts)
			})
		})
	}
}

// Two Electors on one name: exactly one leads; when it returns, the other
// takes over; the server agrees with both.
func TestTwoElectorsOneLeads(t *testing.T) {
	for _, mode := range []string{"pgx", "pq", "plain"} {
		mode := mode
		t.Run(mode, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			name := leaseName(t)
			const ttl = 1500 * time.Millisecond
			backend := func(app string) hoplock.Backend {
				var b *postgres.Backend
				if mode == "pq" {
					b = postgres.New(openPq(t, app), name, postgres.Options{Schema: testSchema(), WatchPoll: 100 * time.Millisecond})
				} else {
					b = postgres.New(openNode(t, app).db, name, postgres.Options{Schema: testSchema()})
				}
				if mode == "plain" {
					// compare-and-swap and polling only
					return struct{ hoplock.Backend }{b}
				}
				return b
			}
			ea := elector(backend("hoplock-test-two-a"), "A", ttl)
			eb := elector(backend("hoplock-test-two-b"), "B", ttl)
			if mode == "plain" {
				ea.Poll, eb.Poll = 50*time.Millisecond, 50*time.Millisecond
			}
			a := campaign(ctx, ea, nil)
			b := campaign(ctx, eb, nil)

			var first, second *leader
			var s startInfo
			select {
			case s = <-a.started:
				first, second = a, b
			case s = <-b.started:
				first, second = b, a
			case <-time.After(10 * time.Second):
				t.Fatal("nobody leads")
			}
			second.notStarted(t, 2*ttl)
			if owner, gen, ok := holder(t, name); !ok || owner != first.owner || gen != s.lease.Generation {
				t.Fatalf("server: holder %q generation %d (%v), leader %s generation %d", owner, gen, ok, first.owner, s.lease.Generation)
			}
			select {
			case <-s.ctx.Done():
				t.Fatalf("the leader lost its lease: %v", hoplock.LossCause(s.ctx))
			default:
			}

			close(first.stop)
			if err := <-first.done; err != nil {
				t.Fatalf("%s: Lead = %v", first.owner, err)
			}
			s2 := second.waitStarted(t, 3*time.Second)
			if s2.lease.Generation <= s.lease.Generation {
				t.Errorf("generation %d after %d", s2.lease.Generation, s.lease.Generation)
			}
			if owner, gen, ok := holder(t, name); !ok || owner != second.owner || gen != s2.lease.Generation {
				t.Errorf("server: holder %q generation %d, want %s generation %d", owner, gen, second.owner, s2.lease.Generation)
			}
			close(second.stop)
			if err := <-second.done; err != nil {
				t.Fatalf("%s: Lead = %v", second.owner, err)
			}
			if owner, _, ok := holder(t, name); ok {
				t.Errorf("server: %s still holds the lease after both returned", owner)
			}
		})
	}
}

// The leader's connections are killed (pg_terminate_backend) and it
// cannot reconnect: it gives up no later than a TTL after its last
// successful renewal was sent, the server lets the term expire, and only
// then does the follower lead. The order is checked on the server's clock.
func TestKilledLeaderTTLTakeover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = 1500 * time.Millisecond
	na := openNode(t, "hoplock-test-kill-a")
	nb := openNode(t, "hoplock-test-kill-b")
	a := campaign(ctx, elector(postgres.New(na.db, name, postgres.Options{Schema: testSchema()}), "A", ttl), nil, adminDB(t))
	sa := a.waitStarted(t, 5*time.Second)

	var (
		bServerStart time.Time
		aLive        bool
	)
	b := campaign(ctx, elector(postgres.New(nb.db, name, postgres.Options{Schema: testSchema()}), "B", ttl),
		func(ctx context.Context, _ hoplock.Lease) {
			aLive = sa.ctx.Err() == nil
			bServerStart, _ = serverNow(ctx, nb.db)
		})
	time.Sleep(ttl) // A renews; B waits in hoplock_wait

	na.cut.Store(true)
	cutAt := time.Now()
	killed := terminate(t, na.app)
	la := a.waitLost(t, 2*ttl)
	sb := b.waitStarted(t, 3*ttl)
	end, how := termEnd(t, name, sa.lease.Generation)

	if !errors.Is(la.cause, hoplock.ErrLeaseExpired) {
		t.Errorf("A's LossCause = %v, want ErrLeaseExpired", la.cause)
	}
	if d := la.at.Sub(cutAt); d > ttl+50*time.Millisecond {
		t.Errorf("A gave up %v after the cut, more than the TTL", d)
	}
	// A's context is cancelled by its deadline: the send time of its last
	// successful renewal plus the TTL, which comes no later than the
	// expiry the server gave that renewal, at which A's term ended. B's
	// term began after that, and its fn after its term began. Checked
	// directly (B's fn found A's context ended) and on the server's
	// clock; A's own reading of when it saw its context end is reported.
	if aLive {
		t.Error("B's fn started while A's context was live")
	}
	if sb.lease.AcquiredAt.Before(end) {
		t.Errorf("server clock: B's term began at %v, before A's ended at %v", sb.lease.AcquiredAt, end)
	}
	if !sb.lease.AcquiredAt.Before(bServerStart) {
		t.Errorf("server clock: B's fn ran at %v, before its term began at %v", bServerStart, sb.lease.AcquiredAt)
	}
	takeover := sb.at.Sub(cutAt)
	if takeover > ttl+time.Second {
		t.Errorf("B led %v after the cut, TTL %v", takeover, ttl)
	}
	t.Logf("TTL-bound takeover (TTL %v, %d sessions of A terminated), server clock: A saw its context end at %v (read back at %v), its term ended at %v (%s), B's term began at %v, B's fn read the clock at %v",
		ttl, killed, la.at.Format(stamp), la.serverAt.Format(stamp), end.Format(stamp), how,
		sb.lease.AcquiredAt.Format(stamp), bServerStart.Format(stamp))
	fmt.Printf("measure: TTL-bound takeover: TTL %v; old leader's context ended %v after the kill, %v before its term expired on the server; follower led %v after the kill, %v after that expiry\n",
		ttl, la.at.Sub(cutAt).Round(time.Millisecond), end.Sub(la.at).Round(time.Millisecond),
		takeover.Round(time.Millisecond), sb.at.Sub(end).Round(100*time.Microsecond))

	na.cut.Store(false)
	<-a.done
	close(b.stop)
	<-b.done
}

// Killing a leader's connections while it can reconnect is a transient
// error: it keeps leading, in the same term.
func TestConnectionResetIsTransient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = 1500 * time.Millisecond
	na := openNode(t, "hoplock-test-reset-a")
	a := campaign(ctx, elector(postgres.New(na.db, name, postgres.Options{Schema: testSchema()}), "A", ttl), nil)
	sa := a.waitStarted(t, 5*time.Second)
	b := campaign(ctx, elector(postgres.New(openNode(t, "hoplock-test-reset-b").db, name, postgres.Options{Schema: testSchema()}), "B", ttl), nil)
	killed := 0
	for i := 0; i < 6; i++ {
		time.Sleep(ttl / 3)
		killed += terminate(t, na.app)
		na.drop()
	}
	time.Sleep(ttl)
	select {
	case l := <-a.lost:
		t.Fatalf("A lost its lease over connection resets: %v", l.cause)
	default:
	}
	b.notStarted(t, 10*time.Millisecond)
	if owner, gen, ok := holder(t, name); !ok || owner != "A" || gen != sa.lease.Generation {
		t.Errorf("server: holder %q generation %d, want A generation %d", owner, gen, sa.lease.Generation)
	}
	t.Logf("%d of A's sessions terminated over %v; A still leads in generation %d", killed, 3*ttl, sa.lease.Generation)
	close(a.stop)
	<-a.done
	b.waitStarted(t, 3*time.Second)
	close(b.stop)
	<-b.done
}

// A session-bound term ends with its connection: the follower leads at
// once, the old leader hears of it at once, and its fence is refused.
func TestSessionBoundKill(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = 10 * time.Second
	na := openNode(t, "hoplock-test-bound-a")
	ba := postgres.New(na.db, name, postgres.Options{Schema: testSchema(), SessionBound: true})
	a := campaign(ctx, elector(ba, "A", ttl), nil)
	sa := a.waitStarted(t, 5*time.Second)
	b := campaign(ctx, elector(postgres.New(openNode(t, "hoplock-test-bound-b").db, name, postgres.Options{Schema: testSchema()}), "B", ttl), nil)
	time.Sleep(300 * time.Millisecond)

	var (
		pid   sql.NullInt64
		bound bool
	)
	if err := adminDB(t).QueryRow(q(`SELECT holder_pid, session_bound FROM %s.hoplock_leases WHERE name = $1`), name).Scan(&pid, &bound); err != nil {
		t.Fatal(err)
	}
	if !bound || !pid.Valid {
		t.Fatalf("the term is not session-bound (session_bound %v, holder_pid %v)", bound, pid)
	}
	killAt := time.Now()
	adminExec(t, "SELECT pg_catalog.pg_terminate_backend($1)", pid.Int64)
	sb := b.waitStarted(t, 5*time.Second)
	la := a.waitLost(t, 5*time.Second)
	if _, how := termEnd(t, name, sa.lease.Generation); how != "session ended" {
		t.Errorf("A's term ended by %q, want \"session ended\"", how)
	}
	takeover, noticed := sb.at.Sub(killAt), la.at.Sub(killAt)
	if takeover > ttl/4 || noticed > ttl/4 {
		t.Errorf("after the kill: B led %v later, A noticed %v later; TTL %v", takeover, noticed, ttl)
	}
	if !errors.Is(la.cause, hoplock.ErrNoLease) && !errors.Is(la.cause, hoplock.ErrLeaseHeld) {
		t.Errorf("A's LossCause = %v", la.cause)
	}
	// Whatever A believes, its generation is fenced out.
	tx, err := na.db.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = ba.Fence(ctx, tx, sa.lease.Generation)
	tx.Rollback()
	if !errors.Is(err, hoplock.ErrLeaseHeld) || postgres.SQLState(err) != "55P03" {
		t.Errorf("A's fence after B took over: %v, want ErrLeaseHeld (55P03)", err)
	}
	t.Logf("session-bound term's connection killed: B led %v later, A's context cancelled %v later (TTL %v)",
		takeover.Round(100*time.Microsecond), noticed.Round(100*time.Microsecond), ttl)
	fmt.Printf("measure: session-bound kill: follower led %v after the kill, old leader cancelled %v after it (TTL %v)\n",
		takeover.Round(100*time.Microsecond), noticed.Round(100*time.Microsecond), ttl)
	<-a.done
	close(b.stop)
	<-b.done
}

// Lead returning releases, and the follower waiting in hoplock_wait takes
// over within milliseconds, round after round.
func TestShutdownHandover(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	name := leaseName(t)
	const (
		ttl    = 5 * time.Second
		rounds = 20
	)
	electors := map[string]*hoplock.Elector{
		"A": elector(postgres.New(openNode(t, "hoplock-test-handover-a").db, name, postgres.Options{Schema: testSchema()}), "A", ttl),
		"B": elector(postgres.New(openNode(t, "hoplock-test-handover-b").db, name, postgres.Options{Schema: testSchema()}), "B", ttl),
	}
	cur := campaign(ctx, electors["A"], nil)
	s := cur.waitStarted(t, 5*time.Second)
	next := campaign(ctx, electors["B"], nil)
	var client, server, returned durations
	for i := 0; i < rounds; i++ {
		time.Sleep(100 * time.Millisecond) // the follower waits in the server
		t0 := time.Now()
		close(cur.stop)
		sn := next.waitStarted(t, 2*time.Second)
		client = append(client, sn.at.Sub(t0))
		if err := <-cur.done; err != nil {
			t.Fatalf("round %d: %s: Lead = %v", i, cur.owner, err)
		}
		returned = append(returned, cur.returned.Sub(t0))
		end, how := termEnd(t, name, s.lease.Generation)
		if how != "released" {
			t.Errorf("round %d: the term ended by %q, want released", i, how)
		}
		server = append(server, sn.lease.AcquiredAt.Sub(end))
		if sn.lease.Generation <= s.lease.Generation {
			t.Errorf("round %d: generation %d after %d", i, sn.lease.Generation, s.lease.Generation)
		}
		prev := cur.owner
		cur, s = next, sn
		next = campaign(ctx, electors[prev], nil)
	}
	close(cur.stop)
	<-cur.done
	next.waitStarted(t, 2*time.Second)
	close(next.stop)
	<-next.done

	if p := client.percentile(0.99); p > 500*time.Millisecond {
		t.Errorf("handover p99 %v", p)
	}
	t.Logf("shutdown handover over %d rounds (TTL %v): fn returned -> follower's fn running: %v; release -> next term, server clock: %v; fn returned -> Lead returned: %v",
		rounds, ttl, client, server, returned)
	fmt.Printf("measure: shutdown handover (%d rounds, TTL %v): fn return -> follower fn start: %v\n", rounds, ttl, client)
	fmt.Printf("measure: shutdown handover, server clock: old term released -> new term began: %v\n", server)
}

// The lease's generation is a fencing token: hoplock_fence and
// hoplock_fenced accept the leader's writes and refuse a deposed one's.
func TestFencingToken(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = 5 * time.Second
	na := openNode(t, "hoplock-test-fence-a")
	ba := postgres.New(na.db, name, postgres.Options{Schema: testSchema()})
	table := fmt.Sprintf("hoplock_go_fenced_%d", time.Now().UnixNano())
	adminExec(t, fmt.Sprintf("CREATE TABLE %s (id bigserial PRIMARY KEY, generation bigint NOT NULL)", table))
	t.Cleanup(func() { adminDB(t).Exec("DROP TABLE " + table) })
	adminExec(t, fmt.Sprintf(q(`CREATE TRIGGER fenced BEFORE INSERT OR UPDATE OR DELETE ON %[1]s
		FOR EACH ROW EXECUTE FUNCTION %s.hoplock_fenced('%[2]s', 'generation')`), table, strings.ReplaceAll(name, "'", "''")))

	write := func(gen int64) error {
		tx, err := na.db.BeginTx(ctx, nil)
		if err != nil {
			return err
		}
		defer tx.Rollback()
		if err := ba.Fence(ctx, tx, gen); err != nil {
			return err
		}
		if _, err := tx.ExecContext(ctx, "INSERT INTO "+table+" (generation) VALUES ($1)", gen); err != nil {
			return err
		}
		return tx.Commit()
	}
	insertOnly := func(gen int64) error {
		_, err := na.db.ExecContext(ctx, "INSERT INTO "+table+" (generation) VALUES ($1)", gen)
		return err
	}

	a := campaign(ctx, elector(ba, "A", ttl), nil)
	sa := a.waitStarted(t, 5*time.Second)
	if err := write(sa.lease.Generation); err != nil {
		t.Fatalf("the leader's fenced write: %v", err)
	}
	if err := insertOnly(sa.lease.Generation); err != nil {
		t.Fatalf("the leader's write checked by hoplock_fenced: %v", err)
	}

	// An operator forces A out; B takes over.
	b := campaign(ctx, elector(postgres.New(openNode(t, "hoplock-test-fence-b").db, name, postgres.Options{Schema: testSchema()}), "B", ttl), nil)
	adminExec(t, q("SELECT %s.hoplock_force_release($1)"), name)
	sb := b.waitStarted(t, 5*time.Second)
	a.waitLost(t, 5*time.Second)

	err := write(sa.lease.Generation)
	if !errors.Is(err, hoplock.ErrLeaseHeld) || postgres.SQLState(err) != "55P03" {
		t.Errorf("the deposed leader's fenced write: %v, want ErrLeaseHeld (55P03)", err)
	}
	if err := insertOnly(sa.lease.Generation); postgres.SQLState(err) != "55P03" {
		t.Errorf("the deposed leader's write checked by hoplock_fenced: %v, want 55P03", err)
	}
	if err := write(sb.lease.Generation); err != nil {
		t.Errorf("the new leader's fenced write: %v", err)
	}
	var n int
	if err := adminDB(t).QueryRow("SELECT count(*) FROM " + table).Scan(&n); err != nil || n != 3 {
		t.Errorf("%d rows (%v), want the 3 written by leaders", n, err)
	}
	<-a.done
	close(b.stop)
	<-b.done
}

// An announced end of the term reaches the leader at once, long before
// its next renewal.
func TestLossHeardFromNotify(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = 9 * time.Second // renewals every 3s
	a := campaign(ctx, elector(postgres.New(openNode(t, "hoplock-test-notify-a").db, name, postgres.Options{Schema: testSchema()}), "A", ttl), nil)
	a.waitStarted(t, 5*time.Second)
	time.Sleep(200 * time.Millisecond) // listening
	forcedAt := time.Now()
	adminExec(t, q("SELECT %s.hoplock_force_release($1)"), name)
	la := a.waitLost(t, ttl/3)
	if d := la.at.Sub(forcedAt); d > 500*time.Millisecond {
		t.Errorf("heard of the forced release %v later", d)
	}
	if !errors.Is(la.cause, hoplock.ErrNoLease) {
		t.Errorf("LossCause = %v, want ErrNoLease", la.cause)
	}
	t.Logf("forced release heard %v later (next renewal was due in up to %v)", la.at.Sub(forcedAt).Round(100*time.Microsecond), ttl/3)
	<-a.done
}

// A forged notification does not unseat the leader: it confirms with
// hoplock_holder.
func TestForgedNotifyIsConfirmed(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = 3 * time.Second
	a := campaign(ctx, elector(postgres.New(openNode(t, "hoplock-test-forged-a").db, name, postgres.Options{Schema: testSchema()}), "A", ttl), nil)
	sa := a.waitStarted(t, 5*time.Second)
	time.Sleep(200 * time.Millisecond)
	for _, event := range []string{"released", "expired", "acquired"} {
		adminExec(t, `SELECT pg_catalog.pg_notify('hoplock', json_build_object('seq', 999999, 'event', $1::text,
			'name', $2::text, 'owner', 'intruder', 'generation', $3::bigint, 'expires_at', now())::text)`,
			event, name, sa.lease.Generation)
	}
	select {
	case l := <-a.lost:
		t.Fatalf("a forged notification unseated the leader: %v", l.cause)
	case <-time.After(ttl / 2):
	}
	if owner, gen, ok := holder(t, name); !ok || owner != "A" || gen != sa.lease.Generation {
		t.Errorf("server: holder %q generation %d", owner, gen)
	}
	close(a.stop)
	<-a.done
}

// A campaign cancelled while it waits in the server leaves no wait behind
// there, and no term.
func TestCancelledCampaignLeavesNothing(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = 3 * time.Second
	a := campaign(ctx, elector(postgres.New(openNode(t, "hoplock-test-cancel-a").db, name, postgres.Options{Schema: testSchema()}), "A", ttl), nil)
	a.waitStarted(t, 5*time.Second)
	bctx, bcancel := context.WithCancel(ctx)
	b := campaign(bctx, elector(postgres.New(openNode(t, "hoplock-test-cancel-b").db, name, postgres.Options{Schema: testSchema()}), "B", ttl), nil)
	time.Sleep(300 * time.Millisecond)
	if n := waiting(t, "hoplock-test-cancel-b"); n != 1 {
		t.Errorf("%d of B's sessions wait in hoplock_wait, want 1", n)
	}
	bcancel()
	select {
	case err := <-b.done:
		if !errors.Is(err, context.Canceled) {
			t.Errorf("B's Lead = %v, want context.Canceled", err)
		}
	case <-time.After(2 * time.Second):
		t.Fatal("B's Lead did not return after its context ended")
	}
	eventually(t, time.Second, "B's wait ends in the server", func() bool { return waiting(t, "hoplock-test-cancel-b") == 0 })
	close(a.stop)
	<-a.done
	time.Sleep(200 * time.Millisecond)
	if owner, _, ok := holder(t, name); ok {
		t.Errorf("%s holds the lease after both stopped", owner)
	}
}

// A follower whose process vanishes while it waits (its sockets closed,
// no cancel request sent) leaves no wait in the server that could take
// the lease for nobody.
func TestAbandonedWaitEndsInServer(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = 3 * time.Second
	a := campaign(ctx, elector(postgres.New(openNode(t, "hoplock-test-abandon-a").db, name, postgres.Options{Schema: testSchema()}), "A", ttl), nil)
	a.waitStarted(t, 5*time.Second)
	nb := openNode(t, "hoplock-test-abandon-b")
	bctx, bcancel := context.WithCancel(ctx)
	defer bcancel()
	b := campaign(bctx, elector(postgres.New(nb.db, name, postgres.Options{Schema: testSchema()}), "B", ttl), nil)
	time.Sleep(300 * time.Millisecond)
	if n := waiting(t, nb.app); n != 1 {
		t.Fatalf("%d of B's sessions wait, want 1", n)
	}
	nb.cut.Store(true)
	nb.drop()
	eventually(t, 3*time.Second, "the server ends B's abandoned wait", func() bool { return sessions(t, nb.app) == 0 })
	close(a.stop)
	<-a.done
	time.Sleep(200 * time.Millisecond)
	if owner, _, ok := holder(t, name); ok {
		t.Errorf("%s holds the lease: an abandoned wait took it", owner)
	}
	bcancel()
	<-b.done
}

// Run reports each term acquired, renewed and lost, and after its context
// ends releases, reports the last loss and closes the channel.
func TestRunEvents(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = 600 * time.Millisecond
	rctx, stop := context.WithCancel(ctx)
	events := elector(postgres.New(openNode(t, "hoplock-test-run").db, name, postgres.Options{Schema: testSchema()}), "A", ttl).Run(rctx)
	next := func(want hoplock.EventKind) hoplock.Event {
		t.Helper()
		for {
			select {
			case ev, ok := <-events:
				if !ok {
					t.Fatalf("closed while waiting for %v", want)
				}
				if ev.Kind == hoplock.EventRenewed && want != hoplock.EventRenewed {
					continue
				}
				if ev.Kind != want {
					t.Fatalf("%v (%v), want %v", ev.Kind, ev.Err, want)
				}
				return ev
			case <-time.After(5 * time.Second):
				t.Fatalf("no %v", want)
			}
		}
	}
	acq := next(hoplock.EventAcquired)
	ren := next(hoplock.EventRenewed)
	if ren.Lease.Generation != acq.Lease.Generation || !ren.Lease.ExpiresAt.After(acq.Lease.ExpiresAt) {
		t.Errorf("renewed %+v after %+v", ren.Lease, acq.Lease)
	}
	adminExec(t, q("SELECT %s.hoplock_force_release($1)"), name)
	lost := next(hoplock.EventLost)
	if !errors.Is(lost.Err, hoplock.ErrNoLease) || lost.Lease.Generation != acq.Lease.Generation {
		t.Errorf("lost %+v: %v", lost.Lease, lost.Err)
	}
	again := next(hoplock.EventAcquired)
	if again.Lease.Generation <= acq.Lease.Generation {
		t.Errorf("generation %d after %d", again.Lease.Generation, acq.Lease.Generation)
	}
	stop()
	last := next(hoplock.EventLost)
	if !errors.Is(last.Err, context.Canceled) {
		t.Errorf("last event: %v", last.Err)
	}
	if _, ok := <-events; ok {
		t.Error("an event after the last")
	}
	if owner, _, ok := holder(t, name); ok {
		t.Errorf("%s holds the lease after Run's channel closed", owner)
	}
}

// stamp shows times to the microsecond (the server's and this host's clock
// are the same clock).
const stamp = "15:04:05.000000"

func waiting(t *testing.T, app string) int {
	t.Helper()
	var n int
	err := adminDB(t).QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity
		WHERE application_name = $1 AND state = 'active' AND query LIKE '%hoplock_wait%'`, app).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n
}

func sessions(t *testing.T, app string) int {
	t.Helper()
	var n int
	if err := adminDB(t).QueryRow(`SELECT count(*) FROM pg_catalog.pg_stat_activity WHERE application_name = $1`, app).Scan(&n); err != nil {
		t.Fatal(err)
	}
	return n
}

func eventually(t *testing.T, within time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %v: %s", within, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// A lease table locked by maintenance makes renewals fail with 55P03 for
// a while: the leader retries, and keeps its term.
func TestBusyTableIsTransient(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = 1500 * time.Millisecond
	e := elector(postgres.New(openNode(t, "hoplock-test-busy-a").db, name, postgres.Options{Schema: testSchema()}), "A", ttl)
	var logged syncBuffer
	e.Logger = textLogger(&logged)
	a := campaign(ctx, e, nil)
	sa := a.waitStarted(t, 5*time.Second)
	time.Sleep(ttl / 3)

	// Hold the table for 0.8s, across at least one renewal: less than
	// TTL - Renew (1s), so a retry gets through in time.
	tx, err := adminDB(t).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "LOCK TABLE hoplock_internal.lease IN ACCESS EXCLUSIVE MODE"); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	time.Sleep(800 * time.Millisecond)
	tx.Rollback()
	time.Sleep(ttl)
	select {
	case l := <-a.lost:
		t.Fatalf("A lost its lease while the table was busy: %v", l.cause)
	default:
	}
	if owner, gen, ok := holder(t, name); !ok || owner != "A" || gen != sa.lease.Generation {
		t.Errorf("server: holder %q generation %d, want A generation %d", owner, gen, sa.lease.Generation)
	}
	if n := strings.Count(logged.String(), "SQLSTATE 55P03"); n == 0 {
		t.Errorf("no renewal met the busy table; the log:\n%s", logged.String())
	} else {
		t.Logf("%d renewals retried after 55P03", n)
	}
	close(a.stop)
	<-a.done
}

// A misconfiguration is no transient error: Lead returns it.
func TestWrongSchemaIsPermanent(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	b := postgres.New(openNode(t, "hoplock-test-schema").db, leaseName(t), postgres.Options{Schema: "no_such_schema"})
	err := elector(b, "A", time.Second).Lead(ctx, func(context.Context, hoplock.Lease) error {
		t.Error("led without the extension")
		return nil
	})
	if !hoplock.IsPermanent(err) || postgres.SQLState(err) != "3F000" {
		t.Errorf("Lead = %v (SQLSTATE %q), want a permanent error with SQLSTATE 3F000", err, postgres.SQLState(err))
	}
}

func TestTransient(t *testing.T) {
	for code, want := range map[string]bool{
		"08006": true, "40001": true, "40P01": true, "55P03": true, "57P01": true, "57014": true,
		"53300": true, "25006": true, "58030": true,
		"53400": false, "42501": false, "42883": false, "3F000": false, "22023": false, "55000": false, "XX001": false, "": false,
	} {
		if got := postgres.Transient(code); got != want {
			t.Errorf("Transient(%q) = %v, want %v", code, got, want)
		}
	}
}
