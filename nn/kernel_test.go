package nn

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"
)

// seed fixes the kernel tests' random operands; override to explore.
var seed = flag.Uint64("kernel.seed", 1, "random seed of the GEMM kernel tests")

// refGemm is the plain triple loop, in float64, that every kernel is
// checked against.
func refGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				var av, bv float32
				if transA {
					av = a[p*lda+i]
				} else {
					av = a[i*lda+p]
				}
				if transB {
					bv = b[j*ldb+p]
				} else {
					bv = b[p*ldb+j]
				}
				s += float64(av) * float64(bv)
			}
			old := float64(0)
			if beta != 0 { // beta = 0 ignores C, NaNs included (BLAS rule)
				old = float64(beta) * float64(c[i*ldc+j])
			}
			c[i*ldc+j] = float32(float64(alpha)*s + old)
		}
	}
}

// gemmCases are the shapes every kernel is tested on: the layer shapes of
// the presets, sizes around the tile and block edges (4, 6, 8, 16, 32, 96,
// 256, 512) and odd ones.
var gemmCases = [][3]int{
	{1, 1, 1}, {1, 7, 3}, {5, 1, 9}, {3, 5, 0}, {4, 4, 4}, {6, 16, 7}, {8, 32, 5},
	{7, 17, 33}, {9, 31, 15}, {13, 33, 1}, {17, 15, 257}, {95, 97, 31}, {97, 513, 20},
	{64, 256, 784}, {64, 128, 256}, {64, 10, 128}, {256, 784, 64}, {10, 128, 64},
	{8, 784, 25}, {16, 100, 200}, {784, 25, 8}, {8, 25, 784}, {33, 600, 300},
}

// testKernel runs name over gemmCases in all four transpose cases, with
// strided (ld > cols) operands, several alpha and beta, and returns after
// the first few failures.
func testKernel(t *testing.T, name string) {
	t.Helper()
	old := KernelName()
	if err := UseKernel(name); err != nil {
		t.Fatal(err)
	}
	defer UseKernel(old)
	r := rand.New(rand.NewPCG(*seed, 7))
	s := newGemmScratch()
	fails := 0
	for _, sh := range gemmCases {
		m, n, k := sh[0], sh[1], sh[2]
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			for _, ab := range [][2]float32{{1, 0}, {1, 1}, {0.5, -1.5}} {
				tA, tB := tr[0], tr[1]
				alpha, beta := ab[0], ab[1]
				ar, ac := m, k
				if tA {
					ar, ac = k, m
				}
				br, bc := k, n
				if tB {
					br, bc = n, k
				}
				lda, ldb, ldc := ac+3, bc+1, n+2
				a := randSlice(r, ar*lda)
				if alpha != 1 {
					// Half zeros, like relu output: the sparse path's case.
					for i := range a {
						if r.IntN(2) == 0 {
							a[i] = 0
						}
					}
				}
				b := randSlice(r, br*ldb)
				c := randSlice(r, m*ldc)
				if beta == 0 {
					for i := range c {
						c[i] = float32(math.NaN()) // must be ignored
					}
				}
				want := append([]float32(nil), c...)
				refGemm(tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, want, ldc)
				gemm(s, tA, tB, m, n, k, alpha, a, lda, b, ldb, beta, c, ldc)
				if err := closeGemm(c, want, m, n, ldc, k); err != nil {
					t.Errorf("%s: m=%d n=%d k=%d transA=%v transB=%v alpha=%g beta=%g: %v", name, m, n, k, tA, tB, alpha, beta, err)
					if fails++; fails > 5 {
						return
					}
				}
			}
		}
	}
}

func randSlice(r *rand.Rand, n int) []float32 {
	x := make([]float32, n)
	for i := range x {
		x[i] = 2*r.Float32() - 1
	}
	return x
}

// closeGemm compares C with the reference inside the m×n window and checks
// that the padding between rows (ldc > n) was left alone. The tolerance
// scales with k: float32 sums of k products of values in [-1, 1].
func closeGemm(got, want []float32, m, n, ldc, k int) error {
	tol := 1e-5 * float64(k+4)
	for i := 0; i < m; i++ {
		for j := 0; j < ldc; j++ {
			g, w := got[i*ldc+j], want[i*ldc+j]
			if j >= n {
				if math.Float32bits(g) != math.Float32bits(w) {
					return fmt.Errorf("C[%d][%d] outside the %d columns changed: %g, was %g", i, j, n, g, w)
				}
				continue
			}
			if d := math.Abs(float64(g - w)); !(d <= tol) {
				return fmt.Errorf("C[%d][%d] = %g, want %g (diff %g > %g)", i, j, g, w, d, tol)
			}
		}
	}
	return nil
}

