// Package openblas loads the host's OpenBLAS at run time (with purego, like
// worker/cuda/driver loads the CUDA libraries) and offers its SGEMM to package
// nn as a GEMM kernel, so the binary builds, ships and runs without it and
// uses it where a volunteer's machine has it.
//
// OpenBLAS is forced to one thread: the CPU worker's own threads split the
// batch, so --threads stays true.
//
// It must not be imported by the browser worker (it needs dlopen); only the
// native worker and the command line use it.
package openblas
