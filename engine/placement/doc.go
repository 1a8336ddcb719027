// Package placement decides which job a worker computes for: the grid's
// scheduler across jobs, beside each job's own task queue
// (engine.Scheduler).
//
// A Pool keeps each job's recent compute, in FLOPs granted, decayed with
// a half-life, and orders the jobs a worker can run: higher priority
// first; within a priority, the job furthest below its weight's share of
// that compute, so that shares track weights over time even with fewer
// workers than jobs; the worker's current job, and then a job whose data
// it holds, win near-ties, so workers do not move for nothing.
//
// Fit says whether a worker can run a job at all (kind, memory, model
// size, layer kinds, a pin), and why not.
//
// Everything works on plain values with an injected time; a Pool is not
// safe for concurrent use. placement imports nothing of this module.
package placement
