package nn

import (
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
)

// fdResult compares one analytic derivative with a central difference of the
// float64 reference loss.
type fdStats struct {
	checked, skipped int
	maxErr           float64 // largest |analytic - numeric| / tol
	maxKink          float64 // largest |forward - backward difference| / tol among checked points
}

// gradTol is the allowed |analytic - numeric|: the analytic gradient comes from
// float32 arithmetic, the numeric one from float64.
func gradTol(num float64) float64 { return 2e-6 + 2e-4*math.Abs(num) }

// checkFD perturbs v[i] (a float64 copy of parameters or inputs) by ±h and
// compares (f+ - f-)/2h with analytic. A point where the one-sided differences
// disagree sits on a kink (relu at 0, a maxpool switch); its central
// difference means nothing there, so it is skipped and counted.
func checkFD(t *testing.T, what string, v []float64, i int, analytic float64, f0 float64, loss func() float64, st *fdStats) {
	t.Helper()
	const h = 1e-6
	orig := v[i]
	v[i] = orig + h
	fp := loss()
	v[i] = orig - h
	fm := loss()
	v[i] = orig
	num := (fp - fm) / (2 * h)
	fwd, bwd := (fp-f0)/h, (f0-fm)/h
	if math.Abs(fwd-bwd) > gradTol(num) {
		st.skipped++
		return
	}
	st.checked++
	st.maxKink = math.Max(st.maxKink, math.Abs(fwd-bwd)/gradTol(num))
	err := math.Abs(analytic - num)
	st.maxErr = math.Max(st.maxErr, err/gradTol(num))
	if err > gradTol(num) {
		t.Errorf("%s: analytic %.7g, finite difference %.7g (diff %.3g)", what, analytic, num, err)
	}
}

// sample returns up to k distinct indices in [0, n) (all of them if n <= k).
func sample(r *rand.Rand, n, k int) []int {
	if n <= k {
		idx := make([]int, n)
		for i := range idx {
			idx[i] = i
		}
		return idx
	}
	return r.Perm(n)[:k]
}

// gradCheck runs Gradient on a random batch and checks, against central
// differences of the float64 reference, up to perTensor entries of every
// parameter tensor and (if perTensor > 0 for inputs) of the input gradient.
func gradCheck(t *testing.T, spec ModelSpec, n, perTensor, inputs int, seed uint64) {
	t.Helper()
	m, err := NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	checkModelGrad(t, m, n, perTensor, inputs, seed)
}

// gradCheckConvModes runs gradCheck with every conv2d layer forced into col
// mode and then into row mode, so both code paths are checked whatever the
// default choice for the layer shapes.
func gradCheckConvModes(t *testing.T, spec ModelSpec, n, perTensor, inputs int, seed uint64) {
	t.Helper()
	hasConv := false
	for _, l := range spec.Layers {
		hasConv = hasConv || l.Type == "conv2d"
	}
	if !hasConv {
		gradCheck(t, spec, n, perTensor, inputs, seed)
		return
	}
	for _, rowMode := range []bool{false, true} {
		m, err := NewModel(spec)
		if err != nil {
			t.Fatal(err)
		}
		m.top.walk(func(l Layer) {
			if c, ok := l.(*convLayer); ok {
				c.rowMode = rowMode
			}
		})
		t.Logf("rowMode %v", rowMode)
		checkModelGrad(t, m, n, perTensor, inputs, seed)
	}
}

