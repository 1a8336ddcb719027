// Package worker is the loop every worker kind shares: connect to the
// coordinator, say hello, ask for leases, fetch each lease's shard and
// snapshot ahead of time, compute the pseudo-gradient with a Backend, push
// the result, and reconnect with backoff when the connection drops.
//
// A worker kind (nativeworker, gpuworker, the browser's wasmworker) plugs
// in a Backend; none of them import each other. worker imports protocol,
// nn and dataset, never coordinator or store, and builds for js/wasm: the
// browser worker runs this same loop.
package worker
