// Package loadgen simulates a crowd against a coordinator: idle volunteers
// that stay connected and ask for nothing, and active ones that each hold
// a lease and return a result of the job's size every so often, measuring
// how long a lease takes to come. It is the load generator of
// `make bench-load` (cmd/crowdtrain-load), a process of its own so that
// the coordinator's process holds only its own side of the connections.
//
// It speaks the worker protocol (package protocol) itself and computes
// nothing: its updates are small noise. It imports protocol, never
// coordinator or worker.
package loadgen
