package gpu

import "github.com/crowdtrain/crowdtrain/nn"

// maxPool2D keeps each window's maximum and, for backward, where it was.
type maxPool2D struct {
	*layer
	argmax Ptr
}

func init() {
	register(nn.TypeMaxPool2D, layerType{build: func(bl *builder, l *layer, _ bool) (layerOps, error) {
		return &maxPool2D{layer: l, argmax: bl.alloc(bl.maxBatch * l.OutSize)}, nil
	}})
}

func (l *maxPool2D) forward(p *pass, st *stack, i int) error {
	return p.dev.Launch("maxpool_forward", p.n*l.OutSize, st.acts[i], st.acts[i+1], l.argmax, p.n, l.In[0], l.In[1], l.In[2], l.Kernel, l.Stride, l.Out[1], l.Out[2])
}

func (l *maxPool2D) backward(p *pass, st *stack, i int) error {
	if st.dacts[i] == 0 {
		return nil
	}
	return p.dev.Launch("maxpool_backward", p.n*l.InSize, st.dacts[i+1], l.argmax, st.dacts[i], p.n, l.In[0], l.In[1], l.In[2], l.Kernel, l.Stride, l.Out[1], l.Out[2])
}
