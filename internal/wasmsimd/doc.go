// Package wasmsimd writes the browser worker's SIMD kernels as a
// WebAssembly module (web/static/simd.wasm): Go emits no wasm SIMD, so the
// GEMM's inner loops are written here, instruction by instruction, with a
// small encoder of the binary format. The module imports the Go module's
// memory ("env" "mem") and works on Go's slices in place: nothing is copied
// per call.
//
// `go generate ./internal/wasmsimd` writes the module; a test checks that
// the file in the repository is what Module returns, and runs it under
// Node against nn.GoBlock, the reference of the block it computes
// (nn.BlockFunc). It imports nothing of this module (its tests import nn).
// docs/BROWSER.md tells how the browser worker loads and calls it.
package wasmsimd

//go:generate go run ./gen ../../web/static/simd.wasm
