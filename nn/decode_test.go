package nn

import (
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
)

// decodeModel builds spec with parameters that Init and then a random
// nudge of every one (biases and layer norms included) make far from
// symmetric.
func decodeModel(t *testing.T, spec ModelSpec) (*Model, []float32) {
	t.Helper()
	m, err := NewModel(spec)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, m.NumParams)
	m.Init(p, 3)
	rng := rand.New(rand.NewPCG(4, 4))
	for i := range p {
		p[i] += float32(0.2 * (2*rng.Float64() - 1))
	}
	return m, p
}

// decodeSpecs are the sequence models the cache must reproduce: the GPT
// blocks untied and tied, with uneven heads, and an MLP of relu and
// dropout around a non-residual attention.
func decodeSpecs() map[string]ModelSpec {
	return map[string]ModelSpec{
		"gpt":      Transformer(TransformerConfig{Context: 13, Width: 12, Blocks: 2, Heads: 3, Vocab: 17}),
		"gpt-tied": Transformer(TransformerConfig{Context: 9, Width: 8, Blocks: 1, Heads: 2, Vocab: 11, Tied: true}),
		"mixed": {Input: []int{7}, Layers: []LayerSpec{
			{Type: TypeEmbedding, Vocab: 9, Units: 6, Positions: 10},
			{Type: TypeAttention, Heads: 1, Causal: true},
			{Type: TypeDense, Units: 10}, {Type: TypeReLU}, {Type: TypeDropout, Rate: 0.3},
			{Type: TypeLayerNorm}, {Type: TypeGELU},
			{Type: TypeDense, Units: 9},
		}},
	}
}

// The cache's logits at every position are those of a full forward pass
// over the same tokens.
func TestDecoderLogitsMatchFullRecomputation(t *testing.T) {
	for name, spec := range decodeSpecs() {
		m, p := decodeModel(t, spec)
		T, V := m.InputSize, m.NumClasses
		rng := rand.New(rand.NewPCG(9, 9))
		x := make([]float32, T)
		toks := make([]int32, T)
		for i := range toks {
			toks[i] = int32(rng.IntN(m.embeddingVocab()))
			x[i] = float32(toks[i])
		}
		full := slices.Clone(m.Forward(m.NewWorkspace(1), p, x))
		d, err := m.NewDecoder()
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		for run := range 2 { // a second sequence after Reset reuses the cache
			d.Reset()
			for pos, tok := range toks {
				got, err := d.Step(p, tok)
				if err != nil {
					t.Fatalf("%s: step %d: %v", name, pos, err)
				}
				want := full[pos*V : (pos+1)*V]
				for j := range want {
					if diff := math.Abs(float64(got[j] - want[j])); diff > 1e-5*max(1, math.Abs(float64(want[j]))) {
						t.Fatalf("%s, run %d: position %d logit %d: cache %.7g, full forward %.7g", name, run, pos, j, got[j], want[j])
					}
				}
			}
			if d.Len() != T {
				t.Fatalf("%s: Len %d after %d steps", name, d.Len(), T)
			}
		}
		if _, err := d.Step(p, 0); err == nil || !strings.Contains(err.Error(), "context of") {
			t.Errorf("%s: a step past the context: %v", name, err)
		}
	}
}

