package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// With cross-entropy as the loss of the logits, GradientOfLogits gives
// Gradient's loss and gradient; with dropout in the model it is the
// gradient of the dropout-free forward pass (Forward's logits), so it
// matches Gradient on the same model without dropout.
func TestGradientOfLogitsIsGradientForCrossEntropy(t *testing.T) {
	with := decodeSpecs()["mixed"] // has a dropout layer
	without := with.Clone()
	without.Layers = append(without.Layers[:4:4], without.Layers[5:]...) // the same layout, no dropout
	mw, p := decodeModel(t, with)
	mo, err := NewModel(without)
	if err != nil || mo.NumParams != mw.NumParams {
		t.Fatalf("model without dropout: %v (%d parameters, want %d)", err, mo.NumParams, mw.NumParams)
	}
	const n = 3
	rng := rand.New(rand.NewPCG(2, 3))
	x := make([]float32, n*mw.InputSize)
	labels := make([]int32, n*mw.LabelsPerExample)
	for i := range x {
		x[i] = float32(rng.IntN(9))
		labels[i] = int32(rng.IntN(9))
	}
	want := make([]float32, mw.NumParams)
	wantLoss, _ := mo.Gradient(mo.NewWorkspace(n), p, x, labels, want)
	ws := mw.NewWorkspace(n)
	seed := ws.Seed()
	got := make([]float32, mw.NumParams)
	for i := range got {
		got[i] = 99 // overwritten
	}
	loss := mw.GradientOfLogits(ws, p, x, got, func(logits, dLogits []float32) float64 {
		l, _ := softmaxCE(logits, labels, mw.NumClasses, dLogits, 1/float32(len(labels)))
		return l
	})
	if math.Abs(loss-wantLoss) > 1e-9*math.Abs(wantLoss) || ws.Seed() != seed {
		t.Errorf("loss %v, want %v; seed %d after, want %d", loss, wantLoss, ws.Seed(), seed)
	}
	for i := range want {
		if math.Abs(float64(got[i]-want[i])) > 1e-6 {
			t.Fatalf("gradient %d (%s): %v, want %v", i, tensorAt(mw, i), got[i], want[i])
		}
	}
}

func tensorAt(m *Model, i int) string {
	for _, pt := range m.Layout {
		if i >= pt.Offset && i < pt.Offset+pt.Size {
			return pt.Name
		}
	}
	return "?"
}
