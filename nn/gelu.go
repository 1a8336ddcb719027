package nn

import "math"

// geluLayer is the exact GELU, x·Φ(x) = 0.5·x·(1 + erf(x/√2)), elementwise
// (PyTorch's nn.GELU() default).
type geluLayer struct{ layerBase }

const invSqrt2 = 1 / math.Sqrt2

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

func (l *geluLayer) newState(*wsBuilder, int) any { return nil }

func (l *geluLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	out = out[:len(in)]
	for i, v := range in {
		x := float64(v)
		out[i] = float32(0.5 * x * (1 + math.Erf(x*invSqrt2)))
	}
}

// backward: d/dx x·Φ(x) = Φ(x) + x·φ(x).
func (l *geluLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	if dIn == nil {
		return
	}
	const invSqrt2Pi = 0.3989422804014327
	dIn = dIn[:len(in)]
	for i, v := range in {
		x := float64(v)
		d := 0.5*(1+math.Erf(x*invSqrt2)) + float64(x*invSqrt2Pi)*math.Exp(-0.5*float64(x*x))
		dIn[i] = float32(float64(dOut[i]) * d)
	}
}

func (l *geluLayer) describe(*LayerPlan) {}
