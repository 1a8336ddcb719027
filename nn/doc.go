// Package nn is crowdtrain's small neural-network engine: model specs and
// presets, one flat float32 parameter vector with a named layout, forward and
// backward passes for classifiers and sequence models (softmax
// cross-entropy per label position), and optimizers that act on flat
// vectors.
//
// Each layer type (dense, relu, conv2d, maxpool2d, flatten, embedding,
// layernorm, attention, gelu, residual, dropout) is one file that registers
// itself: it resolves its spec against the shape it gets (images [c,h,w],
// flat vectors, token ids [t], sequences [t,d]), places its tensors, sizes
// its buffers and runs forward and backward behind the Layer interface.
//
// A causal sequence model also decodes one token at a time (Decoder: a
// key-value cache per attention layer, greedy or seeded sampling that
// returns each token's log-probability), and GradientOfLogits
// backpropagates any loss of the logits, such as the GRPO loss of package
// rl, through the same backward pass.
//
// The coordinator and every worker share this code, so parameters, gradients,
// updates and snapshots all use the same flat layout (Model.Layout) and can be
// added, averaged and shipped without knowing the architecture.
//
// Constraints that keep it usable everywhere:
//   - It imports nothing of crowdtrain, only the standard library and gonum,
//     because it must build for GOOS=js GOARCH=wasm, where browser workers
//     run it single-threaded.
//   - Matrix products go through one GEMM kernel per process (Kernels,
//     UseKernel): packed AVX-512 or AVX2 micro-kernels in assembly on amd64,
//     chosen by CPU feature detection; a pure-Go register-tiled kernel that
//     skips the zeros relu leaves (the wasm default; always built, and
//     CROWDTRAIN_KERNEL=go selects it anywhere); gonum's blas32; or one
//     registered at run time (the host's OpenBLAS, by worker/cpu/native).
//     -tags purego builds without the assembly. Each kernel is tested
//     against a plain triple loop.
//   - Hot paths (Model.Gradient, Model.Evaluate, Optimizer.Step) allocate
//     nothing: every buffer lives in a caller-owned Workspace or optimizer, so
//     long training loops put no load on the garbage collector (the packed
//     kernels pack into Workspace buffers). Every kernel runs on the calling
//     goroutine; parallelism comes from running one Workspace per goroutine.
//   - Results are deterministic: Init depends only on the seed, on every
//     platform.
//
// Programmer errors (wrong slice lengths, a workspace from another model)
// panic; problems in specs or data return errors that say what is wrong and
// how to fix it.
package nn
