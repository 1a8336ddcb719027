package nn

import (
	"math"
	"strings"
	"testing"
)

func mustOpt(t *testing.T, s OptimizerSpec, n int) Optimizer {
	t.Helper()
	o, err := NewOptimizer(s, n)
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func near(t *testing.T, what string, got []float32, want []float64, tol float64) {
	t.Helper()
	for i := range want {
		if math.Abs(float64(got[i])-want[i]) > tol {
			t.Errorf("%s: got %v, want %v", what, got, want)
			return
		}
	}
}

// The expected values below are worked out by hand from the update rules
// with params [1, -2, 0.5], lr 0.1, g1 = [0.5, 1, -2] and g2 = [1, 1, 1].
var (
	p0 = []float32{1, -2, 0.5}
	g1 = []float32{0.5, 1, -2}
	g2 = []float32{1, 1, 1}
)

func twoSteps(t *testing.T, s OptimizerSpec) (after1, after2 []float32) {
	o := mustOpt(t, s, 3)
	p := append([]float32(nil), p0...)
	o.Step(p, g1, 1)
	after1 = append([]float32(nil), p...)
	o.Step(p, g2, 1)
	if _, steps := o.State(); steps != 2 {
		t.Errorf("%s: steps = %d, want 2", s.Type, steps)
	}
	return after1, p
}

func TestSGD(t *testing.T) {
	a1, a2 := twoSteps(t, OptimizerSpec{Type: "sgd", LR: 0.1})
	near(t, "sgd step 1", a1, []float64{0.95, -2.1, 0.7}, 1e-6)
	near(t, "sgd step 2", a2, []float64{0.85, -2.2, 0.6}, 1e-6)

	o := mustOpt(t, OptimizerSpec{Type: "sgd", LR: 0.1}, 3)
	p := append([]float32(nil), p0...)
	o.Step(p, g1, 0.5) // lrScale halves the step
	near(t, "sgd lrScale 0.5", p, []float64{0.975, -2.05, 0.6}, 1e-6)

	p = append([]float32(nil), p0...)
	SGDStep(p, g1, 0.1)
	near(t, "SGDStep", p, []float64{0.95, -2.1, 0.7}, 1e-6)
}

func TestMomentum(t *testing.T) {
	// v1 = g1; p1 = p0 - 0.1*v1. v2 = 0.9*v1 + g2 = [1.45, 1.9, -0.8]; p2 = p1 - 0.1*v2.
	a1, a2 := twoSteps(t, OptimizerSpec{Type: "momentum", LR: 0.1})
	near(t, "momentum step 1", a1, []float64{0.95, -2.1, 0.7}, 1e-6)
	near(t, "momentum step 2", a2, []float64{0.805, -2.29, 0.78}, 1e-6)

	// Nesterov: p -= lr*(g + mu*v). Step 1: 0.1*1.9*g1. Step 2: 0.1*(g2 + 0.9*[1.45, 1.9, -0.8]).
	a1, a2 = twoSteps(t, OptimizerSpec{Type: "momentum", LR: 0.1, Nesterov: true})
	near(t, "nesterov step 1", a1, []float64{0.905, -2.19, 0.88}, 1e-6)
	near(t, "nesterov step 2", a2, []float64{0.6745, -2.461, 0.852}, 1e-6)

	// Explicit momentum 0.5: v2 = 0.5*g1 + g2 = [1.25, 1.5, 0].
	_, a2 = twoSteps(t, OptimizerSpec{Type: "momentum", LR: 0.1, Momentum: 0.5})
	near(t, "momentum 0.5 step 2", a2, []float64{0.825, -2.25, 0.7}, 1e-6)

	// lrScale scales the step, not the velocity.
	o := mustOpt(t, OptimizerSpec{Type: "momentum", LR: 0.1}, 3)
	p := append([]float32(nil), p0...)
	o.Step(p, g1, 0.5)
	o.Step(p, g2, 0.5)
	near(t, "momentum lrScale 0.5", p, []float64{0.9025, -2.145, 0.64}, 1e-6)
}

func TestAdam(t *testing.T) {
	// Step 1: bias-corrected m/sqrt(v) = g/|g|, so p1 = p0 - 0.1*sign(g1).
	// Step 2: m = 0.09*g1 + 0.1, v = 0.000999*g1² + 0.001; mhat = m/0.19,
	// vhat = v/0.001999; p2 = p1 - 0.1*mhat/(sqrt(vhat)+1e-8).
	a1, a2 := twoSteps(t, OptimizerSpec{Type: "adam", LR: 0.1})
	near(t, "adam step 1", a1, []float64{0.9, -2.1, 0.6}, 1e-6)
	near(t, "adam step 2", a2, []float64{0.8034818, -2.2, 0.6266337}, 2e-6)

	o := mustOpt(t, OptimizerSpec{Type: "adam", LR: 0.1}, 3)
	p := append([]float32(nil), p0...)
	o.Step(p, g1, 0.25)
	near(t, "adam lrScale 0.25", p, []float64{0.975, -2.025, 0.525}, 1e-6)
}

// The expected values of the AdamW and clipping tests are what PyTorch 1.13
// computes in float64 from the same start (torch.optim.AdamW, SGD, Adam,
// each step after torch.nn.utils.clip_grad_norm_ where clipped). Step 1 of
// AdamW by hand: p0*(1-0.1*0.01) - 0.1*sign(g1) = [0.899, -2.098, 0.5995].
func TestAdamWOuter(t *testing.T) {
	a1, a2 := twoSteps(t, OptimizerSpec{Type: "adamw", LR: 0.1, WeightDecay: 0.01})
	near(t, "adamw step 1", a1, []float64{0.899000002, -2.097999999, 0.5994999995}, 1e-6)
	near(t, "adamw step 2", a2, []float64{0.8015828006, -2.1959019980, 0.6255342033}, 2e-6)
	_, a2 = twoSteps(t, OptimizerSpec{Type: "adamw", LR: 0.1, WeightDecay: 0.5})
	near(t, "adamw wd 0.5 step 2", a2, []float64{0.7109818005, -1.9999999980, 0.5728837033}, 2e-6)

	// Weight decay 0 is Adam, bit for bit.
	b1, b2 := twoSteps(t, OptimizerSpec{Type: "adamw", LR: 0.1})
	c1, c2 := twoSteps(t, OptimizerSpec{Type: "adam", LR: 0.1})
	for i := range b1 {
		if b1[i] != c1[i] || b2[i] != c2[i] {
			t.Fatalf("adamw with weight_decay 0 gives %v, %v; adam %v, %v", b1, b2, c1, c2)
		}
	}

	// The outer AdamW and the workers' inner AdamW are the same rule.
	o := mustOpt(t, OptimizerSpec{Type: "adamw", LR: 0.1, WeightDecay: 0.01}, 3)
	in := &AdamW{LR: 0.1, WeightDecay: 0.01, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8}
	in.Reset(3)
	p, q := append([]float32(nil), p0...), append([]float32(nil), p0...)
	for _, g := range [][]float32{g1, g2, g1} {
		o.Step(p, g, 1)
		in.Step(q, append([]float32(nil), g...))
	}
	// (The inner one takes its betas as float32: its bias corrections round
	// differently in the last places.)
	near(t, "inner AdamW = outer adamw", q, []float64{float64(p[0]), float64(p[1]), float64(p[2])}, 1e-5)
}

// ‖g1‖ = sqrt(5.25) ≈ 2.2913: clip_norm 1 scales g1 by 1/2.2913; ‖g2‖ =
// sqrt(3) ≈ 1.732 is clipped too. clip_norm 2 leaves g2 alone.
func TestClipNorm(t *testing.T) {
	if s := ClipScale(g1, 0); s != 1 {
		t.Errorf("ClipScale with clip_norm 0 = %v, want 1", s)
	}
	if s := ClipScale(g1, 10); s != 1 {
		t.Errorf("ClipScale under the bound = %v, want 1", s)
	}
	if s := ClipScale(g1, 1); math.Abs(float64(s)-1/math.Sqrt(5.25)) > 1e-6 {
		t.Errorf("ClipScale(g1, 1) = %v, want %v", s, 1/math.Sqrt(5.25))
	}
	a1, a2 := twoSteps(t, OptimizerSpec{Type: "sgd", LR: 0.1, ClipNorm: 1})
	near(t, "sgd clip 1 step 1", a1, []float64{0.9781782205, -2.0436435590, 0.5872871180}, 1e-6)
	near(t, "sgd clip 1 step 2", a2, []float64{0.9204432269, -2.1013785526, 0.5295521244}, 1e-6)
	_, a2 = twoSteps(t, OptimizerSpec{Type: "momentum", LR: 0.1, ClipNorm: 1})
	near(t, "momentum clip 1 step 2", a2, []float64{0.9008036254, -2.1406577557, 0.6081105306}, 1e-6)
	a1, a2 = twoSteps(t, OptimizerSpec{Type: "adamw", LR: 0.1, WeightDecay: 0.01, ClipNorm: 1})
	near(t, "adamw clip 1 step 1", a1, []float64{0.8990000046, -2.0979999977, 0.5994999989}, 1e-6)
	near(t, "adamw clip 1 step 2", a2, []float64{0.8048092593, -2.1956675451, 0.6137120910}, 2e-6)
	_, a2 = twoSteps(t, OptimizerSpec{Type: "adam", LR: 0.1, ClipNorm: 2})
	near(t, "adam clip 2 step 2", a2, []float64{0.8050022164, -2.2001234663, 0.6211339478}, 2e-6)

	// The caller's gradient is not changed by the outer optimizer.
	g := append([]float32(nil), g1...)
	o := mustOpt(t, OptimizerSpec{Type: "sgd", LR: 0.1, ClipNorm: 1}, 3)
	o.Step(append([]float32(nil), p0...), g, 1)
	near(t, "gradient after a clipped step", g, []float64{0.5, 1, -2}, 0)

	// The inner optimizers clip the same way.
	in := &AdamW{LR: 0.1, WeightDecay: 0.01, Beta1: 0.9, Beta2: 0.999, Epsilon: 1e-8, ClipNorm: 1}
	in.Reset(3)
	p := append([]float32(nil), p0...)
	in.Step(p, append([]float32(nil), g1...))
	in.Step(p, append([]float32(nil), g2...))
	near(t, "inner adamw clip 1 step 2", p, []float64{0.8048092593, -2.1956675451, 0.6137120910}, 2e-6)
}

func TestOptimizerState(t *testing.T) {
	for _, s := range []OptimizerSpec{
		{Type: "sgd", LR: 0.1},
		{Type: "momentum", LR: 0.1, Nesterov: true},
		{Type: "adam", LR: 0.01},
		{Type: "adamw", LR: 0.01, WeightDecay: 0.1, ClipNorm: 1},
	} {
		a := mustOpt(t, s, 3)
		pa := append([]float32(nil), p0...)
		a.Step(pa, g1, 1)
		vecs, steps := a.State()
		wantVecs := map[string]int{"sgd": 0, "momentum": 1, "adam": 2, "adamw": 2}[s.Type]
		if len(vecs) != wantVecs || steps != 1 {
			t.Fatalf("%s: State() = %d vectors, %d steps; want %d, 1", s.Type, len(vecs), steps, wantVecs)
		}
		// Restore into a fresh optimizer: both must now step identically.
		b := mustOpt(t, s, 3)
		if err := b.SetState(vecs, steps); err != nil {
			t.Fatal(err)
		}
		pb := append([]float32(nil), pa...)
		a.Step(pa, g2, 1)
		b.Step(pb, g2, 1)
		for i := range pa {
			if pa[i] != pb[i] {
				t.Errorf("%s: after SetState, step gives %v, original %v", s.Type, pb, pa)
				break
			}
		}
		// Wrong shapes are errors.
		bad := [][][]float32{{{1, 2}}, {{1, 2, 3}, {1, 2, 3}, {1, 2, 3}}}
		if wantVecs > 0 {
			bad = append(bad, append(make([][]float32, wantVecs-1), []float32{1}))
		}
		for _, v := range bad {
			if err := b.SetState(v, 1); err == nil {
				t.Errorf("%s: SetState with %d vectors of lengths %v accepted", s.Type, len(v), lens(v))
			}
		}
		if err := b.SetState(vecs, -1); err == nil {
			t.Errorf("%s: negative step count accepted", s.Type)
		}
	}
}

func lens(v [][]float32) []int {
	var out []int
	for _, x := range v {
		out = append(out, len(x))
	}
	return out
}

func TestOptimizerSpec(t *testing.T) {
	d := OptimizerSpec{Type: "adam", LR: 1e-3}.WithDefaults()
	if d.Beta1 != 0.9 || d.Beta2 != 0.999 || d.Epsilon != 1e-8 {
		t.Errorf("adam defaults: %+v", d)
	}
	if d := (OptimizerSpec{Type: "momentum", LR: 1}).WithDefaults(); d.Momentum != 0.9 {
		t.Errorf("momentum default: %+v", d)
	}
	if d := (OptimizerSpec{Type: "momentum", LR: 1, Momentum: 0.5}).WithDefaults(); d.Momentum != 0.5 {
		t.Errorf("momentum overridden by default: %+v", d)
	}
	cases := []struct {
		s    OptimizerSpec
		want string
	}{
		{OptimizerSpec{Type: "foo", LR: 1}, `optimizer.type: unknown "foo" (want sgd, momentum, adam or adamw)`},
		{OptimizerSpec{Type: "", LR: 1}, `optimizer.type: unknown ""`},
		{OptimizerSpec{Type: "sgd"}, "optimizer.lr: must be a finite number > 0, got 0"},
		{OptimizerSpec{Type: "sgd", LR: -1}, "optimizer.lr: must be a finite number > 0, got -1"},
		{OptimizerSpec{Type: "sgd", LR: math.Inf(1)}, "optimizer.lr: must be a finite number > 0, got +Inf"},
		{OptimizerSpec{Type: "sgd", LR: math.NaN()}, "optimizer.lr: must be a finite number > 0, got NaN"},
		{OptimizerSpec{Type: "momentum", LR: 1, Momentum: 1}, "optimizer.momentum: must be in [0, 1), got 1"},
		{OptimizerSpec{Type: "momentum", LR: 1, Momentum: -0.1}, "optimizer.momentum: must be in [0, 1), got -0.1"},
		{OptimizerSpec{Type: "adam", LR: 1, Beta1: 1.5}, "optimizer.beta1: must be in [0, 1), got 1.5"},
		{OptimizerSpec{Type: "adam", LR: 1, Beta2: 1}, "optimizer.beta2: must be in [0, 1), got 1"},
		{OptimizerSpec{Type: "adam", LR: 1, Epsilon: -1e-8}, "optimizer.epsilon: must be a finite number > 0, got -1e-08"},
		{OptimizerSpec{Type: "adamw", LR: 1, WeightDecay: -0.01}, "optimizer.weight_decay: must be a finite number >= 0, got -0.01"},
		{OptimizerSpec{Type: "adamw", LR: 1, WeightDecay: math.NaN()}, "optimizer.weight_decay: must be a finite number >= 0, got NaN"},
		{OptimizerSpec{Type: "adam", LR: 1, WeightDecay: 0.01}, "optimizer.weight_decay: applies to type adamw (decoupled weight decay), not adam"},
		{OptimizerSpec{Type: "sgd", LR: 1, ClipNorm: -1}, "optimizer.clip_norm: must be a finite number >= 0 (0 turns clipping off), got -1"},
		{OptimizerSpec{Type: "adamw", LR: 1, ClipNorm: math.Inf(1)}, "optimizer.clip_norm: must be a finite number >= 0 (0 turns clipping off), got +Inf"},
		{OptimizerSpec{Type: "adamw", LR: 1, Beta2: 1}, "optimizer.beta2: must be in [0, 1), got 1"},
	}
	for _, c := range cases {
		err := c.s.Validate()
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: Validate() = %v, want %q", c.s, err, c.want)
		}
		if _, err := NewOptimizer(c.s, 3); err == nil {
			t.Errorf("%+v: NewOptimizer accepted it", c.s)
		}
	}
	if d := (OptimizerSpec{Type: "adamw", LR: 1e-3}).WithDefaults(); d.Beta1 != 0.9 || d.Beta2 != 0.999 || d.Epsilon != 1e-8 || d.WeightDecay != 0 {
		t.Errorf("adamw defaults: %+v (weight_decay is taken as given)", d)
	}
	for _, s := range []OptimizerSpec{{Type: "sgd", LR: 0.1}, {Type: "momentum", LR: 0.1}, {Type: "adam", LR: 0.1},
		{Type: "adamw", LR: 0.1}, {Type: "adamw", LR: 0.1, WeightDecay: 0.01, ClipNorm: 1}, {Type: "sgd", LR: 0.1, ClipNorm: 0.5}} {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}
