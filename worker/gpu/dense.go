package gpu

import "github.com/crowdtrain/crowdtrain/nn"

// dense is out = in·Wᵀ + b, per position on a sequence (n*t rows of d).
type dense struct{ *layer }

func init() {
	register(nn.TypeDense, layerType{build: func(_ *builder, l *layer, _ bool) (layerOps, error) { return dense{l}, nil }})
}

func (l dense) forward(p *pass, st *stack, i int) error {
	in, out := st.acts[i], st.acts[i+1]
	r, I := seqRows(l.LayerPlan)
	rows, O := p.n*r, l.Units
	if err := p.dev.Gemm(false, true, rows, O, I, 1, in, I, 0, p.wAt(l.WeightOffset), I, 0, 0, out, O, 0, 1); err != nil {
		return err
	}
	return p.dev.Launch("add_bias", rows*O, out, p.wAt(l.BiasOffset), rows, O)
}

func (l dense) backward(p *pass, st *stack, i int) error {
	in, dOut, dIn := st.acts[i], st.dacts[i+1], st.dacts[i]
	r, I := seqRows(l.LayerPlan)
	rows, O := p.n*r, l.Units
	// dW[O×I] = dOutᵀ · in; added to the embedding's gradient when tied
	var beta float32
	if l.Tied {
		beta = 1
	}
	if err := p.dev.Gemm(true, false, O, I, rows, 1, dOut, O, 0, in, I, 0, beta, p.gAt(l.WeightOffset), I, 0, 1); err != nil {
		return err
	}
	if err := p.dev.LaunchBlocks("column_sums", O, dOut, p.gAt(l.BiasOffset), rows, O); err != nil {
		return err
	}
	if dIn == 0 {
		return nil
	}
	// dIn[rows×I] = dOut · W
	return p.dev.Gemm(false, false, rows, I, O, 1, dOut, O, 0, p.wAt(l.WeightOffset), I, 0, 0, dIn, I, 0, 1)
}
