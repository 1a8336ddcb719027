package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestCharLMLearnsPeriodicText trains charlm-tiny on windows of a short
// repeating text with Adam and then with plain SGD: after a few hundred
// steps the loss must be far below ln 256 (a uniform guess over bytes), and
// the model must predict the next byte at nearly every position once it
// has seen one period.
func TestCharLMLearnsPeriodicText(t *testing.T) {
	const text = "the quick brown fox jumps. "
	for _, tc := range []struct {
		opt   OptimizerSpec
		steps int
		want  float64
	}{
		{OptimizerSpec{Type: "adam", LR: 3e-3}, 150, 0.3},
		{OptimizerSpec{Type: "sgd", LR: 0.5}, 300, 0.5},
	} {
		t.Run(tc.opt.Type, func(t *testing.T) {
			m := mustPreset(t, "charlm-tiny")
			T := m.InputSize
			const batch = 8
			params := make([]float32, m.NumParams)
			grad := make([]float32, m.NumParams)
			m.Init(params, 1)
			opt := mustOpt(t, tc.opt, m.NumParams)
			r := rand.New(rand.NewPCG(1, 2))
			x := make([]float32, batch*T)
			labels := make([]int32, batch*T)
			window := func(e, start int) {
				for p := 0; p < T; p++ {
					x[e*T+p] = float32(text[(start+p)%len(text)])
					labels[e*T+p] = int32(text[(start+p+1)%len(text)])
				}
			}
			ws := m.NewWorkspace(batch)
			var first, last float64
			for step := 0; step < tc.steps; step++ {
				for e := 0; e < batch; e++ {
					window(e, r.IntN(len(text)))
				}
				loss, _ := m.Gradient(ws, params, x, labels, grad)
				loss /= float64(len(labels))
				if math.IsNaN(loss) {
					t.Fatalf("step %d: loss is NaN", step)
				}
				if step == 0 {
					first = loss
				}
				last = loss
				opt.Step(params, grad, 1)
			}
			// Held-out windows at every offset, positions after the first
			// period only (before it the text is not yet determined).
			var lossSum float64
			correct, counted := 0, 0
			for start := 0; start < len(text); start += batch {
				for e := 0; e < batch; e++ {
					window(e, start+e)
				}
				logits := m.Forward(ws, params, x)
				for e := 0; e < batch; e++ {
					for p := len(text); p < T; p++ {
						row := e*T + p
						l, c := softmaxCE(logits[row*256:(row+1)*256], labels[row:row+1], 256, nil, 0)
						lossSum += l
						correct += c
						counted++
					}
				}
			}
			t.Logf("%s: training loss %.3f -> %.3f over %d steps; held-out loss %.3f, %d/%d next bytes right",
				tc.opt.Type, first, last, tc.steps, lossSum/float64(counted), correct, counted)
			if first < math.Log(256)-1 {
				t.Errorf("first loss %.3f: a fresh model should be near ln 256 = %.3f", first, math.Log(256))
			}
			if last > tc.want {
				t.Errorf("training loss %.3f after %d steps, want < %.2f", last, tc.steps, tc.want)
			}
			if correct*10 < counted*9 {
				t.Errorf("held out: %d of %d next bytes right, want 90%%", correct, counted)
			}
		})
	}
}

// TestCausalAttentionBlocks: causal attention computed in blocks of rows
// (and of columns, backward) of any size, even or not, has the same
// gradient as the reference.
func TestCausalAttentionBlocks(t *testing.T) {
	defer func(b int) { attentionBlock = b }(attentionBlock)
	spec := ModelSpec{Input: []int{7}, Layers: []LayerSpec{
		{Type: "embedding", Vocab: 9, Units: 4, Positions: 7},
		{Type: "attention", Heads: 2, Causal: true},
		{Type: "dense", Units: 5},
	}}
	for _, b := range []int{1, 2, 3, 7} {
		attentionBlock = b
		t.Run(itoa(b), func(t *testing.T) { gradCheck(t, spec, 3, 1<<30, 0, uint64(b)) })
	}
}
