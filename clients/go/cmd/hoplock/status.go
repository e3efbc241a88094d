package main

// hoplock status: who holds the leases (hoplock_leases), who waits for
// them (hoplock_candidates), and the last terms (hoplock_history).

import (
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"
)

const statusUsage = `usage: hoplock status [flags] [NAME]

Prints the leases held (or expired, or kept by min_hold) with their
holders, the candidates waiting for them, and the last terms, from
hoplock_leases, hoplock_candidates and hoplock_history: of every lease, or
of NAME only. Times are the server's.

Flags:
`

func statusMain(args []string) int {
	var c connFlags
	c.defaults()
	fs := flag.NewFlagSet("hoplock status", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), statusUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&c.dsn, "dsn", c.dsn, "connection string (default $HOPLOCK_DSN, else the PG* variables)")
	fs.StringVar(&c.schema, "schema", c.schema, "the schema hoplock is installed in ($HOPLOCK_SCHEMA)")
	terms := fs.Int("terms", 5, "how many of the last terms to print")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return 0
		}
		return exitFailed
	}
	if fs.NArg() > 1 {
		fs.Usage()
		return exitFailed
	}
	name := fs.Arg(0)
	db, err := c.open("hoplock status")
	if err != nil {
		return failf("status: %v", err)
	}
	defer db.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := printStatus(ctx, os.Stdout, db, quoteIdent(c.schema), name, *terms); err != nil {
		return failf("status: %v", err)
	}
	return 0
}

func quoteIdent(s string) string { return `"` + strings.ReplaceAll(s, `"`, `""`) + `"` }

// The three queries: $1 is the name, or NULL for every lease.
const (
	leasesQuery = `SELECT l.name, l.owner, l.generation::text, l.acquired_at, l.expires_at,
       l.expired, (pg_catalog.date_part('epoch', l.remaining) OPERATOR(pg_catalog.*) 1000)::int8, l.session_bound, coalesce(l.value, ''),
       coalesce(l.hold_until::text, ''), l.step_down_at IS NOT NULL,
       coalesce((%[1]s.hoplock_holder(l.name)).generation OPERATOR(pg_catalog.=) l.generation, false)
  FROM %[1]s.hoplock_leases AS l
 WHERE $1::text IS NULL OR l.name OPERATOR(pg_catalog.=) $1::text
 ORDER BY l.name`
	candidatesQuery = `SELECT c.name, c.owner, c.priority, c.waiting_since, c.pid
  FROM %s.hoplock_candidates AS c
 WHERE $1::text IS NULL OR c.name OPERATOR(pg_catalog.=) $1::text`
	historyQuery = `SELECT h.name, h.owner, h.generation::text, h.acquired_at, h.ended_at,
       coalesce(h.how, ''), h.refused_writes
  FROM %s.hoplock_history AS h
 WHERE $1::text IS NULL OR h.name OPERATOR(pg_catalog.=) $1::text
 ORDER BY h.acquired_at DESC, h.generation DESC
 LIMIT $2::integer`
)

func printStatus(ctx context.Context, out io.Writer, db *sql.DB, schema, name string, terms int) error {
	var arg sql.NullString
	if name != "" {
		arg = sql.NullString{String: name, Valid: true}
	}
	const stamp = "2006-01-02 15:04:05.000Z07"
	w := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)

	fmt.Fprintln(w, "LEASE\tOWNER\tGENERATION\tSINCE\tEXPIRES\tSTATE")
	rows, err := db.QueryContext(ctx, fmt.Sprintf(leasesQuery, schema), arg)
	if err != nil {
		return err
	}
	n := 0
	for rows.Next() {
		var (
			lname, owner, gen, value, hold   string
			remaining                        int64
			acquired, expires                time.Time
			expired, session, stepDown, held bool
		)
		if err := rows.Scan(&lname, &owner, &gen, &acquired, &expires, &expired, &remaining, &session, &value, &hold, &stepDown, &held); err != nil {
			rows.Close()
			return err
		}
		state := "held, " + (time.Duration(remaining) * time.Millisecond).Round(100*time.Millisecond).String() + " left"
		switch {
		case !held && hold != "":
			state = "ended, kept from other owners until " + hold
		case !held:
			state = "expired"
		}
		if session {
			state += ", session-bound"
		}
		if stepDown {
			state += ", asked to step down"
		}
		if value != "" {
			state += ", value " + value
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\n", lname, owner, gen, acquired.Format(stamp), expires.Format(stamp), state)
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintln(w, "(none held)")
	}

	fmt.Fprintln(w, "\nCANDIDATE\tOWNER\tPRIORITY\tWAITING SINCE\tPID")
	rows, err = db.QueryContext(ctx, fmt.Sprintf(candidatesQuery, schema), arg)
	if err != nil {
		return err
	}
	n = 0
	for rows.Next() {
		var (
			lname, owner  string
			priority, pid int64
			since         time.Time
		)
		if err := rows.Scan(&lname, &owner, &priority, &since, &pid); err != nil {
			rows.Close()
			return err
		}
		fmt.Fprintf(w, "%s\t%s\t%d\t%s\t%d\n", lname, owner, priority, since.Format(stamp), pid)
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintln(w, "(none waiting)")
	}

	fmt.Fprintln(w, "\nTERM\tOWNER\tGENERATION\tBEGAN\tENDED\tHOW\tREFUSED WRITES")
	rows, err = db.QueryContext(ctx, fmt.Sprintf(historyQuery, schema), arg, terms)
	if err != nil {
		return err
	}
	n = 0
	for rows.Next() {
		var (
			lname, owner, gen, how string
			acquired               time.Time
			ended                  sql.NullTime
			refused                int64
		)
		if err := rows.Scan(&lname, &owner, &gen, &acquired, &ended, &how, &refused); err != nil {
			rows.Close()
			return err
		}
		end := "(running)"
		if ended.Valid {
			end = ended.Time.Format(stamp)
		}
		if how == "" {
			how = "-"
		}
		fmt.Fprintf(w, "%s\t%s\t%s\t%s\t%s\t%s\t%d\n", lname, owner, gen, acquired.Format(stamp), end, how, refused)
		n++
	}
	if err := rows.Err(); err != nil {
		return err
	}
	if n == 0 {
		fmt.Fprintln(w, "(no terms)")
	}
	return w.Flush()
}
