package webgpu

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/nn"
)

// attentionAt points a layer's attention at this call's batch and tensors.
func (l *layer) attentionAt(n int, w, grad ptr) *attention {
	a := l.att
	a.n = n
	a.win, a.bin, a.wout, a.bout = off(w, l.WeightOffset), off(w, l.BiasOffset), off(w, l.OutWeightOffset), off(w, l.OutBiasOffset)
	a.gwin, a.gbin, a.gwout, a.gbout = off(grad, l.WeightOffset), off(grad, l.BiasOffset), off(grad, l.OutWeightOffset), off(grad, l.OutBiasOffset)
	return a
}

func (nt *net) forwardLayer(k kernels, st *stack, i int, l *layer, w ptr, n int, train bool) error {
	in, out := st.acts[i], st.acts[i+1]
	switch l.Type {
	case nn.TypeFlatten:
		st.acts[i+1] = in
		return nil
	case nn.TypeDense:
		// Per position on a sequence: n*t rows of d.
		r, I := seqRows(l.LayerPlan)
		rows, O := n*r, l.Units
		if err := k.gemm(false, true, rows, O, I, 1, in, I, 0, off(w, l.WeightOffset), I, 0, 0, out, O, 0, 1); err != nil {
			return err
		}
		return k.launch("add_bias", rows*O, out, off(w, l.BiasOffset), rows, O)
	case nn.TypeEmbedding:
		t, d := l.InShape[0], l.Units
		pos := none
		if l.PositionSize > 0 {
			pos = off(w, l.PositionOffset)
		}
		return k.launch("embedding_forward", n*t*d, in, off(w, l.WeightOffset), pos, out, n*t, t, d, l.Vocab)
	case nn.TypeLayerNorm:
		r, d := seqRows(l.LayerPlan)
		return k.launchRows("layernorm_forward", n*r, in, off(w, l.WeightOffset), off(w, l.BiasOffset), out, l.mean, l.rstd, n*r, d, float32(l.Eps))
	case nn.TypeGELU:
		return k.launch("gelu_forward", n*l.OutSize, in, out, n*l.OutSize)
	case nn.TypeAttention:
		return l.attentionAt(n, w, 0).forward(k, in, out)
	case nn.TypeResidual:
		body := l.body
		body.acts[0] = in
		if err := nt.forward(k, body, w, n, train); err != nil {
			return err
		}
		return k.launch("add", n*l.OutSize, in, body.acts[len(body.layers)], out, n*l.OutSize)
	case nn.TypeDropout:
		size := n * l.OutSize
		if !train {
			return k.launch("copy", size, out, in, size)
		}
		return k.launch("dropout_apply", size, in, out, size, nt.seed, l.Index, dropoutThreshold(l.Rate), float32(1/(1-l.Rate)))
	case nn.TypeReLU:
		return k.launch("relu_forward", n*l.OutSize, in, out, n*l.OutSize)
	case nn.TypeConv2D:
		C, H, W := l.In[0], l.In[1], l.In[2]
		F, OH, OW := l.Out[0], l.Out[1], l.Out[2]
		P, R := OH*OW, C*l.Kernel*l.Kernel
		if err := k.launch("im2row", n*P*R, in, l.rows, n, C, H, W, l.Kernel, l.Stride, l.Padding, OH, OW); err != nil {
			return err
		}
		// outT[(n*P)×F] = rows[(n*P)×R] · Wᵀ
		if err := k.gemm(false, true, n*P, F, R, 1, l.rows, R, 0, off(w, l.WeightOffset), R, 0, 0, nt.scratchT, F, 0, 1); err != nil {
			return err
		}
		return k.launch("conv_output", n*F*P, nt.scratchT, off(w, l.BiasOffset), out, n, F, P)
	case nn.TypeMaxPool2D:
		return k.launch("maxpool_forward", n*l.OutSize, in, out, l.argmax, n, l.In[0], l.In[1], l.In[2], l.Kernel, l.Stride, l.Out[1], l.Out[2])
	}
	return fmt.Errorf("unsupported layer type %q", l.Type)
}

