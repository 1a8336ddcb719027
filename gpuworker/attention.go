//go:build linux || windows

package gpuworker

import (
	"math"

	"github.com/crowdtrain/crowdtrain/gpuworker/cuda"
)

// attention is multi-head self-attention on n examples of t positions of
// d values, as torch.nn.MultiheadAttention(d, heads, batch_first=True):
// qkv = x·Winᵀ + bin (q, k and v are its three blocks of d columns), per
// example and head the scores q·kᵀ/sqrt(d/heads), masked when causal,
// softmax, times v; the heads side by side, ·Woutᵀ + bout. Every product
// is a cuBLAS GEMM: the projections over all n*t rows at once, the scores
// and the weighted sums one strided-batched GEMM per head over the n
// examples, reading a head's columns in place (row stride 3d), so no
// kernel rearranges the heads.
type attention struct {
	n, t, d, heads int
	causal         bool
	// Parameters: Win [3d×d], bin [3d], Wout [d×d], bout [d], and their
	// gradients, at the same offsets in the gradient vector.
	win, bin, wout, bout     cuda.DevicePtr
	gwin, gbin, gwout, gbout cuda.DevicePtr
	// Kept from forward for backward: qkv [n*t×3d], the attention weights
	// probs [n, heads, t, t] and the heads' outputs ctx [n*t×d].
	qkv, probs, ctx cuda.DevicePtr
}

// attentionScratch is what backward needs only while it runs, shared by
// every attention layer: dctx [n*t×d], dprobs [n, heads, t, t] and dqkv
// [n*t×3d].
type attentionScratch struct {
	dctx, dprobs, dqkv cuda.DevicePtr
}

func (a *attention) headSize() int { return a.d / a.heads }

// Floats of each buffer, for n examples.
func (a *attention) qkvSize() int   { return a.n * a.t * 3 * a.d }
func (a *attention) probsSize() int { return a.n * a.heads * a.t * a.t }
func (a *attention) ctxSize() int   { return a.n * a.t * a.d }

// forward writes out [n*t×d] from x [n*t×d].
func (a *attention) forward(b *Backend, x, out cuda.DevicePtr) error {
	n, t, d, H, hs := a.n, a.t, a.d, a.heads, a.headSize()
	rows, d3 := n*t, 3*d
	if err := b.blas.GemmRowMajor(false, true, rows, d3, d, 1, x, d, a.win, d, 0, a.qkv, d3); err != nil {
		return err
	}
	if err := b.launch("add_bias", rows*d3, a.qkv, a.bin, rows, d3); err != nil {
		return err
	}
	for h := range H {
		q, k := off(a.qkv, h*hs), off(a.qkv, d+h*hs)
		// scores_{e,h} [t×t] = q_{e,h} · k_{e,h}ᵀ, into probs
		if err := b.blas.GemmStridedBatchedRowMajor(false, true, t, t, hs, 1, q, d3, t*d3, k, d3, t*d3, 0, off(a.probs, h*t*t), t, H*t*t, n); err != nil {
			return err
		}
	}
	scale := float32(1 / math.Sqrt(float64(hs)))
	if err := b.launchRows("attention_softmax", n*H*t, a.probs, a.probs, n*H*t, t, scale, boolInt(a.causal)); err != nil {
		return err
	}
	for h := range H {
		v := off(a.qkv, 2*d+h*hs)
		// ctx_{e,h} [t×hs] = probs_{e,h} · v_{e,h}, into head h's columns
		if err := b.blas.GemmStridedBatchedRowMajor(false, false, t, hs, t, 1, off(a.probs, h*t*t), t, H*t*t, v, d3, t*d3, 0, off(a.ctx, h*hs), d, t*d, n); err != nil {
			return err
		}
	}
	if err := b.blas.GemmRowMajor(false, true, rows, d, d, 1, a.ctx, d, a.wout, d, 0, out, d); err != nil {
		return err
	}
	return b.launch("add_bias", rows*d, out, a.bout, rows, d)
}

