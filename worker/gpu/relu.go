package gpu

import "github.com/crowdtrain/crowdtrain/nn"

// relu is max(0, x); backward reads its output.
type relu struct{ *layer }

func init() {
	register(nn.TypeReLU, layerType{build: func(_ *builder, l *layer, _ bool) (layerOps, error) { return relu{l}, nil }})
}

func (l relu) forward(p *pass, st *stack, i int) error {
	size := p.n * l.OutSize
	return p.dev.Launch("relu_forward", size, st.acts[i], st.acts[i+1], size)
}

func (l relu) backward(p *pass, st *stack, i int) error {
	if st.dacts[i] == 0 {
		return nil
	}
	size := p.n * l.OutSize
	return p.dev.Launch("relu_backward", size, st.acts[i+1], st.dacts[i+1], st.dacts[i], size)
}
