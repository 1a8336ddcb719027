// Package coordinator holds the jobs and everything workers talk to: the
// websocket endpoint /ws, the JSON API, evaluation on the test set,
// checkpoints, and snapshots and shards as immutable HTTP resources.
//
// A job's training engine is package engine: its Scheduler (task queue,
// leases, base versions, local steps), its Aggregator (async, sync rounds,
// DiLoCo) and its model state, configured from the job's spec (package
// jobspec) by configure.go. They belong to one goroutine, the job's loop
// (Job.loop); connection goroutines decode and validate in parallel and
// hand results to it through Job.exec. This package translates between
// the protocol's messages and the engine's plain values. See DESIGN.md
// and docs/TRAINING.md.
//
// coordinator imports engine, jobspec, nn, dataset, protocol and store;
// no worker package imports it.
package coordinator
