package rl

import (
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
)

func TestAdvantagesByHand(t *testing.T) {
	// Rewards 1, 0, 0, 1: mean 0.5, population std 0.5, so each
	// advantage is ±0.5/(0.5+eps).
	got := Advantages([]float64{1, 0, 0, 1}, 1e-4)
	a := 0.5 / 0.5001
	for i, want := range []float64{a, -a, -a, a} {
		if math.Abs(got[i]-want) > 1e-12 {
			t.Errorf("advantage %d = %v, want %v", i, got[i], want)
		}
	}
	// Rewards 3, 0, 0: mean 1, std sqrt(2), advantages 2/(√2+eps), -1/(√2+eps).
	got = Advantages([]float64{3, 0, 0}, 1e-4)
	s := math.Sqrt2 + 1e-4
	for i, want := range []float64{2 / s, -1 / s, -1 / s} {
		if math.Abs(got[i]-want) > 1e-12 {
			t.Errorf("advantage %d of 3, 0, 0 = %v, want %v", i, got[i], want)
		}
	}
	for _, rs := range [][]float64{{1}, {0.5, 0.5, 0.5}} {
		for _, v := range Advantages(rs, 1e-4) {
			if v != 0 {
				t.Errorf("rewards %v: advantage %v, want 0 (nothing to prefer)", rs, v)
			}
		}
	}
}

