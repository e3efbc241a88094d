package main

// hoplock status: the holder, the candidates and the last terms of a
// lease, as the server has them.

import (
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStatus(t *testing.T) {
	name := leaseName(t)
	if s, _ := runCLI(t, "run", "--owner", "st-past", name, "--", "true"); s != 0 {
		t.Fatalf("hoplock run: status %d", s)
	}
	if _, err := adminDB(t).Exec(q("SELECT %s.hoplock_acquire($1, 'st-holder', '30 s')"), name); err != nil {
		t.Fatal(err)
	}
	w := startCLI(t, "run", "--owner", "st-candidate", "--priority", "3", name, "--", "true")
	waitFor(t, "candidate st-candidate", 10*time.Second, func() bool { return candidate(t, name, "st-candidate") })

	s, out := runCLI(t, "status", name)
	if s != 0 {
		t.Fatalf("status: exit status %d", s)
	}
	t.Logf("hoplock status:\n%s", out)
	for _, want := range [][]string{
		{name, "st-holder", "held,"},
		{name, "st-candidate", " 3 "},
		{name, "st-holder", "(running)"},
		{name, "st-past", "released"},
	} {
		found := false
		for _, line := range strings.Split(out, "\n") {
			ok := true
			for _, w := range want {
				ok = ok && strings.Contains(line, w)
			}
			found = found || ok
		}
		if !found {
			t.Errorf("no line with all of %q", want)
		}
	}
	_ = w.cmd.Process.Signal(syscall.SIGTERM)
	w.wait(10 * time.Second)

	// every lease: this one among them
	s, out = runCLI(t, "status", "--terms", "1000")
	if s != 0 || !strings.Contains(out, name) {
		t.Errorf("status of every lease: exit status %d, %q not in it", s, name)
	}
	if s, _ := runCLI(t, "status", "--schema", "no_such_schema", name); s != exitFailed {
		t.Errorf("status with a wrong schema: exit status %d, want %d", s, exitFailed)
	}
}