func (nt *net) backwardLayer(k kernels, st *stack, i int, l *layer, w ptr, n int, grad ptr) error {
	in, dOut, dIn := st.acts[i], st.dacts[i+1], st.dacts[i]
	switch l.Type {
	case nn.TypeFlatten:
		st.dacts[i] = dOut // the same values, reshaped
		return nil
	case nn.TypeDense:
		r, I := seqRows(l.LayerPlan)
		rows, O := n*r, l.Units
		// dW[O×I] = dOutᵀ · in; added to the embedding's gradient when tied
		var beta float32
		if l.Tied {
			beta = 1
		}
		if err := k.gemm(true, false, O, I, rows, 1, dOut, O, 0, in, I, 0, beta, off(grad, l.WeightOffset), I, 0, 1); err != nil {
			return err
		}
		if err := k.dispatch("column_sums", rowGroups(O), 1, 1, dOut, off(grad, l.BiasOffset), rows, O); err != nil {
			return err
		}
		if dIn != 0 {
			// dIn[rows×I] = dOut · W
			return k.gemm(false, false, rows, I, O, 1, dOut, O, 0, off(w, l.WeightOffset), I, 0, 0, dIn, I, 0, 1)
		}
	case nn.TypeEmbedding:
		t, d := l.InShape[0], l.Units
		rows := n * t
		// The token table's gradient was zeroed (nt.clears), or holds the
		// tied output layer's.
		if l.Vocab <= gatherVocab {
			if err := k.launch("embedding_backward_gather", l.Vocab*d, in, dOut, off(grad, l.WeightOffset), rows, d, l.Vocab); err != nil {
				return err
			}
		} else if err := k.launch("embedding_backward_columns", d, in, dOut, off(grad, l.WeightOffset), rows, d, l.Vocab); err != nil {
			return err
		}
		if l.PositionSize > 0 {
			return k.launch("embedding_backward_positions", l.Positions*d, dOut, off(grad, l.PositionOffset), n, t, l.Positions, d)
		}
	case nn.TypeLayerNorm:
		r, d := seqRows(l.LayerPlan)
		if err := k.launchRows("layernorm_param_grads", d, in, dOut, l.mean, l.rstd, off(grad, l.WeightOffset), off(grad, l.BiasOffset), n*r, d); err != nil {
			return err
		}
		if dIn != 0 {
			return k.launchRows("layernorm_backward", n*r, in, dOut, off(w, l.WeightOffset), l.mean, l.rstd, dIn, n*r, d)
		}
	case nn.TypeGELU:
		if dIn != 0 {
			return k.launch("gelu_backward", n*l.OutSize, in, dOut, dIn, n*l.OutSize)
		}
	case nn.TypeAttention:
		return l.attentionAt(n, w, grad).backward(k, nt.attScratch, in, dOut, dIn)
	case nn.TypeResidual:
		// The body's output gradient is the block's; the input's is that
		// plus the body's input gradient.
		body := l.body
		body.dacts[len(body.layers)] = dOut
		if err := nt.backward(k, body, w, n, grad); err != nil {
			return err
		}
		if dIn != 0 {
			return k.launch("add", n*l.InSize, dOut, body.dacts[0], dIn, n*l.InSize)
		}
	case nn.TypeDropout:
		if dIn != 0 {
			size := n * l.OutSize
			return k.launch("dropout_apply", size, dOut, dIn, size, nt.seed, l.Index, dropoutThreshold(l.Rate), float32(1/(1-l.Rate)))
		}
	case nn.TypeReLU:
		if dIn != 0 {
			return k.launch("relu_backward", n*l.OutSize, st.acts[i+1], dOut, dIn, n*l.OutSize)
		}
	case nn.TypeConv2D:
		C, H, W := l.In[0], l.In[1], l.In[2]
		F, OH, OW := l.Out[0], l.Out[1], l.Out[2]
		P, R := OH*OW, C*l.Kernel*l.Kernel
		if err := k.launch("conv_grad_rows", n*F*P, dOut, nt.scratchT, n, F, P); err != nil {
			return err
		}
		// dW[F×R] = dOutTᵀ · rows, over all n*P positions at once.
		if err := k.gemm(true, false, F, R, n*P, 1, nt.scratchT, F, 0, l.rows, R, 0, 0, off(grad, l.WeightOffset), R, 0, 1); err != nil {
			return err
		}
		if err := k.dispatch("column_sums", rowGroups(F), 1, 1, nt.scratchT, off(grad, l.BiasOffset), n*P, F); err != nil {
			return err
		}
		if dIn != 0 {
			// dRows[(n*P)×R] = dOutT · W, gathered back to the input.
			if err := k.gemm(false, false, n*P, R, F, 1, nt.scratchT, F, 0, off(w, l.WeightOffset), R, 0, 0, nt.scratchRows, R, 0, 1); err != nil {
				return err
			}
			return k.launch("row2im", n*C*H*W, nt.scratchRows, dIn, n, C, H, W, l.Kernel, l.Stride, l.Padding, OH, OW)
		}
	case nn.TypeMaxPool2D:
		if dIn != 0 {
			return k.launch("maxpool_backward", n*l.InSize, dOut, l.argmax, dIn, n, l.In[0], l.In[1], l.In[2], l.Kernel, l.Stride, l.Out[1], l.Out[2])
		}
	default:
		return fmt.Errorf("unsupported layer type %q", l.Type)
	}
	return nil
}

// dropoutThreshold is dropout_apply's threshold for a rate, as package nn
// computes it: a value is dropped when the top 24 bits of its hash are
// below it.
func dropoutThreshold(rate float64) uint32 { return uint32(rate * (1 << 24)) }
