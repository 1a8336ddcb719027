// Package gpuworker is the CUDA backend for worker: forward, backward and
// the inner steps (SGD or AdamW) of a lease run on an NVIDIA GPU, with GEMMs in cuBLAS
// and the other layers in kernels compiled at start by NVRTC from
// kernels.cu (embedded). The libraries are loaded at run time (package
// cuda), so the binary needs no CUDA toolkit to build or to start on a
// machine without a GPU; Open then returns an error that says what is
// missing, and callers fall back to the CPU.
//
// It imports worker, nn and protocol of ours, never coordinator, store or
// another worker kind.
package gpuworker