func checkModelGrad(t *testing.T, m *Model, n, perTensor, inputs int, seed uint64) {
	t.Helper()
	r := rand.New(rand.NewPCG(seed, 7))
	params := make([]float32, m.NumParams)
	m.Init(params, int64(seed))
	// Non-zero biases, so bias gradients flow through every path.
	for _, pt := range m.Layout {
		if len(pt.Shape) == 1 {
			for j := pt.Offset; j < pt.Offset+pt.Size; j++ {
				params[j] = float32(r.NormFloat64() * 0.1)
			}
		}
	}
	x := make([]float32, n*m.InputSize)
	tokens := m.top.in.kind == shapeTokens
	for i := range x {
		if tokens {
			x[i] = float32(r.IntN(m.top.layers[0].(*embeddingLayer).vocab))
		} else {
			x[i] = float32(r.Float64()*2 - 1)
		}
	}
	labels := make([]int32, n*m.LabelsPerExample)
	for i := range labels {
		labels[i] = int32(r.IntN(m.NumClasses))
	}
	// maxBatch above n also exercises partial batches.
	ws := m.newWorkspace(n+2, true)
	ws.SetSeed(seed)
	grad := make([]float32, m.NumParams)
	for i := range grad {
		grad[i] = float32(math.NaN()) // Gradient must overwrite every entry
	}
	lossSum, _ := m.Gradient(ws, params, x, labels, grad)
	dx := ws.inputGrad()[:n*m.InputSize]

	ref := newRef(m)
	ref.train, ref.seed = true, seed
	p64, x64 := to64(params), to64(x)
	loss := func() float64 { return ref.meanLoss(p64, x64, labels) }
	f0 := loss()
	if math.Abs(lossSum/float64(len(labels))-f0) > 1e-5*(1+math.Abs(f0)) {
		t.Fatalf("mean loss %v, reference %v", lossSum/float64(len(labels)), f0)
	}
	var st fdStats
	for _, pt := range m.Layout {
		for _, j := range sample(r, pt.Size, perTensor) {
			i := pt.Offset + j
			checkFD(t, pt.Name+"["+itoa(j)+"]", p64, i, float64(grad[i]), f0, loss, &st)
		}
	}
	if tokens {
		inputs = 0 // token ids have no gradient
	}
	for _, i := range sample(r, len(x64), inputs) {
		checkFD(t, "input["+itoa(i)+"]", x64, i, float64(dx[i]), f0, loss, &st)
	}
	if st.skipped*10 > st.checked+st.skipped {
		t.Errorf("%d of %d points skipped as kinks; too many to trust the check", st.skipped, st.checked+st.skipped)
	}
	t.Logf("checked %d derivatives (%d kinks skipped), worst error %.3g of tolerance, worst one-sided disagreement %.3g", st.checked, st.skipped, st.maxErr, st.maxKink)
}

func itoa(i int) string {
	if i == 0 {
		return "0"
	}
	var b [20]byte
	p := len(b)
	for ; i > 0; i /= 10 {
		p--
		b[p] = byte('0' + i%10)
	}
	return string(b[p:])
}

