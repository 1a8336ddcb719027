package nn

import "math"

// reluLayer is max(x, 0), elementwise on any shape. A dense or conv2d layer
// right before it applies it in place (layerBase.fusedReLU), and the relu's
// forward is then skipped.
type reluLayer struct{ layerBase }

func init() {
	registerLayer(TypeReLU, nil, func(r *resolver, ls LayerSpec, cur shape) (Layer, error) {
		if err := needValues(cur); err != nil {
			return nil, err
		}
		l := &reluLayer{}
		l.out = cur
		return l, nil
	})
}

func (l *reluLayer) newState(*wsBuilder, int) any { return nil }

func (l *reluLayer) forward(c *runCtx, st any, params, in, out []float32, n int) {
	reluForward(in, out)
}

func (l *reluLayer) backward(c *runCtx, st any, params, in, out, dOut, dIn, grad []float32, n int) {
	if dIn != nil {
		reluBackward(out, dOut, dIn)
	}
}

func (l *reluLayer) describe(*LayerPlan) {}

// reluForward works on the bit patterns (clearing values whose sign bit is
// set): with random signs a compare-and-branch mispredicts half the time and
// costs several times more than the masking.
func reluForward(in, out []float32) {
	out = out[:len(in)]
	for i, v := range in {
		b := math.Float32bits(v)
		b &^= uint32(int32(b) >> 31) // all ones if the sign bit is set
		out[i] = math.Float32frombits(b)
	}
}

// reluBackward passes dOut where the relu output is > 0. Outputs are never
// negative, so "> 0" is "bits != 0", and (bits + 0x7fffffff) >> 31 is 1
// exactly then.
func reluBackward(out, dOut, dIn []float32) {
	dOut = dOut[:len(out)]
	dIn = dIn[:len(out)]
	for i, v := range out {
		mask := -((math.Float32bits(v) + 0x7fffffff) >> 31)
		dIn[i] = math.Float32frombits(math.Float32bits(dOut[i]) & mask)
	}
}

// biasReLU writes relu(x + b) to out (which may be x).
func biasReLU(x []float32, b float32, out []float32) {
	out = out[:len(x)]
	for i, v := range x {
		bits := math.Float32bits(v + b)
		bits &^= uint32(int32(bits) >> 31)
		out[i] = math.Float32frombits(bits)
	}
}
