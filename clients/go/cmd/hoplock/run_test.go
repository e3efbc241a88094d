package main

// hoplock run with real processes: its exit status, skipping, two at once,
// a lost term stopping the command, the generation fencing a write, a
// handoff to a waiting hoplock run.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// The command's status is hoplock's, 128+N for a signal; the command gets
// the lease's name, the term's generation and the owner.
func TestRunExitStatusAndEnvironment(t *testing.T) {
	name := leaseName(t)
	s, out := runCLI(t, "run", "--owner", "cli-a", name, "--",
		"sh", "-c", `echo "$HOPLOCK_NAME|$HOPLOCK_GENERATION|$HOPLOCK_OWNER"; exit 7`)
	if s != 7 {
		t.Fatalf("status %d, want 7 (the command's)", s)
	}
	f := strings.Split(strings.TrimSpace(out), "|")
	if len(f) != 3 || f[0] != name || f[2] != "cli-a" {
		t.Fatalf("the command saw %q, want %q|GENERATION|cli-a", out, name)
	}
	gen, err := strconv.ParseInt(f[1], 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if owner, how := term(t, name, gen); owner != "cli-a" || how != "released" {
		t.Errorf("term %d: owner %q, ended %q; want cli-a, released", gen, owner, how)
	}
	if o, _ := holder(t, name); o != "" {
		t.Errorf("%q still held by %q after hoplock run exited", name, o)
	}

	// flags after NAME; a command killed by a signal
	if s, _ := runCLI(t, "run", name, "--ttl", "3s", "--", "sh", "-c", "kill -USR1 $$"); s != 128+int(syscall.SIGUSR1) {
		t.Errorf("command killed by SIGUSR1: status %d, want %d", s, 128+int(syscall.SIGUSR1))
	}
	if s, _ := runCLI(t, "run", name, "--", "/nonexistent/command"); s != exitNotFound {
		t.Errorf("command not found: status %d, want %d", s, exitNotFound)
	}
	if s, _ := runCLI(t, "run", "--skip", "--wait", name, "--", "true"); s != exitFailed {
		t.Errorf("--skip --wait: status %d, want %d", s, exitFailed)
	}
	if s, _ := runCLI(t, "run", "--dsn", "host=/nonexistent", name, "--", "true"); s != exitFailed {
		t.Errorf("no server: status %d, want %d", s, exitFailed)
	}
}

// --skip gives up at once with the skip status, --timeout after its time;
// a min_hold keeps the lease from the next owner; a stop while waiting
// exits 128+signal; the command never runs without the lease.
func TestRunSkip(t *testing.T) {
	name := leaseName(t)
	marker := filepath.Join(t.TempDir(), "ran")
	touch := []string{"--", "sh", "-c", "echo ran >>" + marker}
	db := adminDB(t)
	if _, err := db.Exec(q("SELECT %s.hoplock_acquire($1, 'someone-else', '30 s')"), name); err != nil {
		t.Fatal(err)
	}
	start := time.Now()
	if s, _ := runCLI(t, append([]string{"run", "--skip", name}, touch...)...); s != exitSkipped {
		t.Errorf("--skip of a held lease: status %d, want %d", s, exitSkipped)
	}
	t.Logf("--skip took %v", time.Since(start))
	if s, _ := runCLI(t, append([]string{"run", "--skip", "--skip-status", "0", name}, touch...)...); s != 0 {
		t.Errorf("--skip --skip-status 0: status %d, want 0", s)
	}
	start = time.Now()
	if s, _ := runCLI(t, append([]string{"run", "--wait", "--timeout", "400ms", name}, touch...)...); s != exitSkipped {
		t.Errorf("--timeout: status %d, want %d", s, exitSkipped)
	}
	if d := time.Since(start); d < 400*time.Millisecond || d > 5*time.Second {
		t.Errorf("--timeout 400ms gave up after %v", d)
	}
	w := startCLI(t, append([]string{"run", "--owner", "cli-waiter", name}, touch...)...)
	waitFor(t, "candidate cli-waiter", 10*time.Second, func() bool { return candidate(t, name, "cli-waiter") })
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	if s := w.wait(10 * time.Second); s != 128+int(syscall.SIGTERM) {
		t.Errorf("SIGTERM while waiting: status %d, want %d", s, 128+int(syscall.SIGTERM))
	}
	if _, err := os.Stat(marker); err == nil {
		t.Fatal("the command ran without the lease")
	}

	if _, err := db.Exec(q("SELECT %s.hoplock_release($1, 'someone-else')"), name); err != nil {
		t.Fatal(err)
	}
	if s, _ := runCLI(t, append([]string{"run", "--skip", "--min-hold", "3s", "--ttl", "5s", name}, touch...)...); s != 0 {
		t.Fatalf("--skip of a free lease: status %d, want 0", s)
	}
	if s, _ := runCLI(t, append([]string{"run", "--skip", name}, touch...)...); s != exitSkipped {
		t.Errorf("--skip within the last term's min_hold: status %d, want %d", s, exitSkipped)
	}
	if b, _ := os.ReadFile(marker); string(b) != "ran\n" {
		t.Errorf("the command ran %d times, want once", strings.Count(string(b), "ran"))
	}
}

// Two hoplock run --skip at once: the command runs once. Two hoplock run
// --wait at once: both run, one after the other.
func TestRunTwoAtOnce(t *testing.T) {
	for round := 0; round < 3; round++ {
		name := leaseName(t)
		var cs [2]*cli
		for i := range cs {
			cs[i] = startCLI(t, "run", "--skip", name, "--", "sh", "-c", "echo ran; sleep 0.5")
		}
		ran := 0
		for i, c := range cs {
			switch s := c.wait(20 * time.Second); s {
			case 0:
				ran++
			case exitSkipped:
				if c.out.String() != "" {
					t.Errorf("round %d: hoplock %d skipped but its command printed %q", round, i, c.out.String())
				}
			default:
				t.Errorf("round %d: hoplock %d exited %d; stderr: %s", round, i, s, c.errs.String())
			}
		}
		if ran != 1 {
			t.Errorf("round %d: the command ran %d times, want once", round, ran)
		}
	}

	name := leaseName(t)
	var cs [2]*cli
	for i := range cs {
		cs[i] = startCLI(t, "run", "--wait", name, "--", "sh", "-c", "date +%s%N; sleep 0.3; date +%s%N")
	}
	var spans [2][2]int64
	for i, c := range cs {
		if s := c.wait(20 * time.Second); s != 0 {
			t.Fatalf("hoplock %d exited %d; stderr: %s", i, s, c.errs.String())
		}
		f := strings.Fields(c.out.String())
		if len(f) != 2 {
			t.Fatalf("hoplock %d: the command printed %q", i, c.out.String())
		}
		spans[i][0], _ = strconv.ParseInt(f[0], 10, 64)
		spans[i][1], _ = strconv.ParseInt(f[1], 10, 64)
	}
	if spans[0][0] < spans[1][1] && spans[1][0] < spans[0][1] {
		t.Errorf("the two commands overlapped: %v", spans)
	}
}

// A term lost -- force-released, or its session terminated -- stops the
// command at once: SIGTERM, then SIGKILL after --grace; hoplock exits
// with the command's status. hoplock killed takes the command with it.
func TestRunLostTermStopsCommand(t *testing.T) {
	db := adminDB(t)
	t.Run("force-released", func(t *testing.T) {
		name := leaseName(t)
		c := startCLI(t, "run", "--ttl", "10s", name, "--", "sh", "-c", "echo started; exec sleep 30")
		waitFor(t, "command", 10*time.Second, func() bool { return c.out.String() != "" })
		_, gen := holder(t, name)
		start := time.Now()
		if _, err := db.Exec(q("SELECT %s.hoplock_force_release($1)"), name); err != nil {
			t.Fatal(err)
		}
		if s := c.wait(10 * time.Second); s != 128+int(syscall.SIGTERM) {
			t.Errorf("status %d, want %d (SIGTERM)", s, 128+int(syscall.SIGTERM))
		}
		t.Logf("stopped %v after the force-release", c.ended.Sub(start))
		if d := c.ended.Sub(start); d > 3*time.Second {
			t.Errorf("the command was stopped %v after its term ended (ttl 10s, renewals every 3.3s)", d)
		}
		if !strings.Contains(c.errs.String(), fmt.Sprint(gen)) {
			t.Errorf("stderr does not report the lost term %d: %s", gen, c.errs.String())
		}
	})
	t.Run("session-terminated-command-ignores-sigterm", func(t *testing.T) {
		name := leaseName(t)
		c := startCLI(t, "run", "--session-bound", "--grace", "600ms", name, "--",
			"sh", "-c", `trap "echo got-term" TERM; echo started; while :; do sleep 0.05; done`)
		waitFor(t, "command", 10*time.Second, func() bool { return strings.Contains(c.out.String(), "started") })
		_, gen := holder(t, name)
		start := time.Now()
		var n int
		err := db.QueryRow(q("SELECT count(pg_catalog.pg_terminate_backend(holder_pid)) FROM %s.hoplock_leases WHERE name = $1 AND holder_pid IS NOT NULL"), name).Scan(&n)
		if err != nil || n != 1 {
			t.Fatalf("terminating the holder's session: %v (%d sessions)", err, n)
		}
		if s := c.wait(10 * time.Second); s != 128+int(syscall.SIGKILL) {
			t.Errorf("status %d, want %d (SIGKILL after the grace)", s, 128+int(syscall.SIGKILL))
		}
		d := c.ended.Sub(start)
		t.Logf("killed %v after the session was terminated", d)
		if d < 600*time.Millisecond || d > 4*time.Second {
			t.Errorf("killed %v after the session was terminated; want the grace (600ms) plus a little", d)
		}
		if !strings.Contains(c.out.String(), "got-term") {
			t.Errorf("the command was not sent SIGTERM first: %q", c.out.String())
		}
		if _, how := term(t, name, gen); how == "" {
			t.Errorf("term %d still running after its session was terminated", gen)
		}
	})
	t.Run("hoplock-stopped-past-its-ttl", func(t *testing.T) {
		// the term lapses while hoplock cannot renew it; another run
		// takes the lease; hoplock, continued, stops its command at once
		name := leaseName(t)
		c := startCLI(t, "run", "--ttl", "500ms", name, "--", "sh", "-c", "echo started; exec sleep 30")
		waitFor(t, "command", 10*time.Second, func() bool { return c.out.String() != "" })
		_ = c.cmd.Process.Signal(syscall.SIGSTOP)
		next := startCLI(t, "run", "--wait", "--owner", "cli-next", name, "--", "sleep", "3")
		waitFor(t, "the next term", 10*time.Second, func() bool { o, _ := holder(t, name); return o == "cli-next" })
		start := time.Now()
		_ = c.cmd.Process.Signal(syscall.SIGCONT)
		if s := c.wait(10 * time.Second); s != 128+int(syscall.SIGTERM) {
			t.Errorf("status %d, want %d (SIGTERM)", s, 128+int(syscall.SIGTERM))
		}
		t.Logf("stopped %v after hoplock was continued", c.ended.Sub(start))
		if d := c.ended.Sub(start); d > 2*time.Second {
			t.Errorf("the command was stopped %v after hoplock was continued, its term long lapsed", d)
		}
		_ = next.cmd.Process.Signal(syscall.SIGTERM)
		next.wait(10 * time.Second)
	})
	t.Run("hoplock-killed", func(t *testing.T) {
		name := leaseName(t)
		c := startCLI(t, "run", name, "--", "sh", "-c", "echo $$; exec sleep 30")
		waitFor(t, "command", 10*time.Second, func() bool { return strings.HasSuffix(c.out.String(), "\n") })
		pid, err := strconv.Atoi(strings.TrimSpace(c.out.String()))
		if err != nil {
			t.Fatal(err)
		}
		_ = c.cmd.Process.Kill()
		c.wait(5 * time.Second)
		waitFor(t, "end of the command after hoplock was killed", 3*time.Second, func() bool { return gone(pid) })
	})
}

// HOPLOCK_GENERATION is the term's generation: a write fenced with it
// commits while the term runs, and is refused once the term is over.
func TestRunGenerationFences(t *testing.T) {
	db := adminDB(t)
	if _, err := db.Exec("CREATE TABLE IF NOT EXISTS " + fencedTable + " (name text, generation bigint)"); err != nil {
		t.Fatal(err)
	}
	name := leaseName(t)
	s, out := runCLI(t, "run", "--owner", "cli-fenced", name, "--", "env", "HOPLOCK_CLI_TEST=fence", os.Args[0])
	if s != 0 {
		t.Fatalf("fenced write: status %d, output %q", s, out)
	}
	gen, err := strconv.ParseInt(strings.TrimPrefix(strings.TrimSpace(out), "wrote "), 10, 64)
	if err != nil {
		t.Fatalf("output %q: %v", out, err)
	}
	if owner, _ := term(t, name, gen); owner != "cli-fenced" {
		t.Errorf("generation %d is %q's term, not cli-fenced's", gen, owner)
	}
	var n int
	if err := db.QueryRow("SELECT count(*) FROM "+fencedTable+" WHERE name = $1 AND generation = $2", name, gen).Scan(&n); err != nil || n != 1 {
		t.Fatalf("rows written with generation %d: %d (%v), want 1", gen, n, err)
	}
	// the same write, with the term over
	stale := runHelper(t, []string{"HOPLOCK_CLI_TEST=fence", "HOPLOCK_NAME=" + name, "HOPLOCK_GENERATION=" + fmt.Sprint(gen)})
	if !strings.Contains(stale, "refused 55P03") {
		t.Errorf("a write fenced with the ended term %d: %q, want refused 55P03", gen, stale)
	}
}

// runHelper runs the test binary with env added, and returns its output.
func runHelper(t *testing.T, env []string) string {
	t.Helper()
	cmd := exec.Command(os.Args[0])
	cmd.Env = append(append(os.Environ(), "HOPLOCK_TEST_DSN="+testDSN(t), "HOPLOCK_TEST_SCHEMA="+testSchema()), env...)
	out, _ := cmd.CombinedOutput()
	return string(out)
}

// A hoplock run stopped with SIGTERM passes it on, and once its command
// has exited hands the term to the hoplock run --wait waiting for it.
func TestRunHandoff(t *testing.T) {
	name := leaseName(t)
	a := startCLI(t, "run", "--owner", "cli-a", name, "--", "sh", "-c", "echo started; exec sleep 30")
	waitFor(t, "command of cli-a", 10*time.Second, func() bool { return a.out.String() != "" })
	_, genA := holder(t, name)
	b := startCLI(t, "run", "--wait", "--owner", "cli-b", name, "--", "sh", "-c", `echo "$HOPLOCK_GENERATION"`)
	waitFor(t, "candidate cli-b", 10*time.Second, func() bool { return candidate(t, name, "cli-b") })
	start := time.Now()
	_ = a.cmd.Process.Signal(syscall.SIGTERM)
	if s := a.wait(10 * time.Second); s != 128+int(syscall.SIGTERM) {
		t.Errorf("cli-a: status %d, want %d", s, 128+int(syscall.SIGTERM))
	}
	if s := b.wait(10 * time.Second); s != 0 {
		t.Fatalf("cli-b: status %d; stderr %s", s, b.errs.String())
	}
	t.Logf("cli-b's command done %v after cli-a was stopped", b.ended.Sub(start))
	genB, err := strconv.ParseInt(strings.TrimSpace(b.out.String()), 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	if genB <= genA {
		t.Errorf("cli-b led generation %d, not after cli-a's %d", genB, genA)
	}
	if _, how := term(t, name, genA); how != "handed off" {
		t.Errorf("cli-a's term ended %q, want handed off", how)
	}
	if owner, _ := term(t, name, genB); owner != "cli-b" {
		t.Errorf("generation %d is %q's, want cli-b's", genB, owner)
	}
}

// hoplock run renews the lease while the command runs, for longer than
// the ttl: the term is not lost, and no other run gets in meanwhile.
func TestRunRenews(t *testing.T) {
	name := leaseName(t)
	c := startCLI(t, "run", "--ttl", "400ms", name, "--", "sh", "-c", "echo started; sleep 1.5")
	waitFor(t, "command", 10*time.Second, func() bool { return c.out.String() != "" })
	_, gen := holder(t, name)
	time.Sleep(time.Second)
	if s, _ := runCLI(t, "run", "--skip", name, "--", "true"); s != exitSkipped {
		t.Errorf("--skip a second into a 400ms ttl: status %d, want %d (the lease renewed)", s, exitSkipped)
	}
	if s := c.wait(10 * time.Second); s != 0 {
		t.Errorf("status %d, want 0; stderr: %s", s, c.errs.String())
	}
	if _, how := term(t, name, gen); how != "released" {
		t.Errorf("term %d ended %q, want released (renewed until the command exited)", gen, how)
	}
}
