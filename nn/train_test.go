package nn

import (
	"math"
	"math/rand/v2"
	"testing"
)

// TestPartialBatch: a batch smaller than maxBatch gives exactly what a
// workspace of that size gives, and reusing a workspace across batch sizes
// leaves no stale state.
func TestPartialBatch(t *testing.T) {
	for _, name := range testPresets() {
		m := mustPreset(t, name)
		L := m.LabelsPerExample
		r := rand.New(rand.NewPCG(5, 6))
		params := make([]float32, m.NumParams)
		m.Init(params, 9)
		x, labels := randomData(r, m, 16)

		exact := m.NewWorkspace(5)
		want := make([]float32, m.NumParams)
		wl, wc := m.Gradient(exact, params, x[:5*m.InputSize], labels[:5*L], want)

		big := m.NewWorkspace(16)
		got := make([]float32, m.NumParams)
		m.Gradient(big, params, x, labels, got) // fill with a full batch first
		gl, gc := m.Gradient(big, params, x[:5*m.InputSize], labels[:5*L], got)
		if gl != wl || gc != wc {
			t.Errorf("%s: n=5 in maxBatch 16: loss %v correct %d; maxBatch 5: %v %d", name, gl, gc, wl, wc)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: grad[%d] = %v with maxBatch 16, %v with maxBatch 5", name, i, got[i], want[i])
			}
		}
		// Gradient of the mean: a batch of two identical examples gives
		// the single-example gradient.
		one := make([]float32, m.NumParams)
		m.Gradient(big, params, x[:m.InputSize], labels[:L], one)
		xx := append(append([]float32(nil), x[:m.InputSize]...), x[:m.InputSize]...)
		two := make([]float32, m.NumParams)
		l2, _ := m.Gradient(big, params, xx, append(append([]int32(nil), labels[:L]...), labels[:L]...), two)
		l1, _ := m.Gradient(big, params, x[:m.InputSize], labels[:L], one)
		if math.Abs(l2-2*l1) > 1e-5*math.Abs(l1) {
			t.Errorf("%s: loss sum of a doubled example %v, want %v", name, l2, 2*l1)
		}
		for i := range one {
			if math.Abs(float64(one[i]-two[i])) > 1e-6+1e-5*math.Abs(float64(one[i])) {
				t.Fatalf("%s: grad[%d] of doubled example %v, single %v", name, i, two[i], one[i])
			}
		}
	}
}

// TestEvaluateChunks: Evaluate over more examples than maxBatch equals the
// sum of evaluating each chunk, and matches Gradient's loss and count.
func TestEvaluateChunks(t *testing.T) {
	for _, name := range testPresets() {
		m := mustPreset(t, name)
		L := m.LabelsPerExample
		r := rand.New(rand.NewPCG(7, 8))
		params := make([]float32, m.NumParams)
		m.Init(params, 3)
		const total, maxBatch = 23, 7
		x, labels := randomData(r, m, total)
		ws := m.NewWorkspace(maxBatch)
		loss, correct := m.Evaluate(ws, params, x, labels)

		var sumLoss float64
		sumCorrect := 0
		grad := make([]float32, m.NumParams)
		for off := 0; off < total; off += maxBatch {
			n := min(maxBatch, total-off)
			xs, ls := x[off*m.InputSize:(off+n)*m.InputSize], labels[off*L:(off+n)*L]
			l, c := m.Evaluate(m.NewWorkspace(n), params, xs, ls)
			gl, gc := m.Gradient(ws, params, xs, ls, grad)
			if gl != l || gc != c {
				t.Errorf("%s: chunk at %d: Gradient loss %v correct %d, Evaluate %v %d", name, off, gl, gc, l, c)
			}
			sumLoss += l
			sumCorrect += c
		}
		if math.Abs(loss-sumLoss) > 1e-9*math.Abs(sumLoss) || correct != sumCorrect {
			t.Errorf("%s: Evaluate over %d = (%v, %d), sum of chunks (%v, %d)", name, total, loss, correct, sumLoss, sumCorrect)
		}
		if mean, chance := loss/float64(total*L), math.Log(float64(m.NumClasses)); mean < chance-1.5 || mean > chance+3 {
			t.Errorf("%s: mean loss %v of a fresh %d-class model is implausible", name, mean, m.NumClasses)
		}
		if l, c := m.Evaluate(ws, params, nil, nil); l != 0 || c != 0 {
			t.Errorf("%s: Evaluate of nothing = %v, %d", name, l, c)
		}
		// Forward gives the logits Evaluate scores.
		logits := m.Forward(ws, params, x[:3*m.InputSize])
		if len(logits) != 3*L*m.NumClasses {
			t.Errorf("%s: Forward returned %d logits", name, len(logits))
		}
		l, c := softmaxCE(logits, labels[:3*L], m.NumClasses, nil, 0)
		el, ec := m.Evaluate(ws, params, x[:3*m.InputSize], labels[:3*L])
		if l != el || c != ec {
			t.Errorf("%s: Forward scores (%v, %d), Evaluate (%v, %d)", name, l, c, el, ec)
		}
	}
}

