//go:build linux || windows

package gpuworker

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/gpuworker/cuda"
	"github.com/crowdtrain/crowdtrain/nn"
)

// attentionAt points a layer's attention at this call's batch and tensors.
func (l *layer) attentionAt(n int, w, grad cuda.DevicePtr) *attention {
	a := l.att
	a.n = n
	a.win, a.bin, a.wout, a.bout = off(w, l.WeightOffset), off(w, l.BiasOffset), off(w, l.OutWeightOffset), off(w, l.OutBiasOffset)
	a.gwin, a.gbin, a.gwout, a.gbout = off(grad, l.WeightOffset), off(grad, l.BiasOffset), off(grad, l.OutWeightOffset), off(grad, l.OutBiasOffset)
	return a
}

func (nt *net) forwardLayer(b *Backend, st *stack, i int, l *layer, w cuda.DevicePtr, n int) error {
	in, out := st.acts[i], st.acts[i+1]
	switch l.Type {
	case nn.TypeFlatten:
		st.acts[i+1] = in
		return nil
	case nn.TypeDense:
		// Per position on a sequence: n*t rows of d.
		r, I := seqRows(l.LayerPlan)
		rows, O := n*r, l.Units
		if err := b.blas.GemmRowMajor(false, true, rows, O, I, 1, in, I, off(w, l.WeightOffset), I, 0, out, O); err != nil {
			return err
		}
		return b.launch("add_bias", rows*O, out, off(w, l.BiasOffset), rows, O)
	case nn.TypeEmbedding:
		t, d := l.InShape[0], l.Units
		var pos cuda.DevicePtr
		if l.PositionSize > 0 {
			pos = off(w, l.PositionOffset)
		}
		return b.launch("embedding_forward", n*t*d, in, off(w, l.WeightOffset), pos, out, n*t, t, d, l.Vocab)
	case nn.TypeLayerNorm:
		r, d := seqRows(l.LayerPlan)
		return b.launchRows("layernorm_forward", n*r, in, off(w, l.WeightOffset), off(w, l.BiasOffset), out, l.mean, l.rstd, n*r, d, float32(l.Eps))
	case nn.TypeGELU:
		return b.launch("gelu_forward", n*l.OutSize, in, out, n*l.OutSize)
	case nn.TypeAttention:
		return l.attentionAt(n, w, 0).forward(b, in, out)
	case nn.TypeResidual:
		body := l.body
		body.acts[0] = in
		if err := nt.forward(b, body, w, n); err != nil {
			return err
		}
		return b.launch("add", n*l.OutSize, in, body.acts[len(body.layers)], out, n*l.OutSize)
	case nn.TypeDropout:
		size := n * l.OutSize
		return b.launch("dropout_apply", size, in, out, size, nt.seed, l.Index, dropoutThreshold(l.Rate), float32(1/(1-l.Rate)))
	case nn.TypeReLU:
		return b.launch("relu_forward", n*l.OutSize, in, out, n*l.OutSize)
	case nn.TypeConv2D:
		C, H, W := l.In[0], l.In[1], l.In[2]
		F, OH, OW := l.Out[0], l.Out[1], l.Out[2]
		P, R := OH*OW, C*l.Kernel*l.Kernel
		if err := b.launch("im2row", n*P*R, in, l.rows, n, C, H, W, l.Kernel, l.Stride, l.Padding, OH, OW); err != nil {
			return err
		}
		// outT[(n*P)×F] = rows[(n*P)×R] · Wᵀ
		if err := b.blas.GemmRowMajor(false, true, n*P, F, R, 1, l.rows, R, off(w, l.WeightOffset), R, 0, nt.scratchT, F); err != nil {
			return err
		}
		return b.launch("conv_output", n*F*P, nt.scratchT, off(w, l.BiasOffset), out, n, F, P)
	case nn.TypeMaxPool2D:
		return b.launch("maxpool_forward", n*l.OutSize, in, out, l.argmax, n, l.In[0], l.In[1], l.In[2], l.Kernel, l.Stride, l.Out[1], l.Out[2])
	}
	return fmt.Errorf("unsupported layer type %q", l.Type)
}

