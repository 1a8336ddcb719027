package gpu

import "github.com/crowdtrain/crowdtrain/nn"

// layerNorm normalizes each row (each position of a sequence) and applies
// the gain and shift; it keeps each row's mean and 1/std for backward.
type layerNorm struct {
	*layer
	mean, rstd Ptr
}

func init() {
	register(nn.TypeLayerNorm, layerType{build: func(bl *builder, l *layer, _ bool) (layerOps, error) {
		r, _ := seqRows(l.LayerPlan)
		return &layerNorm{layer: l, mean: bl.alloc(bl.maxBatch * r), rstd: bl.alloc(bl.maxBatch * r)}, nil
	}})
}

func (l *layerNorm) forward(p *pass, st *stack, i int) error {
	r, d := seqRows(l.LayerPlan)
	return p.dev.LaunchRows("layernorm_forward", p.n*r, st.acts[i], p.wAt(l.WeightOffset), p.wAt(l.BiasOffset), st.acts[i+1], l.mean, l.rstd, p.n*r, d, float32(l.Eps))
}

func (l *layerNorm) backward(p *pass, st *stack, i int) error {
	in, dOut, dIn := st.acts[i], st.dacts[i+1], st.dacts[i]
	r, d := seqRows(l.LayerPlan)
	if err := p.dev.LaunchRows("layernorm_param_grads", d, in, dOut, l.mean, l.rstd, p.gAt(l.WeightOffset), p.gAt(l.BiasOffset), p.n*r, d); err != nil {
		return err
	}
	if dIn == 0 {
		return nil
	}
	return p.dev.LaunchRows("layernorm_backward", p.n*r, in, dOut, p.wAt(l.WeightOffset), l.mean, l.rstd, dIn, p.n*r, d)
}
