package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// The vector Adam (optim_amd64.s, where the CPU has AVX2) gives the Go
// loop's parameters and moments bit for bit, over several steps, with
// weight decay and gradient clipping, at every length around its 8-wide
// blocks.
func TestAdamVectorMatchesGo(t *testing.T) {
	if !adamVector {
		t.Skip("no vector Adam in this build or on this CPU (amd64 with AVX2)")
	}
	defer func(on bool) { adamVector = on }(adamVector)
	for _, n := range []int{1, 7, 8, 9, 31, 1000, 235146} {
		spec := OptimizerSpec{Type: "adamw", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8, WeightDecay: 0.01, ClipNorm: 5}
		run := func(vector bool) ([]float32, [][]float32) {
			adamVector = vector
			o, err := NewOptimizer(spec, n)
			if err != nil {
				t.Fatal(err)
			}
			rng := rand.New(rand.NewPCG(uint64(n), 1))
			p := make([]float32, n)
			for i := range p {
				p[i] = float32(rng.NormFloat64())
			}
			g := make([]float32, n)
			for step := 0; step < 4; step++ {
				for i := range g {
					g[i] = float32(rng.NormFloat64() * math.Pow(10, float64(rng.IntN(7)-3)))
				}
				g[0] = 0
				o.Step(p, g, 0.5)
			}
			st, _ := o.State()
			return p, st
		}
		pv, sv := run(true)
		pg, sg := run(false)
		for i := range pv {
			if math.Float32bits(pv[i]) != math.Float32bits(pg[i]) {
				t.Fatalf("n %d: parameter %d is %v with the vector step, %v with Go's", n, i, pv[i], pg[i])
			}
		}
		for k := range sv {
			for i := range sv[k] {
				if math.Float32bits(sv[k][i]) != math.Float32bits(sg[k][i]) {
					t.Fatalf("n %d: moment %d[%d] is %v with the vector step, %v with Go's", n, k, i, sv[k][i], sg[k][i])
				}
			}
		}
	}
}

func BenchmarkAdamStep(b *testing.B) {
	const n = 235146 // mnist-mlp
	for _, vector := range []bool{false, true} {
		name := "go"
		if vector {
			name = "vector"
		}
		b.Run(name, func(b *testing.B) {
			if vector && !adamVector {
				b.Skip("no vector Adam here")
			}
			defer func(on bool) { adamVector = on }(adamVector)
			adamVector = vector
			o, _ := NewOptimizer(OptimizerSpec{Type: "adam", LR: 1e-3, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}, n)
			p, g := make([]float32, n), make([]float32, n)
			for i := range g {
				g[i] = float32(i%13) - 6
			}
			b.SetBytes(4 * n)
			for b.Loop() {
				o.Step(p, g, 1)
			}
		})
	}
}