// backward writes the parameters' gradients and, when dx is not 0, the
// input's gradient dx [n*t×d], from dout [n*t×d] and x, the forward input.
func (a *attention) backward(b *Backend, s attentionScratch, x, dout, dx cuda.DevicePtr) error {
	n, t, d, H, hs := a.n, a.t, a.d, a.heads, a.headSize()
	rows, d3 := n*t, 3*d
	// dWout [d×d] = doutᵀ · ctx; dbout = column sums of dout
	if err := b.blas.GemmRowMajor(true, false, d, d, rows, 1, dout, d, a.ctx, d, 0, a.gwout, d); err != nil {
		return err
	}
	if err := b.launchGrid("column_sums", d, 256, dout, a.gbout, rows, d); err != nil {
		return err
	}
	// dctx = dout · Wout
	if err := b.blas.GemmRowMajor(false, false, rows, d, d, 1, dout, d, a.wout, d, 0, s.dctx, d); err != nil {
		return err
	}
	for h := range H {
		v, dv := off(a.qkv, 2*d+h*hs), off(s.dqkv, 2*d+h*hs)
		dctx, p, dp := off(s.dctx, h*hs), off(a.probs, h*t*t), off(s.dprobs, h*t*t)
		// dprobs_{e,h} [t×t] = dctx_{e,h} · v_{e,h}ᵀ
		if err := b.blas.GemmStridedBatchedRowMajor(false, true, t, t, hs, 1, dctx, d, t*d, v, d3, t*d3, 0, dp, t, H*t*t, n); err != nil {
			return err
		}
		// dv_{e,h} [t×hs] = probs_{e,h}ᵀ · dctx_{e,h}
		if err := b.blas.GemmStridedBatchedRowMajor(true, false, t, hs, t, 1, p, t, H*t*t, dctx, d, t*d, 0, dv, d3, t*d3, n); err != nil {
			return err
		}
	}
	// The raw scores' gradient, in place (the scale is in it).
	scale := float32(1 / math.Sqrt(float64(hs)))
	if err := b.launchRows("attention_softmax_backward", n*H*t, a.probs, s.dprobs, s.dprobs, n*H*t, t, scale); err != nil {
		return err
	}
	for h := range H {
		q, k := off(a.qkv, h*hs), off(a.qkv, d+h*hs)
		dq, dk, ds := off(s.dqkv, h*hs), off(s.dqkv, d+h*hs), off(s.dprobs, h*t*t)
		// dq_{e,h} = ds_{e,h} · k_{e,h}; dk_{e,h} = ds_{e,h}ᵀ · q_{e,h}
		if err := b.blas.GemmStridedBatchedRowMajor(false, false, t, hs, t, 1, ds, t, H*t*t, k, d3, t*d3, 0, dq, d3, t*d3, n); err != nil {
			return err
		}
		if err := b.blas.GemmStridedBatchedRowMajor(true, false, t, hs, t, 1, ds, t, H*t*t, q, d3, t*d3, 0, dk, d3, t*d3, n); err != nil {
			return err
		}
	}
	// dWin [3d×d] = dqkvᵀ · x; dbin = column sums of dqkv
	if err := b.blas.GemmRowMajor(true, false, d3, d, rows, 1, s.dqkv, d3, x, d, 0, a.gwin, d); err != nil {
		return err
	}
	if err := b.launchGrid("column_sums", d3, 256, s.dqkv, a.gbin, rows, d3); err != nil {
		return err
	}
	if dx == 0 {
		return nil
	}
	// dx = dqkv · Win
	return b.blas.GemmRowMajor(false, false, rows, d, d3, 1, s.dqkv, d3, a.win, d, 0, dx, d)
}

func boolInt(v bool) int {
	if v {
		return 1
	}
	return 0
}
