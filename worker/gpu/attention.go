package gpu

import (
	"fmt"
	"math"

	"github.com/crowdtrain/crowdtrain/nn"
)

// Attention is multi-head self-attention on N examples of T positions of
// D values, as torch.nn.MultiheadAttention(D, Heads, batch_first=True):
// qkv = x·Winᵀ + bin (q, k and v are its three blocks of D columns), per
// example and head the scores q·kᵀ/sqrt(D/Heads), masked when causal,
// softmax, times v; the heads side by side, ·Woutᵀ + bout. Every product
// is a GEMM: the projections over all N*T rows at once, the scores and
// the weighted sums one strided-batched GEMM per head over the N
// examples, reading a head's columns in place (row stride 3D), so no
// kernel rearranges the heads.
//
// It is exported for the backends' tests, which check it against a
// reference on their devices; the executor builds one per attention
// layer.
type Attention struct {
	N, T, D, Heads int
	Causal         bool
	// Parameters: Win [3D×D], bin [3D], Wout [D×D], bout [D], and their
	// gradients.
	Win, Bin, Wout, Bout     Ptr
	GWin, GBin, GWout, GBout Ptr
	// Kept from Forward for Backward: QKV [N*T×3D], the attention weights
	// Probs [N, Heads, T, T] and the heads' outputs Ctx [N*T×D].
	QKV, Probs, Ctx Ptr
}

// AttentionScratch is what Backward needs only while it runs, shared by
// every attention layer: DCtx [N*T×D], DProbs [N, Heads, T, T] and DQKV
// [N*T×3D].
type AttentionScratch struct {
	DCtx, DProbs, DQKV Ptr
}

func (a *Attention) headSize() int { return a.D / a.Heads }

// QKVSize, ProbsSize and CtxSize are the floats of each buffer.
func (a *Attention) QKVSize() int   { return a.N * a.T * 3 * a.D }
func (a *Attention) ProbsSize() int { return a.N * a.Heads * a.T * a.T }
func (a *Attention) CtxSize() int   { return a.N * a.T * a.D }

// Forward writes out [N*T×D] from x [N*T×D].
func (a *Attention) Forward(dev Device, x, out Ptr) error {
	n, t, d, H, hs := a.N, a.T, a.D, a.Heads, a.headSize()
	rows, d3 := n*t, 3*d
	if err := dev.Gemm(false, true, rows, d3, d, 1, x, d, 0, a.Win, d, 0, 0, a.QKV, d3, 0, 1); err != nil {
		return err
	}
	if err := dev.Launch("add_bias", rows*d3, a.QKV, a.Bin, rows, d3); err != nil {
		return err
	}
	for h := range H {
		q, k := Off(a.QKV, h*hs), Off(a.QKV, d+h*hs)
		// scores_{e,h} [t×t] = q_{e,h} · k_{e,h}ᵀ, into probs
		if err := dev.Gemm(false, true, t, t, hs, 1, q, d3, t*d3, k, d3, t*d3, 0, Off(a.Probs, h*t*t), t, H*t*t, n); err != nil {
			return err
		}
	}
	scale := float32(1 / math.Sqrt(float64(hs)))
	if err := dev.LaunchRows("attention_softmax", n*H*t, a.Probs, a.Probs, n*H*t, t, scale, boolInt(a.Causal)); err != nil {
		return err
	}
	for h := range H {
		v := Off(a.QKV, 2*d+h*hs)
		// ctx_{e,h} [t×hs] = probs_{e,h} · v_{e,h}, into head h's columns
		if err := dev.Gemm(false, false, t, hs, t, 1, Off(a.Probs, h*t*t), t, H*t*t, v, d3, t*d3, 0, Off(a.Ctx, h*hs), d, t*d, n); err != nil {
			return err
		}
	}
	if err := dev.Gemm(false, true, rows, d, d, 1, a.Ctx, d, 0, a.Wout, d, 0, 0, out, d, 0, 1); err != nil {
		return err
	}
	return dev.Launch("add_bias", rows*d, out, a.Bout, rows, d)
}

