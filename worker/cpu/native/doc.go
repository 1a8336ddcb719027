// Package native chooses the GEMM kernel a native CPU worker runs on
// (--kernel: auto, one of nn's kernels, or the host's OpenBLAS, which
// package worker/cpu/openblas loads at run time). The backend itself is
// package worker/cpu, which the browser worker shares.
//
// It imports worker/cpu, worker/cpu/openblas and nn, never coordinator,
// store or another worker kind.
package native
