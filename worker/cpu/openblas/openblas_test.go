//go:build linux

package openblas

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
)

// mustLoad returns the library or skips, saying why: hosts without OpenBLAS
// must still pass.
func mustLoad(t *testing.T) *Library {
	t.Helper()
	l, err := Load()
	if errors.Is(err, ErrOff) {
		t.Skip(err)
	}
	if err != nil {
		t.Skipf("no OpenBLAS here (%v); install libopenblas0 to run these tests", err)
	}
	t.Logf("loaded %s (%s)", l.Path(), l.Config())
	return l
}

func TestSgemmMatchesReference(t *testing.T) {
	l := mustLoad(t)
	r := rand.New(rand.NewPCG(1, 2))
	shapes := [][3]int{{1, 1, 1}, {3, 5, 0}, {7, 17, 33}, {64, 256, 784}, {256, 784, 64}, {33, 10, 129}}
	for _, sh := range shapes {
		m, n, k := sh[0], sh[1], sh[2]
		for _, tr := range [][2]bool{{false, false}, {false, true}, {true, false}, {true, true}} {
			tA, tB := tr[0], tr[1]
			ar, ac, br, bc := m, k, k, n
			if tA {
				ar, ac = k, m
			}
			if tB {
				br, bc = n, k
			}
			lda, ldb, ldc := ac+2, bc+3, n+1
			a, b := randSlice(r, max(1, ar*lda)), randSlice(r, max(1, br*ldb))
			c := randSlice(r, m*ldc)
			want := append([]float32(nil), c...)
			ref(tA, tB, m, n, k, 0.5, a, lda, b, ldb, -1, want, ldc)
			l.Sgemm(tA, tB, m, n, k, 0.5, a, lda, b, ldb, -1, c, ldc)
			for i := range c {
				if d := math.Abs(float64(c[i] - want[i])); d > 1e-5*float64(k+4) {
					t.Fatalf("m=%d n=%d k=%d transA=%v transB=%v: C[%d] = %g, want %g", m, n, k, tA, tB, i, c[i], want[i])
				}
			}
		}
	}
}

// A training step on the OpenBLAS kernel gives the gonum path's gradient
// within float32 rounding and, once warm, allocates nothing.
func TestGradientWithOpenBLAS(t *testing.T) {
	l := mustLoad(t)
	nn.RegisterKernel(nn.KernelOpenBLAS, l.Sgemm)
	old := nn.KernelName()
	defer nn.UseKernel(old)
	for _, preset := range []string{"mnist-mlp", "mnist-cnn"} {
		spec, _ := nn.Preset(preset)
		m, err := nn.NewModel(spec)
		if err != nil {
			t.Fatal(err)
		}
		params := make([]float32, m.NumParams)
		m.Init(params, 1)
		r := rand.New(rand.NewPCG(3, 4))
		x := randSlice(r, 16*m.InputSize)
		labels := make([]int32, 16)
		for i := range labels {
			labels[i] = int32(r.IntN(m.NumClasses))
		}
		ws := m.NewWorkspace(16)
		want, got := make([]float32, m.NumParams), make([]float32, m.NumParams)
		if err := nn.UseKernel(nn.KernelGonum); err != nil {
			t.Fatal(err)
		}
		m.Gradient(ws, params, x, labels, want)
		if err := nn.UseKernel(nn.KernelOpenBLAS); err != nil {
			t.Fatal(err)
		}
		m.Gradient(ws, params, x, labels, got)
		var num, den float64
		for i := range got {
			d := float64(got[i] - want[i])
			num += d * d
			den += float64(want[i]) * float64(want[i])
		}
		if rel := math.Sqrt(num / den); rel > 1e-5 {
			t.Errorf("%s: gradient differs from gonum's by %g relative", preset, rel)
		}
		if a := testing.AllocsPerRun(5, func() { m.Gradient(ws, params, x, labels, got) }); a != 0 {
			t.Errorf("%s: Gradient allocates %v times per call with OpenBLAS", preset, a)
		}
	}
}

func ref(tA, tB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	for i := 0; i < m; i++ {
		for j := 0; j < n; j++ {
			var s float64
			for p := 0; p < k; p++ {
				ai, bi := i*lda+p, p*ldb+j
				if tA {
					ai = p*lda + i
				}
				if tB {
					bi = j*ldb + p
				}
				s += float64(a[ai]) * float64(b[bi])
			}
			c[i*ldc+j] = float32(float64(alpha)*s + float64(beta)*float64(c[i*ldc+j]))
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
