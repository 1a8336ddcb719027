package nn

import (
	"fmt"
	"math"
)

// attentionLayer is multi-head self-attention on a sequence [t,d], as
// torch.nn.MultiheadAttention(d, heads, batch_first=True) without dropout:
// q, k, v = x·Wᵀ + b split into three blocks of d rows of
// in_proj_weight [3d, d] (in_proj_bias [3d]); each head h takes columns
// h*dh..(h+1)*dh (dh = d/heads) of q, k and v; scores q·kᵀ/√dh, with the
// causal mask position p sees 0..p; softmax over each row; the heads'
// weighted sums of v side by side are projected, out = ctx·Woᵀ + bo
// (out_proj.weight [d, d], out_proj.bias [d]).
//
// Every product runs through the GEMM kernel: the projections over all
// n*t positions of the batch at once, the scores and weighted sums per
// example and head on blocks of the packed q|k|v rows (row stride 3d).
type attentionLayer struct {
	layerBase
	t, d, heads, dh int
	causal          bool
	scale           float32
	wqOff, wqLen    int // in_proj_weight
	bqOff, bqLen    int // in_proj_bias
	woOff, woLen    int // out_proj.weight
	boOff, boLen    int // out_proj.bias
}

func init() {
	registerLayer(TypeAttention, []string{"heads", "causal"}, resolveAttention)
}

func resolveAttention(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
	if cur.kind != shapeSeq {
		return nil, fmt.Errorf("needs a sequence [t,d] but gets %s %v; put an embedding layer before it", kindName(cur), cur)
	}
	if ls.Heads < 1 {
		return nil, fmt.Errorf("heads must be >= 1, got %d", ls.Heads)
	}
	if cur.d%ls.Heads != 0 {
		return nil, fmt.Errorf("heads %d does not divide the width %d; each head takes d/heads values", ls.Heads, cur.d)
	}
	if int64(ls.Heads)*int64(cur.t)*int64(cur.t) > maxActivation {
		return nil, fmt.Errorf("%d heads of %dx%d scores is too large (at most %d values per example in one tensor)", ls.Heads, cur.t, cur.t, maxActivation)
	}
	d := cur.d
	l := &attentionLayer{t: cur.t, d: d, heads: ls.Heads, dh: d / ls.Heads, causal: ls.Causal}
	l.scale = float32(1 / math.Sqrt(float64(l.dh)))
	l.out = cur
	var err error
	// in_proj_weight as PyTorch: Xavier-uniform over [3d, d].
	if l.wqOff, l.wqLen, err = r.tensor(&l.layerBase, "in_proj_weight", []int{3 * d, d}, initUniform, math.Sqrt(6/float64(4*d))); err != nil {
		return nil, err
	}
	if l.bqOff, l.bqLen, err = r.tensor(&l.layerBase, "in_proj_bias", []int{3 * d}, initZero, 0); err != nil {
		return nil, err
	}
	// out_proj.weight as PyTorch's nn.Linear (linearUniform).
	if l.woOff, l.woLen, err = r.tensor(&l.layerBase, "out_proj.weight", []int{d, d}, initUniform, linearUniform(d)); err != nil {
		return nil, err
	}
	if l.boOff, l.boLen, err = r.tensor(&l.layerBase, "out_proj.bias", []int{d}, initZero, 0); err != nil {
		return nil, err
	}
	return l, nil
}

// attentionState keeps, for the batch: q|k|v per position [n*t, 3d], the
// attention probabilities per example and head [n, heads, t, t], the heads'
// outputs [n*t, d]; and, shared by every attention layer of the model (they
// live only during one layer's backward pass), the gradients of q|k|v and
// of the heads' outputs.
type attentionState struct {
	qkv, probs, ctx []float32
	dqkv, dctx      []float32
	dp              []float32 // one t×t block of score gradients
}

func (l *attentionLayer) newState(b *wsBuilder, maxBatch int) any {
	rows := maxBatch * l.t
	s := &attentionState{
		qkv:   b.floats(rows * 3 * l.d),
		probs: b.floats(maxBatch * l.heads * l.t * l.t),
		ctx:   b.floats(rows * l.d),
	}
	b.shared("attention dqkv", &s.dqkv, rows*3*l.d)
	b.shared("attention dctx", &s.dctx, rows*l.d)
	b.shared("attention dp", &s.dp, l.t*l.t)
	return s
}

