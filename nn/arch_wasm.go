package nn

// Platform tuning for wasm, where gonum has no assembly kernels: its dot loop
// is bound by the latency of a single accumulator, so formulations built on
// axpys, which can skip zero operands, win more often than on amd64.

// axpyZeroQuarters: denseForward switches from dots to axpys once this many
// quarters of its inputs are zero.
const axpyZeroQuarters = 1

// rowModeMinR: conv2d layers with patches at least this long use row mode
// (see convForward); in wasm row mode is faster for every MNIST layer.
const rowModeMinR = 1

// goFirst: the register-tiled pure-Go kernel beats gonum's scalar loops in
// wasm (docs/BENCHMARKS.md), so it is the default there.
const goFirst = true
