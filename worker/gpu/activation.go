package gpu

import "github.com/crowdtrain/crowdtrain/nn"

// activation is an elementwise function: relu (max(0, x); its backward
// reads the output) and gelu (the exact one; its backward reads the
// input).
type activation struct {
	*layer
	forwardKernel, backwardKernel string
	backwardReadsOutput           bool
}

func init() {
	for typ, a := range map[string]activation{
		nn.TypeReLU: {forwardKernel: "relu_forward", backwardKernel: "relu_backward", backwardReadsOutput: true},
		nn.TypeGELU: {forwardKernel: "gelu_forward", backwardKernel: "gelu_backward"},
	} {
		register(typ, layerType{build: func(_ *builder, l *layer, _ bool) (layerOps, error) {
			op := a
			op.layer = l
			return op, nil
		}})
	}
}

func (a activation) forward(p *pass, st *stack, i int) error {
	size := p.n * a.OutSize
	return p.dev.Launch(a.forwardKernel, size, st.acts[i], st.acts[i+1], size)
}

func (a activation) backward(p *pass, st *stack, i int) error {
	if st.dacts[i] == 0 {
		return nil
	}
	read := st.acts[i]
	if a.backwardReadsOutput {
		read = st.acts[i+1]
	}
	size := p.n * a.OutSize
	return p.dev.Launch(a.backwardKernel, size, read, st.dacts[i+1], st.dacts[i], size)
}