// TestLayerGradients checks every layer type's backward pass, parameter and
// input gradients, against finite differences on small models: every
// parameter and every input is checked, with dense and conv2d layers in each
// of their GEMM arrangements.
func TestLayerGradients(t *testing.T) {
	cases := []struct {
		name string
		spec ModelSpec
	}{
		{"dense-relu", ModelSpec{Input: []int{1, 1, 6}, Layers: []LayerSpec{
			{Type: "dense", Units: 5}, {Type: "relu"}, {Type: "dense", Units: 3}}}},
		{"conv-stride2-pad1", ModelSpec{Input: []int{2, 7, 7}, Layers: []LayerSpec{
			{Type: "conv2d", Filters: 3, Kernel: 3, Stride: 2, Padding: 1}, {Type: "relu"}, {Type: "flatten"}, {Type: "dense", Units: 4}}}},
		{"conv-stride1-pad0-maxpool", ModelSpec{Input: []int{2, 6, 6}, Layers: []LayerSpec{
			{Type: "conv2d", Filters: 3, Kernel: 3}, {Type: "relu"}, {Type: "maxpool2d", Kernel: 2}, {Type: "flatten"}, {Type: "dense", Units: 3}}}},
		{"maxpool-overlapping-dense-on-spatial", ModelSpec{Input: []int{1, 7, 7}, Layers: []LayerSpec{
			{Type: "conv2d", Filters: 2, Kernel: 2}, {Type: "maxpool2d", Kernel: 3, Stride: 2}, {Type: "dense", Units: 3}}}},
		{"conv-stacked-nonsquare-stride2-pad2", ModelSpec{Input: []int{1, 5, 8}, Layers: []LayerSpec{
			{Type: "conv2d", Filters: 2, Kernel: 4, Stride: 2, Padding: 2}, {Type: "relu"},
			{Type: "conv2d", Filters: 3, Kernel: 2, Stride: 3, Padding: 1}, {Type: "flatten"}, {Type: "dense", Units: 2}}}},
		{"conv-1x1", ModelSpec{Input: []int{3, 4, 4}, Layers: []LayerSpec{
			{Type: "conv2d", Filters: 2, Kernel: 1}, {Type: "relu"}, {Type: "dense", Units: 3}}}},
		{"relu-flatten-first", ModelSpec{Input: []int{2, 2, 3}, Layers: []LayerSpec{
			{Type: "relu"}, {Type: "flatten"}, {Type: "dense", Units: 4}, {Type: "relu"}, {Type: "dense", Units: 3}}}},
		{"maxpool-first", ModelSpec{Input: []int{2, 4, 5}, Layers: []LayerSpec{
			{Type: "maxpool2d"}, {Type: "flatten"}, {Type: "dense", Units: 3}}}},
	}
	seq := func(layers ...LayerSpec) ModelSpec {
		return ModelSpec{Input: []int{5}, Layers: append([]LayerSpec{{Type: "embedding", Vocab: 7, Units: 6, Positions: 8}}, layers...)}
	}
	out := LayerSpec{Type: "dense", Units: 4}
	cases = append(cases, []struct {
		name string
		spec ModelSpec
	}{
		{"embedding-dense-per-position", seq(out)},
		{"embedding-without-positions", ModelSpec{Input: []int{4}, Layers: []LayerSpec{{Type: "embedding", Vocab: 5, Units: 3}, {Type: "dense", Units: 5}}}},
		{"layernorm-sequence", seq(LayerSpec{Type: "layernorm"}, out)},
		{"layernorm-flat-eps", ModelSpec{Input: []int{1, 2, 3}, Layers: []LayerSpec{{Type: "dense", Units: 5}, {Type: "layernorm", Eps: 0.1}, {Type: "dense", Units: 3}}}},
		{"attention-causal-2-heads", seq(LayerSpec{Type: "attention", Heads: 2, Causal: true}, out)},
		{"attention-full-1-head", seq(LayerSpec{Type: "attention", Heads: 1}, out)},
		{"attention-3-heads", seq(LayerSpec{Type: "attention", Heads: 3, Causal: true}, out)},
		{"gelu", seq(LayerSpec{Type: "dense", Units: 5}, LayerSpec{Type: "gelu"}, out)},
		{"gelu-flat", ModelSpec{Input: []int{1, 1, 4}, Layers: []LayerSpec{{Type: "dense", Units: 5}, {Type: "gelu"}, {Type: "dense", Units: 3}}}},
		{"residual", seq(LayerSpec{Type: "residual", Layers: []LayerSpec{{Type: "layernorm"}, {Type: "dense", Units: 9}, {Type: "gelu"}, {Type: "dense", Units: 6}}}, out)},
		{"residual-nested-relu", seq(LayerSpec{Type: "residual", Layers: []LayerSpec{
			{Type: "dense", Units: 6}, {Type: "relu"},
			{Type: "residual", Layers: []LayerSpec{{Type: "attention", Heads: 2, Causal: true}}}}}, out)},
		{"residual-flat", ModelSpec{Input: []int{1, 1, 4}, Layers: []LayerSpec{{Type: "flatten"}, {Type: "residual", Layers: []LayerSpec{{Type: "dense", Units: 4}, {Type: "relu"}}}, {Type: "dense", Units: 3}}}},
		{"dropout", seq(LayerSpec{Type: "dense", Units: 8}, LayerSpec{Type: "dropout", Rate: 0.3}, out)},
		{"dropout-in-residual", seq(LayerSpec{Type: "residual", Layers: []LayerSpec{{Type: "dense", Units: 6}, {Type: "dropout", Rate: 0.5}}}, out)},
		{"tied", seq(LayerSpec{Type: "layernorm"}, LayerSpec{Type: "dense", Tied: true})},
	}...)
	defer func() { denseForwardMode = 0 }()
	for _, mode := range []int{1, 2} {
		denseForwardMode = mode // dense forward by dots, then by axpys
		for ci, c := range cases {
			t.Run(fmt.Sprintf("%s/dense-mode-%d", c.name, mode), func(t *testing.T) {
				gradCheckConvModes(t, c.spec, 3, 1<<30, 1<<30, uint64(ci+1))
			})
		}
	}
}

