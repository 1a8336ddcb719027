// Package driver binds the three NVIDIA libraries the GPU worker needs — the
// driver API (libcuda.so.1), NVRTC (libnvrtc) and cuBLAS (libcublas) — at
// run time with github.com/ebitengine/purego, so the binary builds with
// CGO_ENABLED=0 and without a CUDA toolkit, and starts (on the CPU) where
// no NVIDIA driver is installed.
//
// Libraries are looked for in $CROWDTRAIN_CUDA_LIBS (a colon-separated
// list of folders), then by the system loader, then in the usual CUDA
// folders and in Python's nvidia-* wheels. A missing library or symbol and
// every failed call become Go errors that name what is missing or the
// CUDA error (cuGetErrorName), never a crash.
//
// Every call into the driver and cuBLAS must come from the OS thread that
// made the context current: callers run them from one goroutine locked to
// its thread. It imports nothing of ours.
package driver
