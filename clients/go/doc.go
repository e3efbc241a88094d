// Package hoplock elects a leader among the instances of a service with a
// lease: an Elector campaigns for the lease, renews it while it leads, and
// tells its program when it leads and when it has lost.
//
// The lease lives in a Backend. Package postgres keeps it in a PostgreSQL
// database with the hoplock extension, where the server's clock alone
// decides who holds it, a follower waits in the server and takes over the
// moment the lease is released or expires, and every change is announced
// with NOTIFY. Package memory keeps it in memory, for tests, and package
// backendtest checks any Backend against the contract.
//
// Lead runs a function while this instance leads:
//
//	db, _ := sql.Open("pgx", "host=/tmp dbname=app")
//	backend := postgres.New(db, "billing-scheduler", postgres.Options{})
//	e := &hoplock.Elector{Backend: backend, Owner: "host-a:4242", TTL: 15 * time.Second}
//	err := e.Lead(ctx, func(ctx context.Context, lease hoplock.Lease) error {
//		// lead until ctx ends; fence each write with lease.Generation
//		return work(ctx, lease.Generation)
//	})
//
// The function's context is cancelled the moment leadership is lost, and
// in any case no later than the send time of the last successful renewal
// plus the TTL, by this process's monotonic clock: never by comparing wall
// clocks with the lease's expiry. The server lets another instance in no
// earlier than that. A process can still pause for longer than the TTL
// between checking its context and writing, so writes that matter are
// fenced: with the postgres backend, postgres.Backend.Fence (hoplock_fence)
// in the writing transaction, or the hoplock_fenced trigger on the table,
// with the lease's Generation.
//
// Run reports the same as a stream of events (acquired, renewed, lost),
// campaigning until its context ends; while it follows, it also reports
// each term of another instance (leader), whose value tells where to
// forward work.
//
// Transient errors (a lost connection, a busy lease table, a serialization
// failure) are retried, never taken for a loss; but when no renewal has
// succeeded within the TTL, leadership is given up all the same.
package hoplock
