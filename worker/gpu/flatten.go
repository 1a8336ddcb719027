package gpu

import "github.com/crowdtrain/crowdtrain/nn"

// flatten's output and its gradient are its input's, reshaped.
type flatten struct{}

func init() {
	register(nn.TypeFlatten, layerType{aliases: true,
		build: func(*builder, *layer, bool) (layerOps, error) { return flatten{}, nil }})
}

func (flatten) forward(_ *pass, st *stack, i int) error {
	st.acts[i+1] = st.acts[i]
	return nil
}

func (flatten) backward(_ *pass, st *stack, i int) error {
	st.dacts[i] = st.dacts[i+1]
	return nil
}
