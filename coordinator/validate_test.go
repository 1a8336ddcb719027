package coordinator

import (
	"errors"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/engine"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/nn"
)

// validationSetup loads preset's model and training data, and the
// validator a job of it would have.
func validationSetup(tb testing.TB, preset string) (*nn.Model, *validator, []float32) {
	tb.Helper()
	spec, err := jobspec.Load(preset)
	if err != nil {
		tb.Fatal(err)
	}
	opts, err := DataOptions(spec)
	if err != nil {
		tb.Fatal(err)
	}
	train, _, err := dataset.Load(spec.Dataset, opts)
	if errors.Is(err, dataset.ErrBibleNotFound) {
		tb.Skipf("%s: %v", preset, err)
	}
	if err != nil {
		tb.Fatal(err)
	}
	m, err := nn.NewModel(spec.Model)
	if err != nil {
		tb.Fatal(err)
	}
	params := make([]float32, m.NumParams)
	m.Init(params, spec.Seed)
	return m, newValidator(m, train, train.Kind == dataset.NextTokens || isTextModel(m)), params
}

// mnistGradients returns a function giving m's gradient at params of the
// 64 MNIST training examples from index at.
func mnistGradients(t *testing.T, m *nn.Model) func(params []float32, at int) []float32 {
	t.Helper()
	train, _, err := dataset.LoadMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	const n = 64
	x := make([]float32, n*train.ExampleSize())
	y := make([]int32, n)
	ws := m.NewWorkspace(n)
	return func(params []float32, at int) []float32 {
		train.Fill(x, y, at, n)
		g := make([]float32, m.NumParams)
		m.Gradient(ws, params, x, y, g)
		return g
	}
}

// On real mnist-mlp data, at the initial weights: the gradient of a batch
// the validator never saw passes; the same gradient sign-flipped and
// scaled 19x (the scale attack) or by 1e6 (early) is refused; plainly
// sign-flipped it scores below zero.
func TestValidatorOnMNIST(t *testing.T) {
	m, v, params := validationSetup(t, "mnist-mlp")
	spec, _ := jobspec.Load("mnist-mlp")
	g := mnistGradients(t, m)(params, 1000)
	v.zeno.Gamma = zenoGamma(&spec)
	if d := v.zeno.Check(0, params, g); d != "" {
		t.Fatalf("an honest gradient was refused: %s", d)
	}
	for _, k := range []float32{-1, -19, -1e6} {
		u := make([]float32, len(g))
		for i, w := range g {
			u[i] = k * w
		}
		if k == -1 {
			// A plain sign flip climbs, by about as much as the honest
			// step descends: inside the margin, left to the clip.
			if s, _, _ := v.zeno.Score(0, params, u); !(s < 0) {
				t.Errorf("the sign-flipped gradient's descent score is %v, want < 0", s)
			}
			continue
		}
		if d := v.zeno.Check(0, params, u); d == "" {
			t.Errorf("the gradient times %g passed validation", k)
		}
	}
}

// BenchmarkValidateFlaggedUpdate is what validating one flagged update
// costs the job's loop (two forward passes of the held-out batch: the
// loss before the step is cached per version, so a run of flagged
// updates against one version costs one pass each).
func BenchmarkValidateFlaggedUpdate(b *testing.B) {
	for _, preset := range []string{"mnist-mlp", "charlm"} {
		b.Run(preset, func(b *testing.B) {
			m, v, params := validationSetup(b, preset)
			rng := rand.New(rand.NewPCG(1, 2))
			u := make([]float32, m.NumParams)
			for i := range u {
				u[i] = float32(rng.NormFloat64() * 1e-3)
			}
			v.zeno.Gamma = 1
			b.ResetTimer()
			for i := range b.N {
				v.zeno.Check(int64(i), params, u) // a new version each time: both passes
			}
			b.ReportMetric(float64(v.n), "examples")
		})
	}
}

// The noise floor's sample of accepted updates is scored off the caller's
// loop: observe returns at once with the caller's vectors its own again,
// refuses a second update while the first is being scored, and a score
// reaches the window only when the loop runs what the observer posts.
// The floor comes out as the loop's own scoring would have made it.
func TestValidationObservesOffTheLoop(t *testing.T) {
	m, v, params := validationSetup(t, "mnist-mlp")
	spec, _ := jobspec.Load("mnist-mlp")
	gradient := mnistGradients(t, m)
	loop := make(chan func(), 1)
	done := make(chan struct{})
	defer close(done)
	post := func(f func()) { loop <- f }
	gamma := zenoGamma(&spec)
	ref := engine.Zeno{Rho: v.zeno.Rho, Margin: v.zeno.Margin, Gamma: gamma, Loss: v.zeno.Loss}
	for k := range 20 {
		// Honest gradients of batches the validator never saw.
		g := gradient(params, 2000+k*64)
		want := slices.Clone(g)
		if !v.observe(done, post, gamma, int64(k), params, g) {
			t.Fatalf("update %d was not taken", k)
		}
		g[0] = 1e6 // the caller's vector is its own again at once
		if v.observe(done, post, gamma, int64(k), params, g) {
			t.Fatal("a second update was taken while the first was being scored")
		}
		if got := v.zeno.Samples(); got != k {
			t.Fatalf("%d samples in the window before the loop ran the observer's finding, want %d", got, k)
		}
		(<-loop)()
		ref.Observe(int64(k), params, want)
	}
	if got, want := v.zeno.Scores(), ref.Scores(); len(got) != 20 || !slices.Equal(got, want) || v.zeno.Floor() != ref.Floor() {
		t.Fatalf("the observer's window: %v (floor %v); scored on the loop: %v (floor %v)", got, v.zeno.Floor(), want, ref.Floor())
	}
}
