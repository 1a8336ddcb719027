package nn

import "testing"

// Two AdamW steps on two parameters, worked by hand with lr 0.1, weight
// decay 0.01, betas 0.9/0.999, epsilon 1e-8:
//
//	step 1, w=1,  g=0.5:  w=1-0.001=0.999; m=0.05, v=0.00025; m̂=0.5, v̂=0.25 → w=0.999-0.1·0.5/0.5=0.899
//	step 1, w=-2, g=-1:   w=-1.998; m=-0.1, v=0.001; m̂=-1, v̂=1 → w=-1.898
//	step 2, w=0.899, g=0.25: w=0.898101; m=0.07, v=0.00031225; m̂=0.07/0.19, v̂=0.00031225/0.001999 → w=0.804883
//	step 2, w=-1.898, g=0:   w=-1.896102; m=-0.09, v=0.000999; m̂=-0.09/0.19, v̂=0.000999/0.001999 → w=-1.829096
func TestAdamWMatchesHandComputedSteps(t *testing.T) {
	o := &AdamW{LR: 0.1, WeightDecay: 0.01, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}
	w := []float32{1, -2}
	o.Reset(2)
	o.Step(w, []float32{0.5, -1})
	near(t, "step 1", w, []float64{0.899, -1.898}, 2e-6)
	o.Step(w, []float32{0.25, 0})
	near(t, "step 2", w, []float64{0.804883, -1.8290962}, 2e-6)

	// Reset starts over: the same first step from the same point.
	w = []float32{1, -2}
	o.Reset(2)
	o.Step(w, []float32{0.5, -1})
	near(t, "after Reset", w, []float64{0.899, -1.898}, 2e-6)
}

// Weight decay is decoupled: a zero gradient still shrinks w by lr·wd·w,
// and the Adam part moves nothing.
func TestAdamWDecayIsDecoupled(t *testing.T) {
	o := &AdamW{LR: 0.5, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}
	w := []float32{2}
	o.Reset(1)
	o.Step(w, []float32{0})
	near(t, "zero gradient", w, []float64{2 - 0.5*0.1*2}, 1e-7)
}
