package nn

// flattenLayer reshapes its input into a flat vector; its output is its
// input (layerBase.alias).
type flattenLayer struct{ layerBase }

func init() {
	registerLayer(TypeFlatten, nil, func(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
		if err := needValues(cur); err != nil {
			return nil, err
		}
		l := &flattenLayer{}
		l.out = flatShape(cur.size())
		l.alias = true
		return l, nil
	})
}

func (l *flattenLayer) newState(*wsBuilder, int) any { return nil }

func (l *flattenLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {}

func (l *flattenLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	if dIn != nil && &dIn[0] != &dOut[0] {
		copy(dIn, dOut)
	}
}

func (l *flattenLayer) describe(*LayerPlan) {}
