package gpu

import "github.com/crowdtrain/crowdtrain/nn"

// dropout zeroes values with probability Rate and scales the others by
// 1/(1-Rate), with masks drawn from the pass's seed and the layer's index
// as package nn draws them; out of training it passes its input on.
type dropout struct{ *layer }

func init() {
	register(nn.TypeDropout, layerType{build: func(_ *builder, l *layer, _ bool) (layerOps, error) { return dropout{l}, nil }})
}

// DropoutThreshold is dropout_apply's threshold for a rate, as package nn
// computes it: a value is dropped when the top 24 bits of its hash are
// below it, so with probability rate (to 2^-24).
func DropoutThreshold(rate float64) uint32 { return uint32(rate * (1 << 24)) }

// apply masks src into dst: the forward and the backward pass draw the
// same mask.
func (l dropout) apply(p *pass, src, dst Ptr) error {
	size := p.n * l.OutSize
	return p.dev.Launch("dropout_apply", size, src, dst, size, p.nt.seed, l.Index, DropoutThreshold(l.Rate), float32(1/(1-l.Rate)))
}

func (l dropout) forward(p *pass, st *stack, i int) error {
	if !p.train {
		return p.dev.Copy(st.acts[i+1], st.acts[i], p.n*l.OutSize)
	}
	return l.apply(p, st.acts[i], st.acts[i+1])
}

func (l dropout) backward(p *pass, st *stack, i int) error {
	if st.dacts[i] == 0 {
		return nil
	}
	return l.apply(p, st.dacts[i+1], st.dacts[i])
}