// Backward writes the parameters' gradients and, when dx is not 0, the
// input's gradient dx [N*T×D], from dout [N*T×D] and x, the forward
// input.
func (a *Attention) Backward(dev Device, s AttentionScratch, x, dout, dx Ptr) error {
	n, t, d, H, hs := a.N, a.T, a.D, a.Heads, a.headSize()
	rows, d3 := n*t, 3*d
	// dWout [d×d] = doutᵀ · ctx; dbout = column sums of dout
	if err := dev.Gemm(true, false, d, d, rows, 1, dout, d, 0, a.Ctx, d, 0, 0, a.GWout, d, 0, 1); err != nil {
		return err
	}
	if err := dev.LaunchBlocks("column_sums", d, dout, a.GBout, rows, d); err != nil {
		return err
	}
	// dctx = dout · Wout
	if err := dev.Gemm(false, false, rows, d, d, 1, dout, d, 0, a.Wout, d, 0, 0, s.DCtx, d, 0, 1); err != nil {
		return err
	}
	for h := range H {
		v, dv := Off(a.QKV, 2*d+h*hs), Off(s.DQKV, 2*d+h*hs)
		dctx, p, dp := Off(s.DCtx, h*hs), Off(a.Probs, h*t*t), Off(s.DProbs, h*t*t)
		// dprobs_{e,h} [t×t] = dctx_{e,h} · v_{e,h}ᵀ
		if err := dev.Gemm(false, true, t, t, hs, 1, dctx, d, t*d, v, d3, t*d3, 0, dp, t, H*t*t, n); err != nil {
			return err
		}
		// dv_{e,h} [t×hs] = probs_{e,h}ᵀ · dctx_{e,h}
		if err := dev.Gemm(true, false, t, hs, t, 1, p, t, H*t*t, dctx, d, t*d, 0, dv, d3, t*d3, n); err != nil {
			return err
		}
	}
	// The raw scores' gradient, in place (the scale is in it).
	scale := float32(1 / math.Sqrt(float64(hs)))
	if err := dev.LaunchRows("attention_softmax_backward", n*H*t, a.Probs, s.DProbs, s.DProbs, n*H*t, t, scale); err != nil {
		return err
	}
	for h := range H {
		q, k := Off(a.QKV, h*hs), Off(a.QKV, d+h*hs)
		dq, dk, ds := Off(s.DQKV, h*hs), Off(s.DQKV, d+h*hs), Off(s.DProbs, h*t*t)
		// dq_{e,h} = ds_{e,h} · k_{e,h}; dk_{e,h} = ds_{e,h}ᵀ · q_{e,h}
		if err := dev.Gemm(false, false, t, hs, t, 1, ds, t, H*t*t, k, d3, t*d3, 0, dq, d3, t*d3, n); err != nil {
			return err
		}
		if err := dev.Gemm(true, false, t, hs, t, 1, ds, t, H*t*t, q, d3, t*d3, 0, dk, d3, t*d3, n); err != nil {
			return err
		}
	}
	// dWin [3d×d] = dqkvᵀ · x; dbin = column sums of dqkv
	if err := dev.Gemm(true, false, d3, d, rows, 1, s.DQKV, d3, 0, x, d, 0, 0, a.GWin, d, 0, 1); err != nil {
		return err
	}
	if err := dev.LaunchBlocks("column_sums", d3, s.DQKV, a.GBin, rows, d3); err != nil {
		return err
	}
	if dx == 0 {
		return nil
	}
	// dx = dqkv · Win
	return dev.Gemm(false, false, rows, d, d3, 1, s.DQKV, d3, 0, a.Win, d, 0, 0, dx, d, 0, 1)
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}

// attentionLayer is an attention layer: its Attention, pointed at each
// call's batch and tensors, and the scratch every attention layer shares.
type attentionLayer struct {
	*layer
	att                 Attention
	dctx, dprobs, dqkvs *Ptr
}

func init() {
	register(nn.TypeAttention, layerType{build: func(bl *builder, l *layer, _ bool) (layerOps, error) {
		if l.InKind != "sequence" || l.Heads < 1 || l.InShape[1]%l.Heads != 0 {
			return nil, fmt.Errorf("layer %s: attention with %d heads on %s input %v", l.name, l.Heads, l.InKind, l.InShape)
		}
		a := Attention{N: bl.maxBatch, T: l.InShape[0], D: l.InShape[1], Heads: l.Heads, Causal: l.Causal}
		a.QKV, a.Probs, a.Ctx = bl.alloc(a.QKVSize()), bl.alloc(a.ProbsSize()), bl.alloc(a.CtxSize())
		return &attentionLayer{layer: l, att: a,
			dctx: bl.shared("attention.dctx", a.CtxSize()), dprobs: bl.shared("attention.dprobs", a.ProbsSize()),
			dqkvs: bl.shared("attention.dqkv", a.QKVSize())}, nil
	}})
}

// at points the layer's attention at this pass's batch and tensors.
func (l *attentionLayer) at(p *pass) *Attention {
	a := &l.att
	a.N = p.n
	a.Win, a.Bin, a.Wout, a.Bout = p.wAt(l.WeightOffset), p.wAt(l.BiasOffset), p.wAt(l.OutWeightOffset), p.wAt(l.OutBiasOffset)
	a.GWin, a.GBin, a.GWout, a.GBout = p.gAt(l.WeightOffset), p.gAt(l.BiasOffset), p.gAt(l.OutWeightOffset), p.gAt(l.OutBiasOffset)
	return a
}

func (l *attentionLayer) forward(p *pass, st *stack, i int) error {
	return l.at(p).Forward(p.dev, st.acts[i], st.acts[i+1])
}

func (l *attentionLayer) backward(p *pass, st *stack, i int) error {
	s := AttentionScratch{DCtx: *l.dctx, DProbs: *l.dprobs, DQKV: *l.dqkvs}
	return l.at(p).Backward(p.dev, s, st.acts[i], st.dacts[i+1], st.dacts[i])
}
