package main

// The README's "Cron, systemd timers, Kubernetes CronJobs" section, as
// pasted: its install block builds the real hoplock binary (go install,
// into a GOPATH of the test's own), and its quick start runs with that
// binary against the test server, connected by the PG* variables.

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/jackc/pgconn"
)

// readmeBlock is the fenced block after the line "<!-- hoplock-run: NAME -->".
func readmeBlock(t *testing.T, readme, name string) string {
	t.Helper()
	_, after, ok := strings.Cut(readme, "<!-- hoplock-run: "+name+" -->\n")
	if !ok {
		t.Fatalf("README.md has no block %q", name)
	}
	lines := strings.Split(after, "\n")
	if !strings.HasPrefix(lines[0], "```") {
		t.Fatalf("block %q: no fence after its marker", name)
	}
	var b strings.Builder
	for _, l := range lines[1:] {
		if strings.HasPrefix(l, "```") {
			return b.String()
		}
		b.WriteString(l + "\n")
	}
	t.Fatalf("block %q is not closed", name)
	return ""
}

func TestReadmeQuickStart(t *testing.T) {
	dsn := testDSN(t)
	if testing.Short() {
		t.Skip("builds the binary")
	}
	top, err := filepath.Abs("../../../..")
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(top, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	gopath := t.TempDir()

	// The install block, but for its vendor step: scripts/test-go
	// vendored before the tests, and vendoring again would pull vendor/
	// from under the packages being tested beside this one.
	var install []string
	for _, l := range strings.Split(readmeBlock(t, readme, "install"), "\n") {
		if !strings.Contains(l, "scripts/vendor-debian") {
			install = append(install, l)
		}
	}
	quick := readmeBlock(t, readme, "quickstart")
	script := "set -e\n" + strings.Join(install, "\n") + "\nset +e\n" + quick

	cfg, err := pgconn.ParseConfig(dsn)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("sh", "-c", script)
	cmd.Dir = top
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "PG") && !strings.HasPrefix(e, "HOPLOCK_") {
			env = append(env, e)
		}
	}
	cmd.Env = append(env, "GOPATH="+gopath, "PGHOST="+cfg.Host, "PGPORT="+strconv.Itoa(int(cfg.Port)),
		"PGUSER="+cfg.User, "PGDATABASE="+cfg.Database)
	out, err := cmd.CombinedOutput()
	t.Logf("the README's blocks:\n%s", out)
	if err != nil {
		t.Fatalf("the README's blocks failed: %v", err)
	}
	if _, err := os.Stat(filepath.Join(gopath, "bin", "hoplock")); err != nil {
		t.Errorf("the install block built no binary: %v", err)
	}
	for _, want := range []string{"working in generation 1", "skipped: 75", "nightly-report"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("%q not in the output", want)
		}
	}
	if strings.Contains(string(out), "never") {
		t.Error("the skipped command ran")
	}
}
