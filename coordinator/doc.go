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
// the protocol's messages and the engine's plain values. See
// docs/ARCHITECTURE.md (the order of the checks a result goes through) and
// docs/TRAINING.md.
//
// The same Server is a root or a relay (docs/RELAYS.md). A root serves
// its relays over NATS (relaygate.go): it grants them blocks of leases
// and applies their aggregates whole or not at all, once, acknowledging
// each when the checkpoint holding it is durable (relayroot.go). A relay
// (relayserver.go) runs a copy of each of its root's jobs whose model is
// the root's and whose Aggregator sums instead of stepping
// (relaymirror.go); what the root says travels as package protocol/relay
// (imported as relaymsg).
//
// Logs go through Config.Logger (log/slog): each message reads as the
// printf line it was, and carries the job, worker, volunteer and relay it
// concerns as attributes, for an operator's log pipeline (logging.go).
//
// coordinator imports engine, jobspec, nn, dataset, protocol, store and
// protocol/relay; no worker package imports it.
package coordinator
