package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// Causal attention in row blocks (causalBlock) against the whole T×T
// products: same loss, logits and gradient,
// with blocks that divide T and blocks that leave a short last one.
func TestCausalBlocksMatchWholeProducts(t *testing.T) {
	old := causalBlock
	defer func() { causalBlock = old }()
	m := mustPreset(t, "charlm-tiny")
	r := rand.New(rand.NewPCG(*seed, 9))
	params := make([]float32, m.NumParams)
	m.Init(params, 4)
	const n = 3
	x := make([]float32, n*m.InputSize)
	for i := range x {
		x[i] = float32(r.IntN(m.NumClasses))
	}
	labels := make([]int32, n*m.LabelsPerExample)
	for i := range labels {
		labels[i] = int32(r.IntN(m.NumClasses))
	}
	ws := m.newWorkspace(n, true)
	causalBlock = 1 << 30
	want := make([]float32, m.NumParams)
	wantLoss, _ := m.Gradient(ws, params, x, labels, want)
	wantLogits := append([]float32(nil), m.Forward(ws, params, x)...)
	for _, block := range []int{8, 5, 31} {
		t.Run(fmt.Sprintf("block %d", block), func(t *testing.T) {
			causalBlock = block
			got := make([]float32, m.NumParams)
			loss, _ := m.Gradient(ws, params, x, labels, got)
			if d := math.Abs(loss-wantLoss) / math.Abs(wantLoss); d > 1e-6 {
				t.Errorf("loss %v, whole products %v", loss, wantLoss)
			}
			if d := relDiff(got, want); d > 1e-5 {
				t.Errorf("gradient differs by %g relative", d)
			}
			if d := relDiff(m.Forward(ws, params, x), wantLogits); d > 1e-6 {
				t.Errorf("logits differ by %g relative", d)
			}
		})
	}
}