// TestNoAllocs: the hot paths allocate nothing.
func TestNoAllocs(t *testing.T) {
	for _, name := range PresetNames() {
		m := mustPreset(t, name)
		r := rand.New(rand.NewPCG(1, 1))
		params := make([]float32, m.NumParams)
		grad := make([]float32, m.NumParams)
		m.Init(params, 1)
		batch := 64
		switch name {
		case "charlm":
			batch = 12 // the same code as batch 64, in a fraction of the time
		case "gpt-small":
			batch = 1
		}
		x, labels := randomData(r, m, batch)
		ws := m.NewWorkspace(batch)
		if a := testing.AllocsPerRun(3, func() { m.Gradient(ws, params, x, labels, grad) }); a != 0 {
			t.Errorf("%s: Gradient allocates %v times per call", name, a)
		}
		ws10 := m.NewWorkspace(10)
		if a := testing.AllocsPerRun(3, func() { m.Evaluate(ws10, params, x, labels) }); a != 0 {
			t.Errorf("%s: Evaluate allocates %v times per call", name, a)
		}
		for _, s := range []OptimizerSpec{{Type: "sgd", LR: 0.1}, {Type: "momentum", LR: 0.1, Nesterov: true}, {Type: "adam", LR: 0.1}} {
			o := mustOpt(t, s, m.NumParams)
			if a := testing.AllocsPerRun(3, func() { o.Step(params, grad, 0.5) }); a != 0 {
				t.Errorf("%s: Step allocates %v times per call", s.Type, a)
			}
		}
	}
}

// TestPanics: programmer errors panic with a message instead of corrupting
// memory or silently computing garbage.
func TestPanics(t *testing.T) {
	m := mustPreset(t, "mnist-mlp")
	other := mustPreset(t, "mnist-mlp")
	params := make([]float32, m.NumParams)
	grad := make([]float32, m.NumParams)
	ws := m.NewWorkspace(4)
	x := make([]float32, 4*m.InputSize)
	cases := map[string]func(){
		"batch too big":    func() { m.Gradient(ws, params, make([]float32, 5*m.InputSize), make([]int32, 5), grad) },
		"empty batch":      func() { m.Gradient(ws, params, nil, nil, grad) },
		"short x":          func() { m.Gradient(ws, params, x[:10], make([]int32, 4), grad) },
		"short params":     func() { m.Gradient(ws, params[:10], x, make([]int32, 4), grad) },
		"short grad":       func() { m.Gradient(ws, params, x, make([]int32, 4), grad[:10]) },
		"label 10":         func() { m.Gradient(ws, params, x, []int32{0, 1, 10, 2}, grad) },
		"negative label":   func() { m.Evaluate(ws, params, x, []int32{0, 1, -1, 2}) },
		"foreign ws":       func() { other.Gradient(ws, params, x, make([]int32, 4), grad) },
		"zero maxBatch":    func() { m.NewWorkspace(0) },
		"Init short":       func() { m.Init(params[:3], 1) },
		"SGDStep mismatch": func() { SGDStep(params, grad[:3], 1) },
	}
	for name, f := range cases {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			f()
		}()
	}
}

