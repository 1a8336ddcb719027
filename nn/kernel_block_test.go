package nn

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// withBlockKernel registers GoBlock as a block kernel for the test and
// removes it afterwards, so that the other tests' Kernels() stay as built.
func withBlockKernel(t *testing.T, name string, mr, nr int) {
	t.Helper()
	if err := RegisterBlockKernel(name, mr, nr, 0, GoBlock(mr, nr)); err != nil {
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
	sparseForce = 2 // the dense path: the sparse one sums in another order
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
			if w := grads["goblock"][i]; math.Float32bits(v) != math.Float32bits(w) {
				t.Errorf("%s: gradient[%d] %g on the block kernel, %g on go", preset, i, w, v)
				break
			}
		}
	}
}

func TestRegisterBlockKernelRefusesBadTiles(t *testing.T) {
	for _, tile := range [][2]int{{0, 8}, {5, 8}, {4, 7}, {16, 8}, {4, 64}} {
		if err := RegisterBlockKernel("bad", tile[0], tile[1], 0, GoBlock(tile[0], tile[1])); err == nil {
			t.Errorf("%d×%d tiles accepted", tile[0], tile[1])
		}
	}
	if err := RegisterBlockKernel("bad", 4, 8, 0, nil); err == nil {
		t.Error("a nil BlockFunc accepted")
	}
	if err := RegisterBlockKernel("bad", 4, 8, 1.5, GoBlock(4, 8)); err == nil {
		t.Error("a sparse share of 1.5 accepted")
	}
}
