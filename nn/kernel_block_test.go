package nn

import (
	"math/rand/v2"
	"strings"
	"testing"
)

// withBlockKernel registers GoBlock as a block kernel for the test and
// removes it afterwards, so that the other tests' Kernels() stay as built.
func withBlockKernel(t *testing.T, name string, mr, nr int) {
	t.Helper()
	withBlockKernelOf(t, name, BlockKernel{MR: mr, NR: nr, Dense: GoBlock(mr, nr)})
}

func withBlockKernelOf(t *testing.T, name string, k BlockKernel) {
	t.Helper()
	if err := RegisterBlockKernel(name, k); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kernelsMu.Lock()
		defer kernelsMu.Unlock()
		for i, k := range kernels {
			if k.name == name {
				kernels = append(kernels[:i], kernels[i+1:]...)
				break
			}
		}
	})
}

// The block driver (packing, blocking, edges, alpha and beta, the four
// transposes) on the cases every kernel passes, with the wasm SIMD
// module's 4×8 tiles and with others (not 8-row or 32-column ones: the
// packing has AVX-512 paths for those, for the avx512 kernel alone).
func TestBlockKernelMatchesReference(t *testing.T) {
	for _, tile := range [][2]int{{4, 8}, {3, 16}} {
		name := "goblock-" + strings.Repeat("x", tile[0]) + "-" + strings.Repeat("y", tile[1])
		withBlockKernel(t, name, tile[0], tile[1])
		testKernel(t, name)
	}
	// With a sparse block: the cases with half zeros in A take it.
	withBlockKernelOf(t, "goblock-sparse", BlockKernel{MR: 4, NR: 8, Dense: GoBlock(4, 8), Sparse: GoSparseBlock, SparseMinZeros: 0.25})
	testKernel(t, "goblock-sparse")
}

// A block kernel sums each element as the pure-Go kernel does (blocks of
// k in order, each summed in order of p), so a whole training step gives
// the same bits on both: the wasm SIMD kernel is checked against wasm-go
// this way in the browser.
func TestBlockKernelGradientEqualsGoKernel(t *testing.T) {
	withBlockKernel(t, "goblock", 4, 8)
	old := KernelName()
	defer UseKernel(old)
	defer func(old int) { sparseForce = old }(sparseForce)
	for _, force := range []int{2, 1} { // dense, then sparse everywhere
		sparseForce = force
		// The sparse path of a block kernel: its SparseBlockFunc.
		withBlockKernelOf(t, "goblock", BlockKernel{MR: 4, NR: 8, Dense: GoBlock(4, 8), Sparse: GoSparseBlock, SparseMinZeros: 0.5})
		testBlockGradient(t, force)
	}
}

func testBlockGradient(t *testing.T, force int) {
	for _, preset := range []string{"mnist-mlp", "mnist-cnn", "charlm-tiny"} {
		spec, err := Preset(preset)
		if err != nil {
			t.Fatal(err)
		}
		m, err := NewModel(spec)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(*seed, 5))
		params := make([]float32, m.NumParams)
		m.Init(params, 3)
		x, labels := randomData(r, m, 9)
		ws := m.NewWorkspace(16)
		grads := map[string][]float32{}
		for _, k := range []string{KernelGo, "goblock"} {
			if err := UseKernel(k); err != nil {
				t.Fatal(err)
			}
			g := make([]float32, m.NumParams)
			m.Gradient(ws, params, x, labels, g)
			grads[k] = g
		}
		for i, v := range grads[KernelGo] {
			// Equal values (a sum of zeros may differ in its sign).
			if w := grads["goblock"][i]; v != w {
				t.Errorf("%s, sparseForce %d: gradient[%d] %g on the block kernel, %g on go", preset, force, i, w, v)
				break
			}
		}
	}
}

func TestRegisterBlockKernelRefusesBadTiles(t *testing.T) {
	for _, tile := range [][2]int{{0, 8}, {5, 8}, {4, 7}, {16, 8}, {4, 64}} {
		if err := RegisterBlockKernel("bad", BlockKernel{MR: tile[0], NR: tile[1], Dense: GoBlock(tile[0], tile[1])}); err == nil {
			t.Errorf("%d×%d tiles accepted", tile[0], tile[1])
		}
	}
	if err := RegisterBlockKernel("bad", BlockKernel{MR: 4, NR: 8}); err == nil {
		t.Error("a kernel without a Dense function accepted")
	}
	if err := RegisterBlockKernel("bad", BlockKernel{MR: 4, NR: 8, Dense: GoBlock(4, 8), SparseMinZeros: 1.5}); err == nil {
		t.Error("a sparse share of 1.5 accepted")
	}
}