// uniformModel is an embedding and a dense layer over 2 tokens whose
// dense weight and bias are zero, so every position's logits are 0 and
// every token has probability 1/2: log-probabilities a test knows by hand.
func uniformModel(t *testing.T) (*nn.Model, []float32) {
	t.Helper()
	m, err := nn.NewModel(nn.ModelSpec{Input: []int{3}, Layers: []nn.LayerSpec{
		{Type: nn.TypeEmbedding, Vocab: 2, Units: 2},
		{Type: nn.TypeDense, Units: 2},
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, m.NumParams)
	emb, _ := m.Tensor(p, "0.embedding.weight")
	copy(emb, []float32{0.3, -0.7, 1.1, 0.4})
	return m, p
}

// One group of two completions worked out by hand. Rewards 1 and 0 give
// advantages +A and -A with A = 0.5/(0.5+1e-4). Every token's policy
// log-probability is ln 1/2.
//
//	a (reward 1): token 1 logged at ln 0.4, ρ = 1.25: min(1.25A, 1.2A) = 1.2A, clipped
//	              token 0 logged at ln 0.5, ρ = 1:    A
//	b (reward 0): token 1 logged at ln 0.4, ρ = 1.25: min(-1.25A, -1.2A) = -1.25A
//
// The loss is -(1.2A + A - 1.25A)/3 = -0.95A/3, one token in three is
// clipped. With zero dense weights the logits are the bias, so the bias's
// gradient is the sum of the logits' gradients, (dL/dlogp)·(onehot - 1/2)
// per token with dL/dlogp = -ρA/3 where unclipped: a's token 0 gives
// (-A/3)·(1/2, -1/2), b's token 1 (1.25A/3)·(-1/2, 1/2), in all
// (-0.375A, 0.375A). A KL penalty of 0.1 against a reference that gave
// every token ln 1/4 adds 0.1·k3 per token, k3 = e^{-ln 2} + ln 2 - 1.
func TestGRPOLossByHand(t *testing.T) {
	m, p := uniformModel(t)
	ln := func(x float64) float32 { return float32(math.Log(x)) }
	groups := []Group{{
		{Prompt: []int32{0}, Tokens: []int32{1, 0}, OldLogProbs: []float32{ln(0.4), ln(0.5)}, RefLogProbs: []float32{ln(0.25), ln(0.25)}, Reward: 1},
		{Prompt: []int32{0}, Tokens: []int32{1}, OldLogProbs: []float32{ln(0.4)}, RefLogProbs: []float32{ln(0.25)}, Reward: 0},
	}}
	A := 0.5 / 0.5001
	grad := make([]float32, m.NumParams)
	st, err := Loss(m, m.NewWorkspace(4), p, groups, Config{}, grad)
	if err != nil {
		t.Fatal(err)
	}
	k3 := 0.5 + math.Ln2 - 1
	if math.Abs(st.Loss-(-0.95*A/3)) > 1e-6 || st.Tokens != 3 || math.Abs(st.ClipFraction-1.0/3) > 1e-12 || math.Abs(st.KL-k3) > 1e-6 {
		t.Errorf("stats %+v, want loss %v, 3 tokens, clip fraction 1/3, KL %v", st, -0.95*A/3, k3)
	}
	if math.Abs(st.Advantages[0][0]-A) > 1e-12 || math.Abs(st.Advantages[0][1]+A) > 1e-12 {
		t.Errorf("advantages %v, want ±%v", st.Advantages, A)
	}
	bias, _ := m.Tensor(grad, "1.dense.bias")
	if math.Abs(float64(bias[0])+0.375*A) > 1e-6 || math.Abs(float64(bias[1])-0.375*A) > 1e-6 {
		t.Errorf("bias gradient %v, want (%v, %v)", bias, -0.375*A, 0.375*A)
	}
	// With the KL penalty: each token adds 0.1·k3 to the loss and
	// 0.1·(1 - e^{ref-logp}) = 0.05 to dL/dlogp, /3 for the mean.
	st, err = Loss(m, m.NewWorkspace(1), p, groups, Config{KLCoef: 0.1}, grad) // one completion at a time
	if err != nil {
		t.Fatal(err)
	}
	if want := -0.95*A/3 + 0.1*k3; math.Abs(st.Loss-want) > 1e-6 {
		t.Errorf("loss with kl_coef 0.1: %v, want %v", st.Loss, want)
	}
	// Extra per token: (0.05/3)·(onehot - 1/2): tokens 1, 0, 1 give
	// (0.05/3)·(-1/2, 1/2) once net, so bias gains (-0.025/3, 0.025/3).
	if d := float64(bias[0]) - (-0.375*A - 0.025/3); math.Abs(d) > 1e-6 {
		t.Errorf("bias gradient with KL %v, want (%v, %v)", bias, -0.375*A-0.025/3, 0.375*A+0.025/3)
	}
	if d := float64(bias[1]) - (0.375*A + 0.025/3); math.Abs(d) > 1e-6 {
		t.Errorf("bias gradient with KL %v, want (%v, %v)", bias, -0.375*A-0.025/3, 0.375*A+0.025/3)
	}
}

// tinyGPT is a small transformer with parameters nudged off their
// initialisation.
func tinyGPT(t *testing.T) (*nn.Model, []float32) {
	t.Helper()
	m, err := nn.NewModel(nn.Transformer(nn.TransformerConfig{Context: 8, Width: 8, Blocks: 1, Heads: 2, Vocab: 7}))
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, m.NumParams)
	m.Init(p, 11)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range p {
		p[i] += float32(0.3 * (2*rng.Float64() - 1))
	}
	return m, p
}

// sampledBatch draws groups of completions with the model's Decoder and
// logs old log-probabilities shifted from the sampler's by amounts that
// put some ratios inside the clip range and some outside on either side
// (well away from the edges, so a finite difference does not cross one).
func sampledBatch(t *testing.T, m *nn.Model, p []float32) []Group {
	t.Helper()
	d, err := m.NewDecoder()
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	shifts := []float32{-0.5, -0.05, 0.05, 0.5}
	var groups []Group
	for g := range 2 {
		prompt := []int32{int32(g + 1), 3}
		var grp Group
		for i := range 3 {
			s, err := d.Generate(p, prompt, 3+i, 1, rng, nil)
			if err != nil {
				t.Fatal(err)
			}
			c := Completion{Prompt: prompt, Tokens: s.Tokens, Reward: float64((g + i) % 2), RefLogProbs: make([]float32, len(s.Tokens))}
			for j, lp := range s.LogProbs {
				old := lp + shifts[(i+j+g)%4]
				if old > 0 { // the other side: the ratio stays as far from the clip edges
					old = lp - shifts[(i+j+g)%4]
				}
				c.OldLogProbs = append(c.OldLogProbs, old)
				c.RefLogProbs[j] = min(lp-0.3*float32(j%3), 0)
			}
			grp = append(grp, c)
		}
		groups = append(groups, grp)
	}
	return groups
}

// The gradient is the loss's: central differences on every parameter of
// a tiny transformer, with clipping on both sides and the KL penalty on.
func TestGRPOGradientMatchesFiniteDifferences(t *testing.T) {
	m, p := tinyGPT(t)
	groups := sampledBatch(t, m, p)
	cfg := Config{KLCoef: 0.05}
	ws := m.NewWorkspace(4) // two chunks of completions
	grad := make([]float32, m.NumParams)
	st, err := Loss(m, ws, p, groups, cfg, grad)
	if err != nil {
		t.Fatal(err)
	}
	if st.ClipFraction == 0 || st.ClipFraction == 1 {
		t.Fatalf("clip fraction %v: the batch should clip some tokens and not others", st.ClipFraction)
	}
	scratch := make([]float32, m.NumParams)
	loss := func(q []float32) float64 {
		s, err := Loss(m, ws, q, groups, cfg, scratch)
		if err != nil {
			t.Fatal(err)
		}
		return s.Loss
	}
	const h = 1e-3 // small enough that no token's ratio crosses a clip edge
	var diff, norm float64
	q := append([]float32(nil), p...)
	for i := range p {
		q[i] = p[i] + h
		up := loss(q)
		q[i] = p[i] - h
		down := loss(q)
		q[i] = p[i]
		fd := (up - down) / (2 * h)
		if d := math.Abs(fd - float64(grad[i])); d > 2e-4+2e-2*math.Abs(fd) {
			t.Errorf("parameter %d: gradient %.6g, finite difference %.6g", i, grad[i], fd)
		}
		diff += (fd - float64(grad[i])) * (fd - float64(grad[i]))
		norm += fd * fd
	}
	if rel := math.Sqrt(diff / norm); !(rel < 1e-3) || norm == 0 {
		t.Errorf("gradient %.3g relative from the finite differences (norm %.3g)", rel, math.Sqrt(norm))
	}
}

// Logged log-probabilities equal to the policy's give ratios of 1: the
// loss is then -mean(A) per token (plus nothing from KL against itself),
// and LogProbs returns what the sampler logged.
func TestGRPOOnPolicy(t *testing.T) {
	m, p := tinyGPT(t)
	d, _ := m.NewDecoder()
	ws := m.NewWorkspace(8)
	rng := rand.New(rand.NewPCG(3, 3))
	var grp Group
	var want float64
	tokens := 0
	rewards := []float64{1, 0, 0, 1, 1}
	adv := Advantages(rewards, DefaultEps)
	for i, r := range rewards {
		s, err := d.Generate(p, []int32{2}, 4, 0.8, rng, nil)
		if err != nil {
			t.Fatal(err)
		}
		lp, err := LogProbs(m, ws, p, []int32{2}, s.Tokens, 0.8)
		if err != nil {
			t.Fatal(err)
		}
		for j := range lp {
			if math.Abs(float64(lp[j]-s.LogProbs[j])) > 1e-5 {
				t.Fatalf("LogProbs %v, the sampler logged %v", lp, s.LogProbs)
			}
		}
		grp = append(grp, Completion{Prompt: []int32{2}, Tokens: s.Tokens, OldLogProbs: s.LogProbs, RefLogProbs: lp, Reward: r})
		want -= adv[i] * float64(len(s.Tokens))
		tokens += len(s.Tokens)
	}
	grad := make([]float32, m.NumParams)
	st, err := Loss(m, ws, p, []Group{grp}, Config{Temperature: 0.8, KLCoef: 0.1}, grad)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(st.Loss-want/float64(tokens)) > 1e-4 || st.ClipFraction != 0 || math.Abs(st.KL) > 1e-6 {
		t.Errorf("on policy: %+v, want loss %v, nothing clipped, KL 0", st, want/float64(tokens))
	}
}

func TestGRPOErrors(t *testing.T) {
	m, p := uniformModel(t)
	ws := m.NewWorkspace(2)
	grad := make([]float32, m.NumParams)
	ok := Completion{Prompt: []int32{0}, Tokens: []int32{1}, OldLogProbs: []float32{-0.5}, Reward: 1}
	with := func(f func(c *Completion)) []Group {
		c := ok
		f(&c)
		return []Group{{ok, c}}
	}
	for _, c := range []struct {
		groups []Group
		cfg    Config
		want   string
	}{
		{nil, Config{}, "no groups"},
		{[]Group{{}}, Config{}, "group 0 is empty"},
		{with(func(c *Completion) { c.Tokens = nil; c.OldLogProbs = nil }), Config{}, "completion 1: 1 prompt and 0 completion tokens"},
		{with(func(c *Completion) { c.Tokens = []int32{1, 1, 1} }), Config{}, "do not fit the context of 3"},
		{with(func(c *Completion) { c.OldLogProbs = nil }), Config{}, "0 old log-probabilities for 1 tokens"},
		{with(func(c *Completion) { c.OldLogProbs = []float32{0.5} }), Config{}, "old log-probability 0 is 0.5"},
		{with(func(c *Completion) { c.OldLogProbs = []float32{float32(math.NaN())} }), Config{}, "is NaN"},
		{with(func(c *Completion) { c.Tokens = []int32{2} }), Config{}, "token 2 is outside the vocabulary 0..1"},
		{with(func(c *Completion) { c.Reward = math.Inf(1) }), Config{}, "reward +Inf"},
		{with(func(c *Completion) {}), Config{KLCoef: 0.1}, "needs the reference policy's log-probabilities"},
		{with(func(c *Completion) { c.RefLogProbs = []float32{-1, -1} }), Config{}, "2 reference log-probabilities for 1 tokens"},
		{with(func(c *Completion) {}), Config{Clip: 1.5}, "clip must be in (0, 1)"},
		{with(func(c *Completion) {}), Config{KLCoef: -1}, "kl_coef"},
		{with(func(c *Completion) {}), Config{Temperature: -1}, "temperature"},
		{with(func(c *Completion) {}), Config{Eps: math.NaN()}, "eps"},
	} {
		if _, err := Loss(m, ws, p, c.groups, c.cfg, grad); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("error %v, want %q", err, c.want)
		}
	}
}

