//go:build !wasm

package nn

// Platform tuning where gonum has assembly kernels (amd64, arm64), measured
// on amd64 with the presets at batch 64.

// axpyZeroQuarters: denseForward switches from dots to axpys once this many
// quarters of its inputs are zero. gonum's assembly dot kernel is fast enough
// that skipping zeros only pays on very sparse inputs (e.g. MNIST pixels).
const axpyZeroQuarters = 3

// rowModeMinR: conv2d layers with patches at least this long use row mode
// (see convForward). With short patches the per-row overhead of row mode's
// zero-skipping GEMMs outweighs the gain.
const rowModeMinR = 64

// goFirst: where gonum has SIMD assembly it beats the scalar pure-Go kernel
// (which spills its 16 accumulators on amd64), so without an assembly kernel
// of ours (-tags purego, or an old CPU) gonum is the default.
const goFirst = false
