// Package nativeworker chooses the GEMM kernel a native CPU worker runs on
// (--kernel: auto, one of nn's kernels, or the host's OpenBLAS, which
// subpackage openblas loads at run time). The backend itself is package
// cpubackend, which the browser worker shares.
//
// It imports cpubackend and nn, never coordinator, store or another worker
// kind.
package nativeworker
