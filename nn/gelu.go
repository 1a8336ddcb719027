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

// forward and backward run in float32 (kernel_math.go: a rational erf
// within 5e-7 of the exact one, 16 values at a time where AVX-512 is).
func (l *geluLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	geluForward(in, out)
}

// backward: d/dx x·Φ(x) = Φ(x) + x·φ(x).
func (l *geluLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	if dIn == nil {
		return
	}
	geluBackward(in, dOut, dIn)
}

func (l *geluLayer) describe(*LayerPlan) {}
