// Package engine is the training engine of a job, in the parts the job's
// loop owns: a Scheduler (the task queue, leases, their base versions,
// deadlines and local steps, with an injected clock), an Aggregator (what
// an accepted result does: async, sync rounds with backup workers,
// DiLoCo rounds, async DiLoCo) and the Model state (parameters, outer
// optimizer, version).
//
// Everything here works on flat []float32 vectors and plain values. It
// knows no HTTP, no protocol message and no database: the coordinator
// translates, and tests drive it with a fake clock and no sockets. None
// of it is safe for concurrent use; one goroutine (the job's loop) owns
// it.
//
// engine imports nn (optimizers) only.
package engine
