package gpu

import "github.com/crowdtrain/crowdtrain/nn"

// residual is x + body(x), the body a stack of its own.
type residual struct {
	*layer
	body *stack
}

func init() {
	register(nn.TypeResidual, layerType{build: func(bl *builder, l *layer, below bool) (layerOps, error) {
		body, err := bl.stack(l.Body, below, l.name+".residual.")
		if err != nil {
			return nil, err
		}
		return &residual{layer: l, body: body}, nil
	}})
}

func (l *residual) forward(p *pass, st *stack, i int) error {
	in := st.acts[i]
	l.body.acts[0] = in
	if err := p.forward(l.body); err != nil {
		return err
	}
	size := p.n * l.OutSize
	return p.dev.Launch("add", size, in, l.body.acts[len(l.body.layers)], st.acts[i+1], size)
}

// backward: the body's output gradient is the block's; the input's is
// that plus the body's input gradient.
func (l *residual) backward(p *pass, st *stack, i int) error {
	dOut, dIn := st.dacts[i+1], st.dacts[i]
	l.body.dacts[len(l.body.layers)] = dOut
	if err := p.backward(l.body); err != nil {
		return err
	}
	if dIn == 0 {
		return nil
	}
	size := p.n * l.InSize
	return p.dev.Launch("add", size, dOut, l.body.dacts[0], dIn, size)
}
