// Package compute is the pinned computation of a lease's update from a
// model, parameters and examples: the inner steps (sgd or adamw, clipped,
// with the lease's dropout seed), the update kind, the Backend interface
// a device implements it on. It is what every worker kind runs (package
// worker drives it), and what the coordinator recomputes a disputed spot
// check with, on Reference: nn's layers on the pure-Go kernel, the same
// figures on every machine.
//
// It imports nn, protocol and the standard library only, never the
// coordinator, store, worker or a worker kind's package, and builds for
// GOOS=js GOARCH=wasm (internal/arch checks).
package compute
