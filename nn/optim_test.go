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

func TestOptimizerState(t *testing.T) {
	for _, s := range []OptimizerSpec{
		{Type: "sgd", LR: 0.1},
		{Type: "momentum", LR: 0.1, Nesterov: true},
		{Type: "adam", LR: 0.01},
	} {
		a := mustOpt(t, s, 3)
		pa := append([]float32(nil), p0...)
		a.Step(pa, g1, 1)
		vecs, steps := a.State()
		wantVecs := map[string]int{"sgd": 0, "momentum": 1, "adam": 2}[s.Type]
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
		{OptimizerSpec{Type: "foo", LR: 1}, `optimizer.type: unknown "foo" (want sgd, momentum or adam)`},
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
	for _, s := range []OptimizerSpec{{Type: "sgd", LR: 0.1}, {Type: "momentum", LR: 0.1}, {Type: "adam", LR: 0.1}} {
		if err := s.Validate(); err != nil {
			t.Errorf("%+v: %v", s, err)
		}
	}
}