// Generate's tokens are those the uncached Model.Generate draws from the
// same rng state, greedy and sampled, and each log-probability is that
// token's under the full forward pass's softmax at the same temperature.
func TestDecoderGenerateMatchesUncachedGenerate(t *testing.T) {
	m, p := decodeModel(t, decodeSpecs()["gpt"])
	d, err := m.NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	ws := m.NewWorkspace(1)
	prompt := []int32{3, 1, 4}
	for _, temp := range []float64{0, 0.7, 1, 2.5} {
		for seed := range uint64(5) {
			s, err := d.Generate(p, prompt, 10, temp, rand.New(rand.NewPCG(seed, 1)), nil)
			if err != nil {
				t.Fatal(err)
			}
			want, err := m.Generate(ws, p, prompt, 10, temp, rand.New(rand.NewPCG(seed, 1)))
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(s.Tokens, want) || len(s.LogProbs) != len(s.Tokens) {
				t.Fatalf("temperature %v, seed %d: cached %v (%d log-probs), uncached %v", temp, seed, s.Tokens, len(s.LogProbs), want)
			}
			again, _ := d.Generate(p, prompt, 10, temp, rand.New(rand.NewPCG(seed, 1)), nil)
			if !slices.Equal(again.Tokens, s.Tokens) || !slices.Equal(again.LogProbs, s.LogProbs) {
				t.Fatalf("temperature %v, seed %d: the same seed drew %v then %v", temp, seed, s.Tokens, again.Tokens)
			}
			seq := append(slices.Clone(prompt), s.Tokens...)
			x := make([]float32, m.InputSize)
			for i, tok := range seq {
				x[i] = float32(tok)
			}
			logits := m.Forward(ws, p, x)
			V := m.NumClasses
			tt := temp
			if tt == 0 {
				tt = 1
			}
			for i, lp := range s.LogProbs {
				row := logits[(len(prompt)+i-1)*V : (len(prompt)+i)*V]
				var z float64
				for _, v := range row {
					z += math.Exp(float64(v) / tt)
				}
				want := float64(row[s.Tokens[i]])/tt - math.Log(z)
				if math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 0) || lp > 0 || math.Abs(float64(lp)-want) > 1e-5 {
					t.Fatalf("temperature %v: log-prob %d is %v, want %v (finite, <= 0)", temp, i, lp, want)
				}
			}
		}
	}
}

func TestDecoderGenerateStopsAndChecks(t *testing.T) {
	m, p := decodeModel(t, decodeSpecs()["gpt"])
	d, _ := m.NewDecoder()
	full, _ := d.Generate(p, []int32{2}, 12, 1, rand.New(rand.NewPCG(1, 1)), nil)
	stop := full.Tokens[4]
	first := slices.Index(full.Tokens, stop)
	s, err := d.Generate(p, []int32{2}, 12, 1, rand.New(rand.NewPCG(1, 1)), []int32{stop})
	if err != nil || !slices.Equal(s.Tokens, full.Tokens[:first+1]) {
		t.Fatalf("stop at %d: %v (%v), want %v", stop, s.Tokens, err, full.Tokens[:first+1])
	}
	for _, c := range []struct {
		prompt []int32
		n      int
		temp   float64
		rng    *rand.Rand
		want   string
	}{
		{nil, 3, 0, nil, "prompt is empty"},
		{[]int32{1}, 13, 0, nil, "do not fit"},
		{[]int32{1}, -1, 0, nil, ">= 0"},
		{[]int32{1}, 3, 1, nil, "random source"},
		{[]int32{1}, 3, math.NaN(), nil, "temperature"},
		{[]int32{17}, 3, 0, nil, "outside the vocabulary"},
	} {
		if _, err := d.Generate(p, c.prompt, c.n, c.temp, c.rng, nil); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Generate(%v, %d, %v): %v, want %q", c.prompt, c.n, c.temp, err, c.want)
		}
	}
	if _, err := d.Step(make([]float32, 3), 1); err == nil || !strings.Contains(err.Error(), "parameters") {
		t.Errorf("Step with the wrong parameters: %v", err)
	}
	d.Reset()
	d.Step(p, 1)
	if _, err := d.Step(slices.Clone(p), 1); err == nil || !strings.Contains(err.Error(), "Reset first") {
		t.Errorf("Step with other parameters mid-sequence: %v", err)
	}
}

func TestNewDecoderRefusesWhatItCannotCache(t *testing.T) {
	for spec, want := range map[*ModelSpec]string{
		{Input: []int{4}, Layers: []LayerSpec{{Type: TypeEmbedding, Vocab: 5, Units: 4}, {Type: TypeAttention, Heads: 1}, {Type: TypeDense, Units: 5}}}: "not causal",
		{Input: []int{4}, Layers: []LayerSpec{{Type: TypeEmbedding, Vocab: 5, Units: 4}, {Type: TypeFlatten}, {Type: TypeDense, Units: 5}}}:             "token ids [t] in and one row per position",
		{Input: []int{1, 2, 2}, Layers: []LayerSpec{{Type: TypeDense, Units: 3}}}:                                                                       "token ids [t]",
	} {
		m, err := NewModel(*spec)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := m.NewDecoder(); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%v: NewDecoder error %v, want %q", spec.Layers, err, want)
		}
	}
}
