package main

// hoplock run: a command run only while this process holds a lease, on
// the Go Elector (Elector.Lead) over the postgres backend.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"sync"
	"syscall"
	"time"

	hoplock "github.com/hoplock/hoplock/clients/go"
	"github.com/hoplock/hoplock/clients/go/postgres"
)

const runUsage = `usage: hoplock run [flags] NAME -- COMMAND [ARG...]

Runs COMMAND only while holding the lease NAME: waits for it (or, with
--skip, gives up at once if another owner holds it), renews it every ttl/3
while COMMAND runs, and stops COMMAND -- SIGTERM to its process group,
SIGKILL after --grace -- the moment the term is lost. When COMMAND exits
the lease is released; when hoplock itself is stopped (SIGTERM, SIGINT) it
passes the signal on, waits for COMMAND (SIGKILL after --grace), and hands
the term to a candidate waiting for it, or releases it. COMMAND gets
HOPLOCK_NAME, HOPLOCK_GENERATION (the term's fencing token, for
hoplock_fence), HOPLOCK_OWNER and HOPLOCK_SCHEMA in its environment.
SIGHUP, SIGUSR1 and SIGUSR2 are passed on to COMMAND.

Exit status: COMMAND's (128+N if it died of signal N); --skip-status (75)
if the lease was held and --skip or --timeout gave up; 125 if hoplock
failed; 126/127 if COMMAND could not be run / was not found.

Flags:
`

// runFlags are hoplock run's settings.
type runFlags struct {
	connFlags
	wait, skip    bool
	timeout       time.Duration
	skipStatus    int
	ttl, grace    time.Duration
	minHold       time.Duration
	owner         string
	sessionBound  bool
	priority      int
	verbose       bool
	name          string
	argv          []string
	ownerExplicit bool
}

func parseRunFlags(args []string) (*runFlags, error) {
	f := &runFlags{}
	f.defaults()
	fs := flag.NewFlagSet("hoplock run", flag.ContinueOnError)
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), runUsage)
		fs.PrintDefaults()
	}
	fs.StringVar(&f.dsn, "dsn", f.dsn, "connection string (default $HOPLOCK_DSN, else the PG* variables)")
	fs.StringVar(&f.schema, "schema", f.schema, "the schema hoplock is installed in ($HOPLOCK_SCHEMA)")
	fs.BoolVar(&f.wait, "wait", false, "wait until the lease is free (the default)")
	fs.BoolVar(&f.skip, "skip", false, "give up at once if another owner holds the lease")
	fs.DurationVar(&f.timeout, "timeout", 0, "with --wait, give up after this long (0: wait forever)")
	fs.IntVar(&f.skipStatus, "skip-status", exitSkipped, "exit status when giving up (--skip, --timeout)")
	fs.DurationVar(&f.ttl, "ttl", hoplock.DefaultTTL, "the lease's ttl: how long it outlives a hoplock that stopped renewing")
	fs.DurationVar(&f.grace, "grace", 5*time.Second, "how long COMMAND has after SIGTERM before SIGKILL")
	fs.DurationVar(&f.minHold, "min-hold", 0, "keep the lease from other owners this long after the term began, even if COMMAND ends sooner (at most ttl; once-per-tick jobs)")
	fs.StringVar(&f.owner, "owner", "", "this process's identity in the lease (default host:pid)")
	fs.BoolVar(&f.sessionBound, "session-bound", false, "end the term the moment hoplock's connection closes, not a ttl later")
	fs.IntVar(&f.priority, "priority", 0, "rank among the candidates waiting for the lease (higher first)")
	fs.BoolVar(&f.verbose, "v", false, "report terms begun and ended on standard error")

	// Flags may come before and after NAME; "--" ends them.
	if err := fs.Parse(args); err != nil {
		return nil, err
	}
	rest := fs.Args()
	if len(rest) == 0 {
		fs.Usage()
		return nil, errors.New("no lease name")
	}
	f.name = rest[0]
	rest = rest[1:]
	if len(rest) > 0 && rest[0] != "--" {
		if err := fs.Parse(rest); err != nil {
			return nil, err
		}
		rest = fs.Args()
	} else if len(rest) > 0 {
		rest = rest[1:]
	}
	f.argv = rest
	switch {
	case len(f.argv) == 0:
		fs.Usage()
		return nil, errors.New("no command")
	case f.wait && f.skip:
		return nil, errors.New("--wait and --skip exclude each other")
	case f.skip && f.timeout != 0:
		return nil, errors.New("--timeout goes with --wait, not --skip")
	case f.timeout < 0:
		return nil, errors.New("--timeout must not be negative")
	case f.grace < 0:
		return nil, errors.New("--grace must not be negative")
	case f.skipStatus < 0 || f.skipStatus > 255:
		return nil, errors.New("--skip-status must be between 0 and 255")
	}
	if f.owner == "" {
		host, err := os.Hostname()
		if err != nil {
			host = "localhost"
		}
		f.owner = host + ":" + strconv.Itoa(os.Getpid())
	}
	return f, nil
}

// runner is one hoplock run: the command it runs now, and how it was
// asked to stop.
type runner struct {
	f *runFlags

	mu      sync.Mutex
	cur     *child         // the command, while it runs
	stopSig syscall.Signal // the signal that asked hoplock to stop, or 0
	status  int            // the command's exit status
}