// TestLearns trains a small MLP and a small CNN on a synthetic separable
// problem (each class is a noisy copy of its own random prototype) and
// checks that the training loss falls and held-out accuracy is high.
func TestLearns(t *testing.T) {
	specs := map[string]ModelSpec{
		"mlp": {Input: []int{1, 6, 6}, Layers: []LayerSpec{
			{Type: "dense", Units: 32}, {Type: "relu"}, {Type: "dense", Units: 16}, {Type: "relu"}, {Type: "dense", Units: 4}}},
		"cnn": {Input: []int{1, 6, 6}, Layers: []LayerSpec{
			{Type: "conv2d", Filters: 4, Kernel: 3, Padding: 1}, {Type: "relu"}, {Type: "maxpool2d"},
			{Type: "flatten"}, {Type: "dense", Units: 4}}},
	}
	for name, spec := range specs {
		t.Run(name, func(t *testing.T) {
			m := mustModel(t, spec)
			r := rand.New(rand.NewPCG(11, 12))
			const classes, n = 4, 256
			protos := make([]float32, classes*m.InputSize)
			for i := range protos {
				protos[i] = float32(r.NormFloat64())
			}
			draw := func(n int) ([]float32, []int32) {
				x := make([]float32, n*m.InputSize)
				labels := make([]int32, n)
				for e := range labels {
					c := r.IntN(classes)
					labels[e] = int32(c)
					for j := 0; j < m.InputSize; j++ {
						x[e*m.InputSize+j] = protos[c*m.InputSize+j] + float32(r.NormFloat64()*1.5)
					}
				}
				return x, labels
			}
			x, labels := draw(n)
			heldX, heldLabels := draw(n)
			params := make([]float32, m.NumParams)
			grad := make([]float32, m.NumParams)
			m.Init(params, 5)
			ws := m.NewWorkspace(32)
			opt := mustOpt(t, OptimizerSpec{Type: "momentum", LR: 0.05}, m.NumParams)
			before, _ := m.Evaluate(ws, params, x, labels)
			for epoch := 0; epoch < 10; epoch++ {
				for off := 0; off < n; off += 32 {
					m.Gradient(ws, params, x[off*m.InputSize:(off+32)*m.InputSize], labels[off:off+32], grad)
					opt.Step(params, grad, 1)
				}
			}
			after, _ := m.Evaluate(ws, params, x, labels)
			_, correct := m.Evaluate(ws, params, heldX, heldLabels)
			t.Logf("mean training loss %.3f -> %.3f, held-out accuracy %d/%d", before/n, after/n, correct, n)
			if after > 0.25*before || correct < n*85/100 {
				t.Errorf("did not learn: mean training loss %.3f -> %.3f, held-out accuracy %d/%d", before/n, after/n, correct, n)
			}
		})
	}
}

// TestConcurrentWorkspaces: one Model, one Workspace per goroutine, gives
// the same results as running alone (the Model holds no mutable state; run
// with -race to check).
func TestConcurrentWorkspaces(t *testing.T) {
	m := mustPreset(t, "mnist-cnn")
	r := rand.New(rand.NewPCG(2, 3))
	params := make([]float32, m.NumParams)
	m.Init(params, 4)
	x, labels := randomData(r, m, 8)
	want := make([]float32, m.NumParams)
	m.Gradient(m.NewWorkspace(8), params, x, labels, want)
	done := make(chan []float32)
	for g := 0; g < 2; g++ {
		go func() {
			ws := m.NewWorkspace(8)
			grad := make([]float32, m.NumParams)
			for i := 0; i < 3; i++ {
				m.Gradient(ws, params, x, labels, grad)
			}
			done <- grad
		}()
	}
	for g := 0; g < 2; g++ {
		got := <-done
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("goroutine result differs at %d: %v vs %v", i, got[i], want[i])
			}
		}
	}
}

// testPresets are the presets the whole-model tests run: every one but
// charlm, gpt-mini and gpt-small, which are slow to run many times and have the same
// layers as charlm-tiny and the tiny tied transformer of the gradient
// tests.
func testPresets() []string {
	var names []string
	for _, n := range PresetNames() {
		if n != "charlm" && n != "gpt-mini" && n != "gpt-small" {
			names = append(names, n)
		}
	}
	return names
}
