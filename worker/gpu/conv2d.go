package gpu

import "github.com/crowdtrain/crowdtrain/nn"

// conv2d is a convolution as one GEMM: im2row lays the batch's patches out
// as rows (kept for backward), the GEMM multiplies them by the filters,
// and conv_output adds the bias and puts the result in CHW order.
type conv2d struct {
	*layer
	rows Ptr // the batch's patches [(n*P)×R]
	// outT is the GEMM's (n*P)×F output and, in backward, its gradient;
	// dRows the patches' gradient. Every conv2d layer shares them.
	outT, dRows *Ptr
}

func init() {
	register(nn.TypeConv2D, layerType{build: func(bl *builder, l *layer, _ bool) (layerOps, error) {
		P, R, nb := l.Out[1]*l.Out[2], l.In[0]*l.Kernel*l.Kernel, bl.maxBatch
		return &conv2d{layer: l, rows: bl.alloc(nb * P * R),
			outT: bl.shared("conv2d.outT", nb*P*l.Out[0]), dRows: bl.shared("conv2d.dRows", nb*P*R)}, nil
	}})
}

func (l *conv2d) forward(p *pass, st *stack, i int) error {
	n := p.n
	C, H, W := l.In[0], l.In[1], l.In[2]
	F, OH, OW := l.Out[0], l.Out[1], l.Out[2]
	P, R := OH*OW, C*l.Kernel*l.Kernel
	if err := p.dev.Launch("im2row", n*P*R, st.acts[i], l.rows, n, C, H, W, l.Kernel, l.Stride, l.Padding, OH, OW); err != nil {
		return err
	}
	// outT[(n*P)×F] = rows[(n*P)×R] · Wᵀ
	if err := p.dev.Gemm(false, true, n*P, F, R, 1, l.rows, R, 0, p.wAt(l.WeightOffset), R, 0, 0, *l.outT, F, 0, 1); err != nil {
		return err
	}
	return p.dev.Launch("conv_output", n*F*P, *l.outT, p.wAt(l.BiasOffset), st.acts[i+1], n, F, P)
}

func (l *conv2d) backward(p *pass, st *stack, i int) error {
	n, dOut, dIn := p.n, st.dacts[i+1], st.dacts[i]
	C, H, W := l.In[0], l.In[1], l.In[2]
	F, OH, OW := l.Out[0], l.Out[1], l.Out[2]
	P, R := OH*OW, C*l.Kernel*l.Kernel
	outT := *l.outT
	if err := p.dev.Launch("conv_grad_rows", n*F*P, dOut, outT, n, F, P); err != nil {
		return err
	}
	// dW[F×R] = dOutTᵀ · rows, over all n*P positions at once.
	if err := p.dev.Gemm(true, false, F, R, n*P, 1, outT, F, 0, l.rows, R, 0, 0, p.gAt(l.WeightOffset), R, 0, 1); err != nil {
		return err
	}
	if err := p.dev.LaunchBlocks("column_sums", F, outT, p.gAt(l.BiasOffset), n*P, F); err != nil {
		return err
	}
	if dIn == 0 {
		return nil
	}
	// dRows[(n*P)×R] = dOutT · W, gathered back to the input.
	if err := p.dev.Gemm(false, false, n*P, R, F, 1, outT, F, 0, p.wAt(l.WeightOffset), R, 0, 0, *l.dRows, R, 0, 1); err != nil {
		return err
	}
	return p.dev.Launch("row2im", n*C*H*W, *l.dRows, dIn, n, C, H, W, l.Kernel, l.Stride, l.Padding, OH, OW)
}
