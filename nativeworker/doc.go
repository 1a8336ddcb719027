// Package nativeworker is the CPU backend for worker: nn's float32 layers
// with GEMM through gonum's blas32, a batch split across goroutines for
// --threads N.
//
// It imports worker and nn, never coordinator, store or another worker
// kind.
package nativeworker
