package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

func TestErf32AndExp32(t *testing.T) {
	var maxErf, maxExp float64
	for i := -800000; i <= 800000; i++ {
		x := float32(i) * 1e-5
		maxErf = max(maxErf, math.Abs(float64(erf32(x))-math.Erf(float64(x))))
	}
	for i := -873000; i <= 0; i++ {
		x := float32(i) * 1e-4
		want := math.Exp(float64(x))
		maxExp = max(maxExp, math.Abs(float64(exp32(x))-want)/want)
	}
	if maxErf > 5e-7 {
		t.Errorf("erf32: absolute error up to %g, want <= 5e-7", maxErf)
	}
	if maxExp > 2e-7 {
		t.Errorf("exp32: relative error up to %g, want <= 2e-7", maxExp)
	}
	if v := exp32(-1000); v <= 0 || v > 1e-37 {
		t.Errorf("exp32(-1000) = %g, want a tiny positive value", v)
	}
}

// vectorWidths runs f at each vector width this machine has (16, 8) and
// with the Go loops (0), leaving the widest set after.
func vectorWidths(t *testing.T, f func(t *testing.T)) {
	defer setMathVector(16)
	for _, w := range []int{16, 8, 0} {
		if setMathVector(w) != w {
			continue
		}
		t.Run(fmt.Sprintf("width-%d", w), f)
	}
}

// The GELU and its gradient against float64 math, on every vector path
// and the scalar one (lengths that leave a tail), over the range a
// network sees and far beyond it.
func TestGELU(t *testing.T) { vectorWidths(t, testGELU) }

func testGELU(t *testing.T) {
	r := rand.New(rand.NewPCG(*seed, 3))
	for _, n := range []int{1, 7, 8, 9, 15, 16, 17, 100, 1000} {
		in := make([]float32, n)
		dOut := make([]float32, n)
		for i := range in {
			switch i % 4 {
			case 0:
				in[i] = float32(r.NormFloat64())
			case 1:
				in[i] = float32(r.NormFloat64() * 5)
			case 2:
				in[i] = float32(r.Float64()*200 - 100)
			default:
				in[i] = float32(r.NormFloat64() * 1e-3)
			}
			dOut[i] = float32(r.NormFloat64())
		}
		out := make([]float32, n)
		dIn := make([]float32, n)
		geluForward(in, out)
		geluBackward(in, dOut, dIn)
		for i, v := range in {
			x := float64(v)
			cdf := 0.5 * (1 + math.Erf(x/math.Sqrt2))
			want := x * cdf
			if d := math.Abs(float64(out[i]) - want); d > 1e-6*max(1, math.Abs(want)) {
				t.Fatalf("n=%d: gelu(%g) = %g, want %g", n, x, out[i], want)
			}
			wantD := float64(dOut[i]) * (cdf + x*math.Exp(-x*x/2)/math.Sqrt(2*math.Pi))
			if d := math.Abs(float64(dIn[i]) - wantD); d > 1e-6*max(1, math.Abs(float64(dOut[i]))) {
				t.Fatalf("n=%d: gelu'(%g)·%g = %g, want %g", n, x, dOut[i], dIn[i], wantD)
			}
		}
	}
}

// The browser build runs the scalar GELU and exp; a transformer's
// gradient with the vector kernels must stay within the 1e-6 that the
// browser and native builds are held to.
func TestVectorGELUKeepsTheBrowsersNumbers(t *testing.T) {
	defer setMathVector(16)
	ran := false
	for _, w := range []int{16, 8} {
		if setMathVector(w) != w {
			continue
		}
		ran = true
		t.Run(fmt.Sprintf("width-%d", w), func(t *testing.T) { testVectorGELUKeepsTheBrowsersNumbers(t, w) })
	}
	if !ran {
		t.Skip("no vector GELU in this build or on this CPU")
	}
}

func testVectorGELUKeepsTheBrowsersNumbers(t *testing.T, width int) {
	m := mustPreset(t, "charlm-tiny")
	r := rand.New(rand.NewPCG(*seed, 5))
	params := make([]float32, m.NumParams)
	m.Init(params, 2)
	const n = 4
	x := make([]float32, n*m.InputSize)
	for i := range x {
		x[i] = float32(r.IntN(m.NumClasses))
	}
	labels := make([]int32, n*m.LabelsPerExample)
	for i := range labels {
		labels[i] = int32(r.IntN(m.NumClasses))
	}
	ws := m.NewWorkspace(n)
	vec := make([]float32, m.NumParams)
	vecLoss, _ := m.Gradient(ws, params, x, labels, vec)
	setMathVector(0)
	defer setMathVector(width)
	scalar := make([]float32, m.NumParams)
	scalarLoss, _ := m.Gradient(ws, params, x, labels, scalar)
	if d := math.Abs(vecLoss-scalarLoss) / math.Abs(scalarLoss); d > 1e-6 {
		t.Errorf("loss %v with the vector GELU, %v without (relative %g)", vecLoss, scalarLoss, d)
	}
	if d := relDiff(vec, scalar); d > 1e-6 {
		t.Errorf("gradient differs by %g relative between the vector and scalar GELU", d)
	}
}

func TestExpSub(t *testing.T) { vectorWidths(t, testExpSub) }

func testExpSub(t *testing.T) {
	for _, n := range []int{1, 8, 9, 16, 33, 300} {
		x := make([]float32, n)
		for i := range x {
			x[i] = float32(i%97)*0.37 - 30
		}
		const m = 6.5
		want := make([]float64, n)
		for i, v := range x {
			want[i] = math.Exp(float64(v - m))
		}
		expSub(x, m)
		for i, v := range x {
			if d := math.Abs(float64(v)-want[i]) / want[i]; d > 2e-7 {
				t.Fatalf("n=%d: exp(x-m) at %d = %g, want %g", n, i, v, want[i])
			}
		}
	}
}
