// Package worker is the loop every worker kind shares: connect to the
// coordinator, say hello, ask for leases, fetch each lease's shard and
// snapshot ahead of time (a snapshot-"latest" lease's snapshot when it
// starts, after start/started), run its inner steps (sgd or adamw) with a
// Backend, push the update the lease asks for, and reconnect with backoff
// when the connection drops. docs/PROTOCOL.md is the contract.
//
// A worker kind plugs in a Backend (worker/cpu, shared by the native and
// the browser worker; worker/cuda) and says its kind in Config.Kind; none of
// the kinds' packages import each other. The computation of a lease is
// package compute's, whose types worker names as its own (Backend,
// Stepper, ...). worker imports compute, protocol, nn and dataset, never
// coordinator or store, and builds for js/wasm: the browser worker runs
// this same loop.
package worker