func (nt *net) backwardLayer(b *Backend, st *stack, i int, l *layer, w cuda.DevicePtr, n int, grad cuda.DevicePtr) error {
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
		if err := b.blas.GemmRowMajor(true, false, O, I, rows, 1, dOut, O, in, I, beta, off(grad, l.WeightOffset), I); err != nil {
			return err
		}
		if err := b.launchGrid("column_sums", O, 256, dOut, off(grad, l.BiasOffset), rows, O); err != nil {
			return err
		}
		if dIn != 0 {
			// dIn[rows×I] = dOut · W
			return b.blas.GemmRowMajor(false, false, rows, I, O, 1, dOut, O, off(w, l.WeightOffset), I, 0, dIn, I)
		}
	case nn.TypeEmbedding:
		t, d := l.InShape[0], l.Units
		rows := n * t
		// The token table's gradient was zeroed (nt.clears), or holds the
		// tied output layer's.
		if l.Vocab <= gatherVocab {
			if err := b.launch("embedding_backward_gather", l.Vocab*d, in, dOut, off(grad, l.WeightOffset), rows, d, l.Vocab); err != nil {
				return err
			}
		} else if err := b.launch("embedding_backward_scatter", rows*d, in, dOut, off(grad, l.WeightOffset), rows, d, l.Vocab); err != nil {
			return err
		}
		if l.PositionSize > 0 {
			return b.launch("embedding_backward_positions", l.Positions*d, dOut, off(grad, l.PositionOffset), n, t, l.Positions, d)
		}
	case nn.TypeLayerNorm:
		r, d := seqRows(l.LayerPlan)
		if err := b.launchRows("layernorm_param_grads", d, in, dOut, l.mean, l.rstd, off(grad, l.WeightOffset), off(grad, l.BiasOffset), n*r, d); err != nil {
			return err
		}
		if dIn != 0 {
			return b.launchRows("layernorm_backward", n*r, in, dOut, off(w, l.WeightOffset), l.mean, l.rstd, dIn, n*r, d)
		}
	case nn.TypeGELU:
		if dIn != 0 {
			return b.launch("gelu_backward", n*l.OutSize, in, dOut, dIn, n*l.OutSize)
		}
	case nn.TypeAttention:
		return l.attentionAt(n, w, grad).backward(b, nt.attScratch, in, dOut, dIn)
	case nn.TypeResidual:
		// The body's output gradient is the block's; the input's is that
		// plus the body's input gradient.
		body := l.body
		body.dacts[len(body.layers)] = dOut
		if err := nt.backward(b, body, w, n, grad); err != nil {
			return err
		}
		if dIn != 0 {
			return b.launch("add", n*l.InSize, dOut, body.dacts[0], dIn, n*l.InSize)
		}
	case nn.TypeDropout:
		if dIn != 0 {
			size := n * l.OutSize
			return b.launch("dropout_apply", size, dOut, dIn, size, nt.seed, l.Index, dropoutThreshold(l.Rate), float32(1/(1-l.Rate)))
		}
	case nn.TypeReLU:
		if dIn != 0 {
			return b.launch("relu_backward", n*l.OutSize, st.acts[i+1], dOut, dIn, n*l.OutSize)
		}
	case nn.TypeConv2D:
		C, H, W := l.In[0], l.In[1], l.In[2]
		F, OH, OW := l.Out[0], l.Out[1], l.Out[2]
		P, R := OH*OW, C*l.Kernel*l.Kernel
		if err := b.launch("conv_grad_rows", n*F*P, dOut, nt.scratchT, n, F, P); err != nil {
			return err
		}
		// dW[F×R] = dOutTᵀ · rows, over all n*P positions at once.
		if err := b.blas.GemmRowMajor(true, false, F, R, n*P, 1, nt.scratchT, F, l.rows, R, 0, off(grad, l.WeightOffset), R); err != nil {
			return err
		}
		if err := b.launchGrid("column_sums", F, 256, nt.scratchT, off(grad, l.BiasOffset), n*P, F); err != nil {
			return err
		}
		if dIn != 0 {
			// dRows[(n*P)×R] = dOutT · W, gathered back to the input.
			if err := b.blas.GemmRowMajor(false, false, n*P, R, F, 1, nt.scratchT, F, off(w, l.WeightOffset), R, 0, nt.scratchRows, R); err != nil {
				return err
			}
			return b.launch("row2im", n*C*H*W, nt.scratchRows, dIn, n, C, H, W, l.Kernel, l.Stride, l.Padding, OH, OW)
		}
	case nn.TypeMaxPool2D:
		if dIn != 0 {
			return b.launch("maxpool_backward", n*l.InSize, dOut, l.argmax, dIn, n, l.In[0], l.In[1], l.In[2], l.Kernel, l.Stride, l.Out[1], l.Out[2])
		}
	default:
		return fmt.Errorf("unsupported layer type %q", l.Type)
	}
	return nil
}
