// Command hoplock runs a command only while holding a hoplock lease, and
// shows who holds, waits for and held the leases of a database.
//
//	hoplock run [flags] NAME -- COMMAND [ARG...]
//	hoplock status [flags] [NAME]
//
// run waits for the lease NAME (or, with --skip, gives up at once when it
// is held), starts COMMAND with HOPLOCK_NAME, HOPLOCK_GENERATION and
// HOPLOCK_OWNER in its environment, renews the lease while COMMAND runs,
// stops COMMAND (SIGTERM, then SIGKILL after --grace) the moment the term
// is lost, releases the lease (or hands it to a waiting candidate, when
// hoplock itself was asked to stop) once COMMAND exits, and exits with
// COMMAND's status. status prints the holders (hoplock_leases), the
// candidates (hoplock_candidates) and the last terms (hoplock_history).
//
// The connection comes from --dsn, else HOPLOCK_DSN, else the usual
// PGHOST, PGPORT, PGUSER, PGDATABASE... variables; hoplock is called in
// schema --schema (HOPLOCK_SCHEMA, default "hoplock"). The exit statuses
// are listed in usage below.
package main

import (
	"database/sql"
	"fmt"
	"os"
	"time"

	"github.com/jackc/pgx/v4"
	"github.com/jackc/pgx/v4/stdlib"
)

// Exit statuses of hoplock itself (run exits with the command's status
// otherwise).
const (
	exitSkipped  = 75  // EX_TEMPFAIL: the lease is held by another owner (--skip, --timeout)
	exitFailed   = 125 // hoplock failed: bad usage, no connection, no extension
	exitNoExec   = 126 // the command was found but could not be run
	exitNotFound = 127 // the command was not found
)

// connectTimeout bounds the first connection, and how long a campaign
// with a deadline (--skip, --timeout) retries failing calls past it.
const connectTimeout = 10 * time.Second

const usage = `usage:
  hoplock run [flags] NAME -- COMMAND [ARG...]
      run COMMAND while holding the lease NAME (see hoplock run -h)
  hoplock status [flags] [NAME]
      the holders, candidates and last terms of the leases (or of NAME)

The connection: --dsn, else $HOPLOCK_DSN, else the PG* variables (PGHOST,
PGPORT, PGUSER, PGDATABASE, PGPASSWORD...). The schema hoplock is in:
--schema, else $HOPLOCK_SCHEMA, else "hoplock".

Exit status of run: COMMAND's own; 128+N if COMMAND died of signal N (so
143 after the SIGTERM that a lost term sends); 75 (or --skip-status) if
the lease was held and --skip or --timeout gave up; 125 if hoplock failed
(bad usage, no connection, hoplock not installed); 126 if COMMAND could
not be run, 127 if it was not found; 128+N if hoplock got signal N
before COMMAND started.
`

func main() {
	os.Exit(mainStatus(os.Args[1:]))
}

func mainStatus(args []string) int {
	if len(args) == 0 {
		fmt.Fprint(os.Stderr, usage)
		return exitFailed
	}
	switch args[0] {
	case "run":
		return runMain(args[1:])
	case "status":
		return statusMain(args[1:])
	case "-h", "-help", "--help", "help":
		fmt.Print(usage)
		return 0
	}
	fmt.Fprintf(os.Stderr, "hoplock: unknown command %q\n%s", args[0], usage)
	return exitFailed
}

// connFlags are the flags both commands take.
type connFlags struct {
	dsn, schema string
}

func (c *connFlags) defaults() {
	c.dsn = os.Getenv("HOPLOCK_DSN")
	c.schema = os.Getenv("HOPLOCK_SCHEMA")
	if c.schema == "" {
		c.schema = "hoplock"
	}
}

// open returns a pool on the connection the flags name, its sessions
// named app in pg_stat_activity unless the connection string names them.
func (c *connFlags) open(app string) (*sql.DB, error) {
	cfg, err := pgx.ParseConfig(c.dsn)
	if err != nil {
		return nil, err
	}
	if _, ok := cfg.RuntimeParams["application_name"]; !ok {
		cfg.RuntimeParams["application_name"] = app
	}
	return stdlib.OpenDB(*cfg), nil
}

func failf(format string, args ...any) int {
	fmt.Fprintf(os.Stderr, "hoplock: "+format+"\n", args...)
	return exitFailed
}
