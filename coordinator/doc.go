// Package coordinator holds the jobs and everything workers talk to: shard
// leases with deadlines, the asynchronous update rule bounded by
// staleness, evaluation on the test set, the websocket endpoint /ws, the
// JSON API, and snapshots and shards as immutable HTTP resources.
//
// Each job's model, optimizer, task queue and leases belong to one
// goroutine (Job.run); connection goroutines decode and validate in
// parallel and hand results to it. See DESIGN.md.
//
// coordinator imports nn, dataset and protocol (and, later, store); no
// worker package imports it.
package coordinator