func runMain(args []string) int {
	f, err := parseRunFlags(args)
	if errors.Is(err, flag.ErrHelp) {
		return 0
	}
	if err != nil {
		return failf("run: %v", err)
	}
	r := &runner{f: f}
	return r.run()
}

func (r *runner) run() int {
	f := r.f
	db, err := f.open("hoplock run " + f.name)
	if err != nil {
		return failf("run: %v", err)
	}
	defer db.Close()
	// A server that cannot be reached at the start is a failure, not a
	// wait: renewals retry a lost connection, a cron job does not hang.
	pctx, pcancel := context.WithTimeout(context.Background(), connectTimeout)
	err = db.PingContext(pctx)
	pcancel()
	if err != nil {
		return failf("run: %v", err)
	}

	g := &gate{Backend: postgres.New(db, f.name, postgres.Options{Schema: f.schema, SessionBound: f.sessionBound})}
	switch {
	case f.skip:
		g.deadline = time.Now()
	case f.timeout > 0:
		g.deadline = time.Now().Add(f.timeout)
	}
	e := &hoplock.Elector{
		Backend:  g,
		Owner:    f.owner,
		TTL:      f.ttl,
		MinHold:  f.minHold,
		Priority: f.priority,
	}
	if f.verbose {
		e.Logger = newLogger()
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 4)
	signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGUSR1, syscall.SIGUSR2)
	defer signal.Stop(sigs)
	go r.signals(sigs, cancel)

	err = e.Lead(ctx, r.lead)
	r.mu.Lock()
	stopSig, status := r.stopSig, r.status
	r.mu.Unlock()
	switch {
	case err == nil:
		return status
	case errors.Is(err, errGaveUp):
		if f.verbose {
			fmt.Fprintf(os.Stderr, "hoplock: %q is held by another owner: skipped\n", f.name)
		}
		return f.skipStatus
	case ctx.Err() != nil && stopSig != 0:
		return 128 + int(stopSig)
	}
	return failf("run: %v", err)
}

// signals handles hoplock's signals: SIGINT and SIGTERM stop it (passed on
// to the command, if it runs; a second one kills the command at once),
// SIGHUP too before the command runs; SIGHUP, SIGUSR1 and SIGUSR2 are
// passed on to a running command.
func (r *runner) signals(sigs <-chan os.Signal, cancel context.CancelFunc) {
	for s := range sigs {
		sig := s.(syscall.Signal)
		r.mu.Lock()
		c, stopping := r.cur, r.stopSig != 0
		stop := sig == syscall.SIGINT || sig == syscall.SIGTERM || (sig == syscall.SIGHUP && c == nil)
		if stop && !stopping {
			r.stopSig = sig
		}
		r.mu.Unlock()
		switch {
		case stop && stopping && c != nil:
			c.signal(syscall.SIGKILL)
		case stop:
			cancel()
		case c != nil:
			c.signal(sig)
		}
	}
}

// lead runs the command for the term of lease, and stops it when ctx ends.
func (r *runner) lead(ctx context.Context, lease hoplock.Lease) error {
	f := r.f
	if f.verbose {
		fmt.Fprintf(os.Stderr, "hoplock: leading %q in generation %d as %s\n", f.name, lease.Generation, f.owner)
	}
	env := append(os.Environ(),
		"HOPLOCK_NAME="+f.name,
		"HOPLOCK_GENERATION="+strconv.FormatInt(lease.Generation, 10),
		"HOPLOCK_OWNER="+f.owner,
		"HOPLOCK_SCHEMA="+f.schema,
	)
	r.mu.Lock()
	if r.stopSig != 0 {
		r.mu.Unlock()
		r.setStatus(128 + int(r.stopSig))
		return nil
	}
	c, status, err := startChild(f.argv, env)
	if err != nil {
		r.mu.Unlock()
		fmt.Fprintf(os.Stderr, "hoplock: %v\n", err)
		r.setStatus(status)
		return nil
	}
	r.cur = c
	r.mu.Unlock()

	select {
	case <-c.done:
	case <-ctx.Done():
		r.mu.Lock()
		sig := r.stopSig
		r.mu.Unlock()
		if sig == 0 || sig == syscall.SIGHUP {
			cause := hoplock.LossCause(ctx)
			if cause == nil {
				cause = ctx.Err()
			}
			if !errors.Is(cause, hoplock.ErrStepDown) || f.verbose {
				fmt.Fprintf(os.Stderr, "hoplock: %q, generation %d: %v: stopping the command\n", f.name, lease.Generation, cause)
			}
			sig = syscall.SIGTERM
		}
		c.signal(sig)
		grace := time.NewTimer(f.grace)
		select {
		case <-c.done:
		case <-grace.C:
			fmt.Fprintf(os.Stderr, "hoplock: the command did not stop within %v: killing it\n", f.grace)
			c.signal(syscall.SIGKILL)
			<-c.done
		}
		grace.Stop()
	}
	r.mu.Lock()
	r.cur = nil
	r.mu.Unlock()
	r.setStatus(c.status())
	if f.verbose {
		fmt.Fprintf(os.Stderr, "hoplock: the command exited with status %d\n", c.status())
	}
	return nil
}

func (r *runner) setStatus(s int) {
	r.mu.Lock()
	r.status = s
	r.mu.Unlock()
}
