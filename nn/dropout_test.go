package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// A batch computed in parts, each told where it starts (SetFirstExample),
// draws the mask of the whole batch: the parts' losses add up to the
// whole's, and their size-weighted gradients to its gradient. Numbered
// from 0 each, the parts would draw other masks.
func TestDropoutNumbersValuesPerBatch(t *testing.T) {
	m, err := NewModel(ModelSpec{Input: []int{12}, Layers: []LayerSpec{
		{Type: TypeEmbedding, Vocab: 20, Units: 8, Positions: 12},
		{Type: TypeDropout, Rate: 0.5},
		{Type: TypeDense, Units: 16},
		{Type: TypeDropout, Rate: 0.3},
		{Type: TypeDense, Units: 20},
	}})
	if err != nil {
		t.Fatal(err)
	}
	const n, split = 7, 3
	r := rand.New(rand.NewPCG(3, 4))
	params := make([]float32, m.NumParams)
	m.Init(params, 5)
	x := make([]float32, n*m.InputSize)
	for i := range x {
		x[i] = float32(r.IntN(20))
	}
	labels := make([]int32, n*m.LabelsPerExample)
	for i := range labels {
		labels[i] = int32(r.IntN(20))
	}
	const seed = 99
	whole := make([]float32, m.NumParams)
	ws := m.NewWorkspace(n)
	ws.SetSeed(seed)
	wantLoss, _ := m.Gradient(ws, params, x, labels, whole)

	parts := func(numbered bool) (float64, []float32) {
		sum := make([]float32, m.NumParams)
		g := make([]float32, m.NumParams)
		var loss float64
		lpe, in := m.LabelsPerExample, m.InputSize
		for _, p := range [][2]int{{0, split}, {split, n}} {
			ws := m.NewWorkspace(n)
			ws.SetSeed(seed)
			if numbered {
				ws.SetFirstExample(p[0])
			}
			l, _ := m.Gradient(ws, params, x[p[0]*in:p[1]*in], labels[p[0]*lpe:p[1]*lpe], g)
			loss += l
			w := float32(p[1]-p[0]) / n
			for i, v := range g {
				sum[i] += w * v
			}
		}
		return loss, sum
	}
	loss, grad := parts(true)
	if math.Abs(loss-wantLoss) > 1e-5*math.Abs(wantLoss) {
		t.Errorf("the parts' loss is %v, the whole batch's %v", loss, wantLoss)
	}
	var d, s float64
	for i := range grad {
		d += math.Abs(float64(grad[i] - whole[i]))
		s += math.Abs(float64(whole[i]))
	}
	if d > 1e-5*s {
		t.Errorf("the parts' gradient differs from the whole batch's by %.3g relative", d/s)
	}
	if loss, _ := parts(false); math.Abs(loss-wantLoss) < 1e-3*math.Abs(wantLoss) {
		t.Errorf("parts numbered from 0 have the whole batch's loss %v too: the test cannot tell the numbering", loss)
	}
}
