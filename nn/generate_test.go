package nn

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// pick takes the argmax at temperature 0 (the first on a tie), draws by
// the softmax of logits/temperature otherwise, and repeats given the same
// rng state.
func TestPickSamplesTheSoftmax(t *testing.T) {
	logits := []float32{1, 3, 3, -2}
	if got := pick(logits, 0, nil); got != 1 {
		t.Fatalf("argmax = %d, want 1 (the first of the two largest)", got)
	}
	const temp, draws = 0.7, 200000
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, len(logits))
	for range draws {
		counts[pick(logits, temp, rng)]++
	}
	var sum float64
	for _, v := range logits {
		sum += math.Exp(float64(v) / temp)
	}
	for i, v := range logits {
		p := math.Exp(float64(v)/temp) / sum
		got := float64(counts[i]) / draws
		if math.Abs(got-p) > 4*math.Sqrt(p*(1-p)/draws)+1e-4 {
			t.Errorf("token %d drawn %.4f of the time, want %.4f", i, got, p)
		}
	}
	a, b := rand.New(rand.NewPCG(7, 7)), rand.New(rand.NewPCG(7, 7))
	for range 100 {
		if x, y := pick(logits, 1.3, a), pick(logits, 1.3, b); x != y {
			t.Fatal("the same rng state drew different tokens")
		}
	}
}

func TestGenerateRefusesAModelThatIsNotASequenceModel(t *testing.T) {
	m, err := NewModel(ModelSpec{Input: []int{1, 2, 2}, Layers: []LayerSpec{{Type: "dense", Units: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, m.NumParams)
	_, err = m.Generate(m.NewWorkspace(1), p, []int32{1}, 4, 0, nil)
	if err == nil || !strings.Contains(err.Error(), "not a token sequence") {
		t.Fatalf("Generate on an image model: %v", err)
	}
}

func tinyLM(t *testing.T) (*Model, []float32) {
	t.Helper()
	m := mustPreset(t, "charlm-tiny")
	p := make([]float32, m.NumParams)
	m.Init(p, 5)
	// Larger weights than Init's, so the logits differ clearly and the
	// argmax is not decided by rounding.
	rng := rand.New(rand.NewPCG(8, 9))
	for i := range p {
		p[i] += 0.2 * (2*rng.Float32() - 1)
	}
	return m, p
}

func argmaxRow(row []float32) int32 {
	best := 0
	for i, v := range row {
		if v > row[best] {
			best = i
		}
	}
	return int32(best)
}

// Generate on charlm-tiny: at temperature 0 each token is the argmax of
// the last fed position's logits, computed here by Forward on the context
// left-aligned; with fewer than t tokens what follows them does not
// matter (the model is causal); a prompt longer than t is read from its
// last t tokens; the same rng state gives the same sample; it allocates a
// fixed amount per call, not per token.
func TestGenerateOnACharacterModel(t *testing.T) {
	m, p := tinyLM(t)
	T := m.InputSize
	ws := m.NewWorkspace(1)
	prompt := []int32{'I', 'n', ' ', 't', 'h', 'e'}
	got, err := m.Generate(ws, p, prompt, 40, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 40 {
		t.Fatalf("%d tokens, want 40", len(got))
	}
	ctx := append([]int32(nil), prompt...)
	rng := rand.New(rand.NewPCG(1, 1))
	for i, tok := range got {
		win := ctx[max(0, len(ctx)-T):]
		x := make([]float32, T)
		for j := range x {
			if j < len(win) {
				x[j] = float32(win[j])
			} else {
				x[j] = float32(rng.IntN(256)) // anything: a causal model does not look
			}
		}
		logits := m.Forward(m.NewWorkspace(1), p, x)
		if want := argmaxRow(logits[(len(win)-1)*256 : len(win)*256]); tok != want {
			t.Fatalf("token %d: %d, want the argmax %d", i, tok, want)
		}
		ctx = append(ctx, tok)
	}

	long := make([]int32, 3*T)
	for i := range long {
		long[i] = int32(rng.IntN(256))
	}
	a, err := m.Generate(ws, p, long, 10, 0, nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := m.Generate(ws, p, long[len(long)-T:], 10, 0, nil)
	if !slices.Equal(a, b) {
		t.Fatalf("a prompt longer than the context gave %v; its last %d tokens give %v", a, T, b)
	}

	s1, _ := m.Generate(ws, p, prompt, 50, 1, rand.New(rand.NewPCG(3, 3)))
	s2, _ := m.Generate(ws, p, prompt, 50, 1, rand.New(rand.NewPCG(3, 3)))
	s3, _ := m.Generate(ws, p, prompt, 50, 1, rand.New(rand.NewPCG(4, 4)))
	if !slices.Equal(s1, s2) || slices.Equal(s1, s3) {
		t.Fatalf("samples: seed 3 %v and %v, seed 4 %v: want the same twice and another for another seed", s1, s2, s3)
	}

	allocs := testing.AllocsPerRun(5, func() { _, _ = m.Generate(ws, p, prompt, 20, 0.8, rng) })
	if allocs > 2 {
		t.Errorf("Generate allocates %v times per call, want at most 2 (the result and the input row)", allocs)
	}
}

func TestGenerateRefusesBadInput(t *testing.T) {
	m, p := tinyLM(t)
	ws := m.NewWorkspace(1)
	rng := rand.New(rand.NewPCG(1, 1))
	for _, c := range []struct {
		prompt []int32
		tokens int
		temp   float64
		rng    *rand.Rand
		params []float32
		want   string
	}{
		{nil, 5, 0, nil, p, "prompt is empty"},
		{[]int32{1, 256}, 5, 0, nil, p, "prompt token 1 is 256, outside the vocabulary 0..255"},
		{[]int32{-1}, 5, 0, nil, p, "prompt token 0 is -1"},
		{[]int32{1}, -1, 0, nil, p, "tokens must be >= 0"},
		{[]int32{1}, 5, -0.5, rng, p, "temperature must be a finite number >= 0"},
		{[]int32{1}, 5, math.NaN(), rng, p, "temperature must be a finite number >= 0"},
		{[]int32{1}, 5, 0.8, nil, p, "needs a random source"},
		{[]int32{1}, 5, 0, nil, p[:10], "10 parameters"},
	} {
		_, err := m.Generate(ws, c.params, c.prompt, c.tokens, c.temp, c.rng)
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("prompt %v, %d tokens, temperature %v: %v, want %q", c.prompt, c.tokens, c.temp, err, c.want)
		}
	}
}

// BenchmarkGenerateCharLM is one generated byte of charlm with a full
// context of 128: what bounds `crowdtrain sample`.
func BenchmarkGenerateCharLM(b *testing.B) {
	m := mustPreset(b, "charlm")
	p := make([]float32, m.NumParams)
	m.Init(p, 1)
	ws := m.NewWorkspace(1)
	prompt := make([]int32, m.InputSize)
	rng := rand.New(rand.NewPCG(1, 2))
	b.ResetTimer()
	for range b.N {
		if _, err := m.Generate(ws, p, prompt, 1, 0.8, rng); err != nil {
			b.Fatal(err)
		}
	}
}
