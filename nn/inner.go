package nn

import (
	"fmt"
	"math"
)

// AdamW is the inner optimizer AdamW (Loshchilov & Hutter 2019, as
// PyTorch's torch.optim.AdamW computes it) on flat vectors. Step t (from 1):
//
//	w -= lr*wd*w                       (decoupled weight decay)
//	m  = b1*m + (1-b1)*g
//	v  = b2*v + (1-b2)*g²
//	w -= lr * (m/(1-b1^t)) / (sqrt(v/(1-b2^t)) + eps)
//
// A worker runs one per lease and resets it before each: volunteers come
// and go, so no optimizer state outlives a task. The zero value is ready
// after Reset; its buffers are reused across leases.
type AdamW struct {
	LR, WeightDecay, Beta1, Beta2, Epsilon float32
	// ClipNorm (0 = off) scales grad by ClipScale before the step, in
	// place.
	ClipNorm float32

	m, v  []float32
	steps int
}

// Reset clears the moments and the step count for vectors of n values.
func (o *AdamW) Reset(n int) {
	if cap(o.m) < n {
		o.m, o.v = make([]float32, n), make([]float32, n)
	}
	o.m, o.v = o.m[:n], o.v[:n]
	clear(o.m)
	clear(o.v)
	o.steps = 0
}

// AdamWScales returns the bias corrections of step t (from 1):
// c1 = 1/(1-b1^t) and c2 = 1/sqrt(1-b2^t), computed in float64 because
// b2^t stays close to 1 for many steps. The GPU kernel takes them from
// here, so both paths round the same way.
func AdamWScales(t int, b1, b2 float32) (c1, c2 float32) {
	c1 = float32(1 / (1 - math.Pow(float64(b1), float64(t))))
	c2 = float32(1 / math.Sqrt(1-math.Pow(float64(b2), float64(t))))
	return c1, c2
}

// Step applies one AdamW step to params from grad, clipping grad in place
// first when ClipNorm > 0. It allocates nothing.
func (o *AdamW) Step(params, grad []float32) {
	checkLens("AdamW.Step", len(params), len(grad))
	if len(params) != len(o.m) {
		panic(fmt.Sprintf("nn: AdamW.Step: len(params) = %d, Reset for %d", len(params), len(o.m)))
	}
	ClipInPlace(grad, float64(o.ClipNorm))
	o.steps++
	c1, c2 := AdamWScales(o.steps, o.Beta1, o.Beta2)
	AdamWUpdate(params, grad, o.m, o.v, o.LR, o.WeightDecay, o.Beta1, o.Beta2, o.Epsilon, c1, c2)
}

// AdamWUpdate is one AdamW step with given bias corrections c1 and c2 (see
// AdamWScales), element by element in the order the GPU kernel adamw_step
// uses.
func AdamWUpdate(w, g, m, v []float32, lr, wd, b1, b2, eps, c1, c2 float32) {
	n := len(w)
	g, m, v = g[:n], m[:n], v[:n]
	decay := lr * wd
	a1, a2 := 1-b1, 1-b2
	for i, gi := range g {
		wi := w[i] - decay*w[i]
		mi := b1*m[i] + a1*gi
		vi := b2*v[i] + a2*gi*gi
		m[i], v[i] = mi, vi
		w[i] = wi - lr*(mi*c1)/(float32(math.Sqrt(float64(vi)))*c2+eps)
	}
}

// ClipInPlace multiplies g by ClipScale(g, c): the inner optimizers' clip
// (c = 0: nothing).
func ClipInPlace(g []float32, c float64) {
	if s := ClipScale(g, c); s != 1 {
		for i := range g {
			g[i] *= s
		}
	}
}
