package main

// The tests of hoplock run and hoplock status, with real processes: the
// test binary runs itself as the hoplock command (HOPLOCK_CLI_TEST=cli),
// and as a command that writes a row fenced with HOPLOCK_GENERATION
// (HOPLOCK_CLI_TEST=fence), against the server HOPLOCK_TEST_DSN names,
// with hoplock in schema HOPLOCK_TEST_SCHEMA (scripts/test-go sets both).

import (
	"bytes"
	"database/sql"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	_ "github.com/jackc/pgx/v4/stdlib"

	"github.com/hoplock/hoplock/clients/go/postgres"
)

func TestMain(m *testing.M) {
	switch os.Getenv("HOPLOCK_CLI_TEST") {
	case "cli":
		os.Exit(mainStatus(os.Args[1:]))
	case "fence":
		os.Exit(fencedWrite())
	}
	os.Exit(m.Run())
}

func testDSN(t *testing.T) string {
	t.Helper()
	dsn := os.Getenv("HOPLOCK_TEST_DSN")
	if dsn == "" {
		t.Skip("HOPLOCK_TEST_DSN is not set (scripts/test-go sets it)")
	}
	return dsn
}

func testSchema() string {
	if s := os.Getenv("HOPLOCK_TEST_SCHEMA"); s != "" {
		return s
	}
	return "hoplock"
}

var admin struct {
	once sync.Once
	db   *sql.DB
}

// adminDB is a superuser's pool, to look at and meddle with the server.
func adminDB(t *testing.T) *sql.DB {
	t.Helper()
	dsn := testDSN(t)
	admin.once.Do(func() {
		db, err := sql.Open("pgx", dsn+" application_name=hoplock-cli-test")
		if err != nil {
			panic(err)
		}
		admin.db = db
	})
	return admin.db
}

// q is the text of a statement with the hoplock schema put in for %s.
func q(format string) string {
	return strings.ReplaceAll(format, "%s", quoteIdent(testSchema()))
}

// leaseName is a lease of the test's own.
func leaseName(t *testing.T) string {
	return fmt.Sprintf("cli/%s/%d", t.Name(), time.Now().UnixNano())
}

// syncBuffer is a bytes.Buffer safe to write and read at once.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// cli is one hoplock process.
type cli struct {
	t      *testing.T
	cmd    *exec.Cmd
	out    syncBuffer // standard output
	errs   syncBuffer // standard error
	done   chan struct{}
	status int
	ended  time.Time
}

// startCLI starts hoplock with args, connected to the test server.
func startCLI(t *testing.T, args ...string) *cli {
	t.Helper()
	c := &cli{t: t, done: make(chan struct{})}
	c.cmd = exec.Command(os.Args[0], args...)
	c.cmd.Env = append(os.Environ(), "HOPLOCK_CLI_TEST=cli",
		"HOPLOCK_DSN="+testDSN(t), "HOPLOCK_SCHEMA="+testSchema())
	c.cmd.Stdout, c.cmd.Stderr = &c.out, &c.errs
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		_ = c.cmd.Wait()
		c.ended = time.Now()
		c.status = c.cmd.ProcessState.ExitCode()
		close(c.done)
	}()
	t.Cleanup(func() {
		select {
		case <-c.done:
		default:
			_ = c.cmd.Process.Kill()
			<-c.done
		}
	})
	return c
}

// wait returns hoplock's exit status, failing the test if it has not
// exited within limit.
func (c *cli) wait(limit time.Duration) int {
	c.t.Helper()
	select {
	case <-c.done:
	case <-time.After(limit):
		c.t.Fatalf("hoplock %v still runs after %v; stdout:\n%s\nstderr:\n%s", c.cmd.Args[1:], limit, c.out.String(), c.errs.String())
	}
	return c.status
}

// runCLI runs hoplock with args to its end, and returns its exit status
// and standard output.
func runCLI(t *testing.T, args ...string) (int, string) {
	t.Helper()
	c := startCLI(t, args...)
	s := c.wait(30 * time.Second)
	if e := c.errs.String(); e != "" {
		t.Logf("hoplock %v: stderr:\n%s", args, e)
	}
	return s, c.out.String()
}

// waitFor polls cond every 10ms until it holds, failing after limit.
func waitFor(t *testing.T, what string, limit time.Duration, cond func() bool) {
	t.Helper()
	end := time.Now().Add(limit)
	for !cond() {
		if time.Now().After(end) {
			t.Fatalf("no %s after %v", what, limit)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// holder is the owner and generation holding lease name, or "" and 0.
func holder(t *testing.T, name string) (string, int64) {
	t.Helper()
	var (
		owner sql.NullString
		gen   sql.NullInt64
	)
	err := adminDB(t).QueryRow(q("SELECT h.owner, h.generation FROM %s.hoplock_holder($1) AS h"), name).Scan(&owner, &gen)
	if err != nil {
		t.Fatal(err)
	}
	return owner.String, gen.Int64
}

// candidate reports whether owner waits for lease name.
func candidate(t *testing.T, name, owner string) bool {
	t.Helper()
	var n int
	err := adminDB(t).QueryRow(q("SELECT count(*) FROM %s.hoplock_candidates WHERE name = $1 AND owner = $2"), name, owner).Scan(&n)
	if err != nil {
		t.Fatal(err)
	}
	return n > 0
}

// term is how the term generation of lease name ended, and its owner, by
// hoplock_history ("" while it runs).
func term(t *testing.T, name string, generation int64) (owner, how string) {
	t.Helper()
	var h sql.NullString
	err := adminDB(t).QueryRow(q("SELECT owner, how FROM %s.hoplock_history WHERE name = $1 AND generation = $2"),
		name, generation).Scan(&owner, &h)
	if err != nil {
		t.Fatalf("term %d of %q in hoplock_history: %v", generation, name, err)
	}
	return owner, h.String
}

// fencedTable is where fencedWrite writes.
const fencedTable = "public.hoplock_cli_fenced"

// fencedWrite is the command of the fencing test: in one transaction,
// hoplock_fence(HOPLOCK_NAME, HOPLOCK_GENERATION) and a row in
// fencedTable. It prints "wrote GENERATION" and exits 0, or prints the
// SQLSTATE of the failure and exits 3.
func fencedWrite() int {
	db, err := sql.Open("pgx", os.Getenv("HOPLOCK_TEST_DSN"))
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer db.Close()
	name, gen := os.Getenv("HOPLOCK_NAME"), os.Getenv("HOPLOCK_GENERATION")
	tx, err := db.Begin()
	if err != nil {
		fmt.Println(err)
		return 1
	}
	defer tx.Rollback()
	if _, err := tx.Exec(q("SELECT %s.hoplock_fence($1::text, $2::bigint)"), name, gen); err != nil {
		fmt.Println("refused", postgres.SQLState(err))
		return 3
	}
	if _, err := tx.Exec("INSERT INTO "+fencedTable+" (name, generation) VALUES ($1, $2::bigint)", name, gen); err != nil {
		fmt.Println(err)
		return 1
	}
	if err := tx.Commit(); err != nil {
		fmt.Println("refused", postgres.SQLState(err))
		return 3
	}
	fmt.Println("wrote", gen)
	return 0
}

// gone reports whether process pid has exited (or is a zombie).
func gone(pid int) bool {
	if err := syscall.Kill(pid, 0); err != nil {
		return true
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	f := strings.Fields(string(b[bytes.LastIndexByte(b, ')')+1:]))
	return len(f) > 0 && f[0] == "Z"
}
