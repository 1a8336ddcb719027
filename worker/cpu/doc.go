// Package cpu is the CPU backend of every worker that computes on
// the CPU: the native worker (a batch split across goroutines for
// --threads N) and the browser worker (one thread, Go's js/wasm having no
// others). It runs package nn's layers on nn's GEMM kernel in use, and
// under --kernel auto times the job's own step on every kernel and takes
// the fastest (autokernel.go).
//
// The worker's kind (native, browser) is the worker's configuration
// (worker.Config.Kind), not the backend's. It imports nn and worker, never
// coordinator, store, web or a worker kind's package; it builds for
// GOOS=js GOARCH=wasm (internal/arch checks).
package cpu
