package nn

import (
	"fmt"
	"math"
)

// layerNormLayer normalises the last dimension (each position of a
// sequence, or a whole flat vector) to zero mean and unit variance (biased,
// as PyTorch), then scales and shifts it: weight [d] (init 1), bias [d]
// (init 0).
type layerNormLayer struct {
	layerBase
	eps                    float64
	rows, d                int
	wOff, wLen, bOff, bLen int
}

// DefaultLayerNormEps is the eps of a layernorm layer that gives none.
const DefaultLayerNormEps = 1e-5

func init() {
	registerLayer(TypeLayerNorm, []string{"eps"}, resolveLayerNorm)
}

func resolveLayerNorm(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
	if cur.kind != shapeSeq && cur.kind != shapeFlat {
		return nil, fmt.Errorf("needs a sequence [t,d] or a flat vector but gets %s %v", kindName(cur), cur)
	}
	l := &layerNormLayer{eps: ls.Eps, rows: cur.rows(), d: cur.cols()}
	if l.eps == 0 {
		l.eps = DefaultLayerNormEps
	}
	if math.IsNaN(l.eps) || math.IsInf(l.eps, 0) || l.eps > 1 {
		return nil, fmt.Errorf("eps must be a small positive number (default %g), got %g", DefaultLayerNormEps, ls.Eps)
	}
	l.out = cur
	var err error
	if l.wOff, l.wLen, err = r.tensor(&l.layerBase, "weight", []int{l.d}, initOne, 0); err != nil {
		return nil, err
	}
	if l.bOff, l.bLen, err = r.tensor(&l.layerBase, "bias", []int{l.d}, initZero, 0); err != nil {
		return nil, err
	}
	return l, nil
}

// layerNormState keeps the normalised input and 1/σ per row for backward.
type layerNormState struct {
	xhat, rstd []float32
}

func (l *layerNormLayer) newState(b *wsBuilder, maxBatch int) any {
	return &layerNormState{
		xhat: b.floats(maxBatch * l.rows * l.d),
		rstd: b.floats(maxBatch * l.rows),
	}
}

// Sums run in float64. Products that feed a sum are converted explicitly,
// which forbids fusing them into FMAs, so every GOARCH rounds the same.
func (l *layerNormLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	s := st.(*layerNormState)
	D := l.d
	for r := 0; r < n*l.rows; r++ {
		s.rstd[r] = l.normRow(params, in[r*D:(r+1)*D], out[r*D:(r+1)*D], s.xhat[r*D:(r+1)*D])
	}
}

// normRow normalises one row x into y, keeping x̂ in xh if it is not nil,
// and returns 1/std.
func (l *layerNormLayer) normRow(params, x, y, xh []float32) float32 {
	D := l.d
	g := params[l.wOff : l.wOff+D]
	b := params[l.bOff : l.bOff+D]
	// One pass for both sums; in float64 the cancellation in
	// E[x²] - mean² costs nothing that matters for float32 inputs.
	var sum, sq float64
	for _, v := range x {
		v64 := float64(v)
		sum += v64
		sq += float64(v64 * v64)
	}
	invD := 1 / float64(D)
	mean := sum * invD
	rstd := 1 / math.Sqrt(max(sq*invD-float64(mean*mean), 0)+l.eps)
	m32, r32 := float32(mean), float32(rstd)
	for j, v := range x {
		h := float32((v - m32) * r32)
		if xh != nil {
			xh[j] = h
		}
		y[j] = float32(h*g[j]) + b[j]
	}
	return r32
}

// backward: with ĥ = dy·g, dx = rstd·(ĥ - mean(ĥ) - x̂·mean(ĥ·x̂)).
func (l *layerNormLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	s := st.(*layerNormState)
	D := l.d
	g := params[l.wOff : l.wOff+D]
	gg := grad[l.wOff : l.wOff+D]
	gb := grad[l.bOff : l.bOff+D]
	clear(gg)
	clear(gb)
	invD := 1 / float64(D)
	for r := 0; r < n*l.rows; r++ {
		dy := dOut[r*D : (r+1)*D]
		xh := s.xhat[r*D : (r+1)*D]
		var sh, shx float64
		for j, v := range dy {
			gg[j] += float32(v * xh[j])
			gb[j] += v
			h := float32(v * g[j])
			sh += float64(h)
			shx += float64(float32(h * xh[j]))
		}
		if dIn == nil {
			continue
		}
		mh, mhx := float32(sh*invD), float32(shx*invD)
		rstd := s.rstd[r]
		dx := dIn[r*D : (r+1)*D]
		for j, v := range dy {
			h := float32(v * g[j])
			dx[j] = rstd * (h - mh - float32(xh[j]*mhx))
		}
	}
}

func (l *layerNormLayer) describe(p *LayerPlan) {
	p.WeightOffset, p.WeightSize, p.BiasOffset, p.BiasSize = l.wOff, l.wLen, l.bOff, l.bLen
	p.Eps = l.eps
}
