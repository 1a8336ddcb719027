// Package webgpu is the browser worker's GPU backend: forward, backward
// and the inner steps (SGD or AdamW) of a lease run on the GPU through
// WebGPU, with every layer of package nn as WGSL compute kernels
// (kernels.wgsl, embedded) and the GEMMs as a tiled WGSL kernel.
//
// Go drives WebGPU through syscall/js: the page's Web Worker asks the
// browser for an adapter and a device (worker.js) and hands the device to
// Open. The layers and the inner steps are worker/gpu's executor, the
// CUDA backend's (worker/cuda) too; this package is its gpu.Device on
// WebGPU. All of a model's device memory is one storage buffer, the arena,
// and a kernel's "pointers" are float indices into it (the executor's
// byte offsets over 4), so every kernel binds the same two things (the
// arena and its arguments in a uniform buffer slot). The parameters of a
// snapshot are uploaded once; a lease's examples go up a batch at a time,
// and only the update (and the losses) come back.
//
// Everything that talks to the browser builds for js/wasm only; the
// arguments' packing is plain Go.
package webgpu