// seedBias writes b into each of the rows rows of out (row length len(b)).
func seedBias(out, b []float32, rows int) {
	D := len(b)
	for r := 0; r < rows; r++ {
		copy(out[r*D:(r+1)*D], b)
	}
}

// sumRows writes the sum of the rows rows of x (row length len(dst)) to dst.
func sumRows(dst, x []float32, rows int) {
	D := len(dst)
	copy(dst, x[:D])
	for r := 1; r < rows; r++ {
		addTo(dst, x[r*D:(r+1)*D])
	}
}

func (l *attentionLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	s := st.(*attentionState)
	T, D, H, Dh := l.t, l.d, l.heads, l.dh
	rows := n * T
	D3 := 3 * D
	qkv := s.qkv[:rows*D3]
	seedBias(qkv, params[l.bqOff:l.bqOff+l.bqLen], rows)
	gemm(c.gemm, false, true, rows, D3, D, 1, in, D, params[l.wqOff:l.wqOff+l.wqLen], D, 1, qkv, D3)
	ctx := s.ctx[:rows*D]
	B := l.block()
	for e := 0; e < n; e++ {
		base := e * T * D3
		for h := 0; h < H; h++ {
			p := s.probs[(e*H+h)*T*T : (e*H+h+1)*T*T]
			q, k, v := qkv[base+h*Dh:], qkv[base+D+h*Dh:], qkv[base+2*D+h*Dh:]
			cx := ctx[e*T*D+h*Dh:]
			// Rows r0..r1 see columns 0..c1: all of them, or with the
			// causal mask only up to the block's last row.
			for r0 := 0; r0 < T; r0 += B {
				r1 := min(r0+B, T)
				c1 := T
				if l.causal {
					c1 = r1
				}
				// scores = scale · q·kᵀ
				gemm(c.gemm, false, true, r1-r0, c1, Dh, l.scale, q[r0*D3:], D3, k, D3, 0, p[r0*T:], T)
				softmaxRows(p, r0, r1, T, l.causal)
				// ctx_h = probs · v
				gemm(c.gemm, false, false, r1-r0, Dh, c1, 1, p[r0*T:], T, v, D3, 0, cx[r0*D:], D)
			}
		}
	}
	seedBias(out[:rows*D], params[l.boOff:l.boOff+l.boLen], rows)
	gemm(c.gemm, false, true, rows, D, D, 1, ctx, D, params[l.woOff:l.woOff+l.woLen], D, 1, out, D)
}

// block is the number of rows of scores computed per GEMM. With the causal
// mask, a block of rows needs only the columns up to its last row, so
// blocks skip most of the masked half.
func (l *attentionLayer) block() int {
	if !l.causal {
		return l.t
	}
	return min(l.t, attentionBlock)
}

// attentionBlock is the block of rows of causal attention (a variable so
// tests can check uneven blocks).
var attentionBlock = 32

// softmaxRows replaces rows r0..r1 of the T×T scores p by their softmax;
// with causal, row i covers columns 0..i and the rest are set to zero. Sums
// run in float64.
func softmaxRows(p []float32, r0, r1, T int, causal bool) {
	for i := r0; i < r1; i++ {
		row := p[i*T : (i+1)*T]
		valid := row
		if causal {
			valid = row[:i+1]
			clear(row[i+1:])
		}
		mx := valid[0]
		for _, v := range valid {
			mx = max(mx, v)
		}
		expSub(valid, mx) // 16 at a time where AVX-512 is (kernel_math.go)
		var sum float64
		for _, v := range valid {
			sum += float64(v)
		}
		inv := float32(1 / sum)
		for j := range valid {
			valid[j] *= inv
		}
	}
}

