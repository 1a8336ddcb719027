package nn

import "fmt"

// residualLayer is a skip connection around a body of layers: out = x +
// body(x). The body must give back the shape it gets. Its tensors are named
// <index>.residual.<j>.<type>.<tensor>.
type residualLayer struct {
	layerBase
	body *stack
}

func init() {
	registerLayer(TypeResidual, []string{"layers"}, resolveResidual)
}

func resolveResidual(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
	if err := needValues(cur); err != nil {
		return nil, err
	}
	if len(ls.Layers) == 0 {
		return nil, fmt.Errorf("layers: empty; a residual block needs a body, e.g. layers: [{type: layernorm}, {type: attention, heads: 4}]")
	}
	body, err := r.resolveStack(r.prefix, ls.Layers, cur)
	if err != nil {
		return nil, err
	}
	if body.out != cur {
		return nil, fmt.Errorf("the body turns %v into %v, but a residual block's body must keep the shape", cur, body.out)
	}
	l := &residualLayer{body: body}
	l.out = cur
	return l, nil
}

func (l *residualLayer) newState(b *wsBuilder, maxBatch int) any {
	b.depth++
	defer func() { b.depth-- }()
	return l.body.newState(b, maxBatch, nil)
}

func (l *residualLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	y := l.body.forward(c, st.(*stackState), params, in, n)
	out = out[:len(in)]
	for i, v := range in {
		out[i] = v + y[i]
	}
}

func (l *residualLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	s := st.(*stackState)
	s.dacts[len(l.body.layers)] = dOut
	l.body.backward(c, s, params, grad, n)
	if dIn == nil {
		return
	}
	dx := s.dacts[0][:len(dIn)]
	for i, g := range dOut {
		dIn[i] = g + dx[i]
	}
}

func (l *residualLayer) describe(p *LayerPlan) {
	p.Body = l.body.plan()
}
