package nn

// geluLayer is the exact GELU, x·Φ(x) = 0.5·x·(1 + erf(x/√2)), elementwise
// (PyTorch's nn.GELU() default), with Φ from normCDF (float32 accuracy).
type geluLayer struct{ layerBase }

func init() {
	registerLayer(TypeGELU, nil, func(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
		if err := needValues(cur); err != nil {
			return nil, err
		}
		l := &geluLayer{}
		l.out = cur
		return l, nil
	})
}

// geluState keeps Φ and φ of the forward pass's inputs for backward.
type geluState struct{ cdf, pdf []float32 }

func (l *geluLayer) newState(b *wsBuilder, maxBatch int) any {
	return &geluState{cdf: make([]float32, maxBatch*l.outSize), pdf: make([]float32, maxBatch*l.outSize)}
}

func (l *geluLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	s := st.(*geluState)
	out = out[:len(in)]
	cdfs, pdfs := s.cdf[:len(in)], s.pdf[:len(in)]
	for i, x := range in {
		cdf, pdf := normCDF(x)
		out[i] = x * cdf
		cdfs[i], pdfs[i] = cdf, pdf
	}
}

// backward: d/dx x·Φ(x) = Φ(x) + x·φ(x).
func (l *geluLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	if dIn == nil {
		return
	}
	s := st.(*geluState)
	dIn = dIn[:len(in)]
	dOut = dOut[:len(in)]
	cdfs, pdfs := s.cdf[:len(in)], s.pdf[:len(in)]
	for i, x := range in {
		dIn[i] = dOut[i] * (cdfs[i] + float32(x*pdfs[i]))
	}
}

func (l *geluLayer) describe(*LayerPlan) {}
