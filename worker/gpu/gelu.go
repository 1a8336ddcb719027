package gpu

import "github.com/crowdtrain/crowdtrain/nn"

// gelu is GELU (tanh approximation, as package nn); backward reads its
// input.
type gelu struct{ *layer }

func init() {
	register(nn.TypeGELU, layerType{build: func(_ *builder, l *layer, _ bool) (layerOps, error) { return gelu{l}, nil }})
}

func (l gelu) forward(p *pass, st *stack, i int) error {
	size := p.n * l.OutSize
	return p.dev.Launch("gelu_forward", size, st.acts[i], st.acts[i+1], size)
}

func (l gelu) backward(p *pass, st *stack, i int) error {
	if st.dacts[i] == 0 {
		return nil
	}
	size := p.n * l.OutSize
	return p.dev.Launch("gelu_backward", size, st.acts[i], st.dacts[i+1], st.dacts[i], size)
}
