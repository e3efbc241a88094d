package postgres_test

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"syscall"
	"testing"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

// get asks a health endpoint once, over HTTP.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(body)
}

// The health check against PostgreSQL: a leader and a follower waiting
// in hoplock_wait are healthy; a leader whose renewals are held back by a
// locked lease table, and whose fn goes on past its term, is unhealthy
// once the TTL has passed since its last renewal; a candidate whose
// hoplock_wait is stuck in a stopped server process is wedged.
func TestHealthPostgres(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	name := leaseName(t)
	const ttl = time.Second
	opts := postgres.Options{Schema: testSchema()}
	ea := elector(postgres.New(openNode(t, "hoplock-test-health-a").db, name, opts), "A", ttl)
	eb := elector(postgres.New(openNode(t, "hoplock-test-health-b").db, name, opts), "B", ttl)
	sa, sb := httptest.NewServer(ea.HealthHandler()), httptest.NewServer(eb.HealthHandler())
	defer sa.Close()
	defer sb.Close()

	started := make(chan struct{})
	release := make(chan struct{})
	aDone := make(chan error, 1)
	go func() {
		aDone <- ea.Lead(ctx, func(ctx context.Context, l hoplock.Lease) error {
			close(started)
			<-release // outlives its context, as a wedged leader would
			return nil
		})
	}()
	select {
	case <-started:
	case err := <-aDone:
		t.Fatalf("A: Lead returned %v before leading", err)
	case <-time.After(10 * time.Second):
		t.Fatal("A not leading after 10s")
	}
	b := campaign(ctx, eb, nil)
	eventually(t, 5*time.Second, "B waits in hoplock_wait", func() bool { return waiting(t, "hoplock-test-health-b") > 0 })
	for end := time.Now().Add(3 * ttl / 2); time.Now().Before(end); time.Sleep(50 * time.Millisecond) {
		if code, body := get(t, sa.URL); code != http.StatusOK {
			t.Fatalf("A leading: %d %q", code, body)
		}
		if code, body := get(t, sb.URL); code != http.StatusOK {
			t.Fatalf("B waiting: %d %q", code, body)
		}
	}

	// Renewals meet a locked table (55P03, retried) until the TTL runs
	// out; A's fn goes on.
	tx, err := adminDB(t).BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "LOCK TABLE hoplock_internal.lease IN ACCESS EXCLUSIVE MODE"); err != nil {
		tx.Rollback()
		t.Fatal(err)
	}
	locked := time.Now()
	time.Sleep(ttl + 200*time.Millisecond)
	code, body := get(t, sa.URL)
	tx.Rollback()
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "has not renewed within the TTL") {
		t.Errorf("A stalled %v: %d %q, want 503 saying it has not renewed", time.Since(locked).Round(time.Millisecond), code, body)
	} else {
		t.Logf("A stalled: %d %s", code, strings.TrimSpace(body))
	}
	close(release)
	if err := <-aDone; err != nil {
		t.Fatalf("A: Lead returned %v", err)
	}
	if err := ea.Health(); err != nil {
		t.Errorf("A after Lead: %v", err)
	}
	b.waitStarted(t, 5*time.Second)
	if err := eb.Health(); err != nil {
		t.Errorf("B leading: %v", err)
	}

	// A campaigns again while B leads; its wait's server process is
	// stopped: no call returns, and after Poll + TTL + ReleaseTimeout A
	// is wedged.
	actx, stopA := context.WithCancel(ctx)
	defer stopA()
	a2 := campaign(actx, ea, nil)
	eventually(t, 5*time.Second, "A waits in hoplock_wait", func() bool { return waiting(t, "hoplock-test-health-a") > 0 })
	var pid int
	if err := adminDB(t).QueryRowContext(ctx, `SELECT pid FROM pg_catalog.pg_stat_activity
		WHERE application_name = 'hoplock-test-health-a' AND state = 'active' AND query LIKE '%hoplock_wait%'`).Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		if errors.Is(err, syscall.EPERM) {
			stopA()
			<-a2.done
			close(b.stop)
			<-b.done
			t.Skipf("cannot stop the server process %d (%v): the wedged campaign is not checked", pid, err)
		}
		t.Fatal(err)
	}
	stopped := true
	defer func() {
		if stopped {
			syscall.Kill(pid, syscall.SIGCONT)
		}
	}()
	wedge := ttl/3 + ttl + ttl // Poll (Renew) + TTL + ReleaseTimeout (at most the TTL)
	time.Sleep(wedge + 300*time.Millisecond)
	code, body = get(t, sa.URL)
	syscall.Kill(pid, syscall.SIGCONT)
	stopped = false
	if code != http.StatusServiceUnavailable || !strings.Contains(body, "campaign wedged") {
		t.Errorf("A's wait stopped: %d %q, want 503 saying the campaign is wedged", code, body)
	} else {
		t.Logf("A's wait stopped: %d %s", code, strings.TrimSpace(body))
	}
	eventually(t, 5*time.Second, "A healthy again once its wait returns", func() bool { return ea.Health() == nil })
	if err := eb.Health(); err != nil {
		t.Errorf("B leading: %v", err)
	}
	stopA()
	<-a2.done
	close(b.stop)
	if err := <-b.done; err != nil {
		t.Errorf("B: Lead returned %v", err)
	}
}
