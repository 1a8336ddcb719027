// Package cuda is the CUDA backend for worker: forward, backward and
// the inner steps (SGD or AdamW) of a lease run on an NVIDIA GPU. The
// layers and steps are worker/gpu's executor; this package is its
// gpu.Device on CUDA, with GEMMs in cuBLAS and the other kernels compiled
// at start by NVRTC from kernels.cu (embedded). The libraries are loaded at run time (package
// worker/cuda/driver), so the binary needs no CUDA toolkit to build or to start on a
// machine without a GPU; Open then returns an error that says what is
// missing, and callers fall back to the CPU.
//
// It imports worker, worker/gpu, nn and protocol of ours, never
// coordinator, store or another worker kind.
package cuda