func TestKernelsMatchReference(t *testing.T) {
	for _, name := range Kernels() {
		t.Run(name, func(t *testing.T) { testKernel(t, name) })
	}
	// The pure-Go kernel's two paths, each on every case.
	for _, force := range []int{1, 2} {
		t.Run(fmt.Sprintf("go/sparseForce=%d", force), func(t *testing.T) {
			defer func(old int) { sparseForce = old }(sparseForce)
			sparseForce = force
			testKernel(t, KernelGo)
		})
	}
}

// The pure-Go kernel must be there on every platform and build: it is what
// wasm runs and the fallback everywhere else.
func TestPureGoKernelAlwaysBuilt(t *testing.T) {
	have := map[string]bool{}
	for _, k := range Kernels() {
		have[k] = true
	}
	if !have[KernelGo] || !have[KernelGonum] {
		t.Fatalf("Kernels() = %v, want %s and %s among them", Kernels(), KernelGo, KernelGonum)
	}
}

func TestUseKernelUnknown(t *testing.T) {
	if err := UseKernel("no-such-kernel"); err == nil {
		t.Fatal("UseKernel accepted an unknown name")
	}
}

// TestGradientEveryKernel checks a whole training step on every kernel
// against the gonum path (the kernels differ only in summation order) and
// that it stays allocation-free.
func TestGradientEveryKernel(t *testing.T) {
	old := KernelName()
	defer UseKernel(old)
	for _, preset := range []string{"mnist-mlp", "mnist-cnn"} {
		spec, _ := Preset(preset)
		m, err := NewModel(spec)
		if err != nil {
			t.Fatal(err)
		}
		r := rand.New(rand.NewPCG(*seed, 11))
		params := make([]float32, m.NumParams)
		m.Init(params, 3)
		x, labels := randomData(r, m, 13)
		ws := m.NewWorkspace(16)
		if err := UseKernel(KernelGonum); err != nil {
			t.Fatal(err)
		}
		want := make([]float32, m.NumParams)
		wantLoss, _ := m.Gradient(ws, params, x, labels, want)
		for _, name := range Kernels() {
			if err := UseKernel(name); err != nil {
				t.Fatal(err)
			}
			got := make([]float32, m.NumParams)
			loss, _ := m.Gradient(ws, params, x, labels, got)
			if math.Abs(loss-wantLoss) > 1e-5*math.Abs(wantLoss) {
				t.Errorf("%s %s: loss %g, gonum %g", preset, name, loss, wantLoss)
			}
			if d := relDiff(got, want); d > 1e-5 {
				t.Errorf("%s %s: gradient differs from gonum's by %g relative (want <= 1e-5)", preset, name, d)
			}
			if a := testing.AllocsPerRun(3, func() { m.Gradient(ws, params, x, labels, got) }); a != 0 {
				t.Errorf("%s %s: Gradient allocates %v times per call", preset, name, a)
			}
		}
	}
}

// relDiff is ‖a−b‖/‖b‖.
func relDiff(a, b []float32) float64 {
	var num, den float64
	for i := range a {
		d := float64(a[i]) - float64(b[i])
		num += d * d
		den += float64(b[i]) * float64(b[i])
	}
	return math.Sqrt(num / den)
}

// A workspace pinned to a kernel computes on it whatever the process's
// kernel is: bit for bit what that kernel gives when it is the process's,
// and unmoved by UseKernel. An unknown name is an error naming the kernels.
func TestPinKernel(t *testing.T) {
	old := KernelName()
	defer UseKernel(old)
	spec, _ := Preset("mnist-cnn")
	m, err := NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(*seed, 12))
	params := make([]float32, m.NumParams)
	m.Init(params, 3)
	x, labels := randomData(r, m, 9)
	if err := UseKernel(KernelGo); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, m.NumParams)
	m.Gradient(m.NewWorkspace(9), params, x, labels, want)
	pinned := m.NewWorkspace(9)
	if err := pinned.PinKernel(KernelGo); err != nil {
		t.Fatal(err)
	}
	var other bool
	for _, name := range Kernels() {
		if err := UseKernel(name); err != nil {
			t.Fatal(err)
		}
		got := make([]float32, m.NumParams)
		m.Gradient(pinned, params, x, labels, got)
		for i := range want {
			if math.Float32bits(got[i]) != math.Float32bits(want[i]) {
				t.Fatalf("pinned to go while %s is in use: gradient[%d] = %v, the go kernel's %v", name, i, got[i], want[i])
			}
		}
		if name != KernelGo {
			free := make([]float32, m.NumParams)
			m.Gradient(m.NewWorkspace(9), params, x, labels, free)
			other = other || relDiff(free, want) > 0
		}
	}
	if !other {
		t.Log("no kernel here rounds differently from go: the pin was not put to the test")
	}
	if err := pinned.PinKernel("no-such-kernel"); err == nil || !strings.Contains(err.Error(), KernelGo) {
		t.Errorf("PinKernel of an unknown name: %v, want an error listing the kernels", err)
	}
}