// TestPresetGradients checks the full presets at batch 3 on a random sample
// of each parameter tensor and of the inputs.
func TestPresetGradients(t *testing.T) {
	for i, name := range PresetNames() {
		t.Run(name, func(t *testing.T) {
			spec, err := Preset(name)
			if err != nil {
				t.Fatal(err)
			}
			switch name {
			case "charlm", "gpt-mini":
				t.Skip("too large for the naive reference; charlm-tiny has the same layers")
			case "gpt-small":
				t.Skip("too large for the naive reference; TestTiedTransformerGradients checks its layers")
			case "charlm-tiny":
				gradCheck(t, spec, 2, 20, 0, uint64(100+i))
				return
			}
			gradCheck(t, spec, 3, 50, 50, uint64(100+i))
		})
	}
}

// TestSoftmaxCrossEntropy checks the loss against a direct float64 formula,
// its logit gradient against finite differences, stability for huge logits
// and the correct count.
func TestSoftmaxCrossEntropy(t *testing.T) {
	const classes = 4
	logits := []float32{1, 2, 3, 4, -1, 0.5, 0.25, -2, 3, 3, 1, 0}
	labels := []int32{3, 1, 0}
	d := make([]float32, len(logits))
	const scale = 1.0 / 3
	loss, correct := softmaxCE(logits, labels, classes, d, scale)
	ce := func(z []float64, lab int32) float64 {
		var s float64
		for _, v := range z {
			s += math.Exp(v)
		}
		return math.Log(s) - z[lab]
	}
	z64 := to64(logits)
	total := func() float64 {
		var s float64
		for e, lab := range labels {
			s += ce(z64[e*classes:(e+1)*classes], lab)
		}
		return s * scale
	}
	if want := total() / scale; math.Abs(loss-want) > 1e-6 {
		t.Errorf("loss %v, want %v", loss, want)
	}
	// Row 2 ties 3,3: the first maximum (class 0) wins, matching its label.
	if correct != 3 {
		t.Errorf("correct = %d, want 3", correct)
	}
	labels[2] = 1 // the tied runner-up does not count
	if _, c := softmaxCE(logits, labels, classes, nil, 0); c != 2 {
		t.Errorf("correct = %d with a tie lost, want 2", c)
	}
	labels[2] = 0
	var st fdStats
	f0 := total()
	for i := range z64 {
		checkFD(t, "logit["+itoa(i)+"]", z64, i, float64(d[i]), f0, total, &st)
	}
	// Huge logits must not overflow.
	big := []float32{1e4, -1e4, 3e4, 0}
	loss, _ = softmaxCE(big, []int32{0}, classes, d[:4], 1)
	if math.Abs(loss-2e4) > 1e-2 || math.IsNaN(float64(d[0])) {
		t.Errorf("huge logits: loss %v (want 2e4), dlogit %v", loss, d[:4])
	}
}