// Given the advantages Loss computes from the rewards, LossWithAdvantages
// gives the same loss and gradient, and reads no reward.
func TestLossWithAdvantagesIsLossOfThoseAdvantages(t *testing.T) {
	m, p := tinyGPT(t)
	groups := sampledBatch(t, m, p)
	ws := m.NewWorkspace(4)
	want := make([]float32, m.NumParams)
	st, err := Loss(m, ws, p, groups, Config{}, want)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range groups {
		for i := range g {
			g[i].Reward = math.NaN() // never read
		}
	}
	got := make([]float32, m.NumParams)
	st2, err := LossWithAdvantages(m, ws, p, groups, st.Advantages, Config{}, got)
	if err != nil {
		t.Fatal(err)
	}
	if st2.Loss != st.Loss {
		t.Errorf("loss %v, want %v", st2.Loss, st.Loss)
	}
	for i := range got {
		if got[i] != want[i] {
			t.Fatalf("gradient %d: %v, want %v", i, got[i], want[i])
		}
	}
	if _, err := LossWithAdvantages(m, ws, p, groups, st.Advantages[:1], Config{}, got); err == nil {
		t.Error("too few groups of advantages accepted")
	}
	bad := [][]float64{append([]float64{math.Inf(1)}, st.Advantages[0][1:]...)}
	bad = append(bad, st.Advantages[1:]...)
	if _, err := LossWithAdvantages(m, ws, p, groups, bad, Config{}, got); err == nil || !strings.Contains(err.Error(), "advantage") {
		t.Errorf("an infinite advantage: %v", err)
	}
}