func (l *attentionLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	s := st.(*attentionState)
	T, D, H, Dh := l.t, l.d, l.heads, l.dh
	rows := n * T
	D3 := 3 * D
	qkv, ctx := s.qkv[:rows*D3], s.ctx[:rows*D]
	dqkv, dctx := s.dqkv[:rows*D3], s.dctx[:rows*D]
	// Output projection: dWo = dOutᵀ·ctx, dbo = Σ dOut, dctx = dOut·Wo.
	gemm(c.gemm, true, false, D, D, rows, 1, dOut, D, ctx, D, 0, grad[l.woOff:l.woOff+l.woLen], D)
	sumRows(grad[l.boOff:l.boOff+l.boLen], dOut, rows)
	gemm(c.gemm, false, false, rows, D, D, 1, dOut, D, params[l.woOff:l.woOff+l.woLen], D, 0, dctx, D)
	dp := s.dp[:T*T]
	B := l.block()
	for e := 0; e < n; e++ {
		base := e * T * D3
		for h := 0; h < H; h++ {
			p := s.probs[(e*H+h)*T*T : (e*H+h+1)*T*T]
			q, k, v := qkv[base+h*Dh:], qkv[base+D+h*Dh:], qkv[base+2*D+h*Dh:]
			dq, dk, dv := dqkv[base+h*Dh:], dqkv[base+D+h*Dh:], dqkv[base+2*D+h*Dh:]
			dc := dctx[e*T*D+h*Dh:]
			// By blocks of rows: dprobs = dctx_h·vᵀ, turned into the
			// scores' gradient dS in place; dq = scale·dS·k.
			for r0 := 0; r0 < T; r0 += B {
				r1 := min(r0+B, T)
				c1 := T
				if l.causal {
					c1 = r1
				}
				gemm(c.gemm, false, true, r1-r0, c1, Dh, 1, dc[r0*D:], D, v, D3, 0, dp[r0*T:], T)
				softmaxBackwardRows(p, dp, r0, r1, T, l.causal)
				gemm(c.gemm, false, false, r1-r0, Dh, c1, l.scale, dp[r0*T:], T, k, D3, 0, dq[r0*D3:], D3)
			}
			// By blocks of columns c0..c1, which rows c0..T see (all
			// rows without the mask): dv = probsᵀ·dctx_h, dk = scale·dSᵀ·q.
			for c0 := 0; c0 < T; c0 += B {
				c1 := min(c0+B, T)
				r0 := 0
				if l.causal {
					r0 = c0
				}
				gemm(c.gemm, true, false, c1-c0, Dh, T-r0, 1, p[r0*T+c0:], T, dc[r0*D:], D, 0, dv[c0*D3:], D3)
				gemm(c.gemm, true, false, c1-c0, Dh, T-r0, l.scale, dp[r0*T+c0:], T, q[r0*D3:], D3, 0, dk[c0*D3:], D3)
			}
		}
	}
	// Input projection: dW = dqkvᵀ·x, db = Σ dqkv, dx = dqkv·W.
	gemm(c.gemm, true, false, D3, D, rows, 1, dqkv, D3, in, D, 0, grad[l.wqOff:l.wqOff+l.wqLen], D)
	sumRows(grad[l.bqOff:l.bqOff+l.bqLen], dqkv, rows)
	if dIn != nil {
		gemm(c.gemm, false, false, rows, D, D3, 1, dqkv, D3, params[l.wqOff:l.wqOff+l.wqLen], D, 0, dIn, D)
	}
}

// softmaxBackwardRows turns rows r0..r1 of dp, the gradient of the
// probabilities p, into the gradient of the scores: dS = p ⊙ (dp - Σ_j
// dp_j p_j) per row (zero where the causal mask cut the row).
func softmaxBackwardRows(p, dp []float32, r0, r1, T int, causal bool) {
	for i := r0; i < r1; i++ {
		pr, dr := p[i*T:(i+1)*T], dp[i*T:(i+1)*T]
		if causal {
			clear(dr[i+1:])
			pr, dr = pr[:i+1], dr[:i+1]
		}
		var dot float64
		for j, v := range pr {
			dot += float64(v * dr[j])
		}
		d32 := float32(dot)
		for j, v := range pr {
			dr[j] = v * (dr[j] - d32)
		}
	}
}

func (l *attentionLayer) describe(p *LayerPlan) {
	p.WeightOffset, p.WeightSize, p.BiasOffset, p.BiasSize = l.wqOff, l.wqLen, l.bqOff, l.bqLen
	p.OutWeightOffset, p.OutWeightSize, p.OutBiasOffset, p.OutBiasSize = l.woOff, l.woLen, l.boOff, l.boLen
	p.Heads, p.Causal = l.heads, l.causal
}
