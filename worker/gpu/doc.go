// Package gpu trains a model on a GPU once for every GPU backend: the
// layers' forward and backward passes, the net's layout in device memory,
// multi-head attention, the loss, gradient clipping and the inner steps
// (SGD or AdamW) of a lease. It runs them over Device, the little a
// backend does: reserve and copy device memory, launch a kernel by name,
// multiply matrices and add up the losses. worker/cuda implements Device
// with CUDA (kernels.cu, cuBLAS) and worker/wasm/webgpu with WebGPU
// (kernels.wgsl); each keeps its kernel sources, which share names and
// arguments.
//
// A layer type is one file here (dense.go, conv2d.go, ...) that registers
// itself in layerTypes, plus its kernels in each backend.
//
// It builds for js/wasm and natively without cgo, and imports nn,
// protocol and worker of ours: never coordinator, store, worker/cuda or
// webgpu.
package gpu
