package compute

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// refBackend computes with nn directly, one thread.
type refBackend struct {
	model *nn.Model
	ws    *nn.Workspace
}

func (b *refBackend) Name() string { return "ref" }
func (b *refBackend) Threads() int { return 1 }
func (b *refBackend) Prepare(m *nn.Model, maxBatch int) error {
	b.model, b.ws = m, m.NewWorkspace(maxBatch)
	return nil
}
func (b *refBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	l, c := b.model.Gradient(b.ws, params, x, labels, grad)
	return l, c, nil
}

func smallModel(t *testing.T) *nn.Model {
	m, err := nn.NewModel(nn.ModelSpec{Input: []int{1, 4, 4}, Layers: []nn.LayerSpec{
		{Type: "dense", Units: 8}, {Type: "relu"}, {Type: "dense", Units: 3}}})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func randomTask(m *nn.Model, count, batch, steps int, lr float32) *Task {
	rng := rand.New(rand.NewPCG(5, 6))
	t := &Task{
		Lease: protocol.Lease{ID: 1, JobID: "j", Count: count, BatchSize: batch, LocalSteps: steps, Inner: protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: lr},
			UpdateKind: protocol.UpdateGradient, Snapshot: protocol.SnapshotGranted},
		Params: make([]float32, m.NumParams),
		X:      make([]float32, count*m.InputSize),
		Labels: make([]int32, count),
	}
	m.Init(t.Params, 9)
	for i := range t.X {
		t.X[i] = rng.Float32()
	}
	for i := range t.Labels {
		t.Labels[i] = int32(rng.IntN(3))
	}
	return t
}

// With one local step the pseudo-gradient is the gradient itself.
func TestOneStepPseudoGradientIsTheGradient(t *testing.T) {
	m := smallModel(t)
	tk := randomTask(m, 10, 10, 1, 0.5)
	c := NewComputer(&refBackend{}, m)
	res, err := c.Compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, m.NumParams)
	m.Gradient(m.NewWorkspace(10), tk.Params, tk.X, tk.Labels, want)
	for i := range want {
		if res.Update[i] != want[i] {
			t.Fatalf("update[%d] = %v, want gradient %v", i, res.Update[i], want[i])
		}
	}
	if res.Examples != 10 || res.LossSum <= 0 {
		t.Fatalf("result %+v", res)
	}
}

// With H steps it is (w_base - w_after)/lr after H inner SGD steps.
func TestLocalStepsPseudoGradient(t *testing.T) {
	m := smallModel(t)
	const batch, steps, lr = 4, 3, float32(0.1)
	tk := randomTask(m, 11, batch, steps, lr) // the last step has 3 examples
	base := append([]float32(nil), tk.Params...)
	c := NewComputer(&refBackend{}, m)
	res, err := c.Compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	w := append([]float32(nil), base...)
	g := make([]float32, m.NumParams)
	ws := m.NewWorkspace(batch)
	in := m.InputSize
	for s := 0; s < steps; s++ {
		lo, hi := s*batch, min((s+1)*batch, 11)
		m.Gradient(ws, w, tk.X[lo*in:hi*in], tk.Labels[lo:hi], g)
		nn.SGDStep(w, g, lr)
	}
	for i := range w {
		want := (base[i] - w[i]) / lr
		if math.Abs(float64(res.Update[i]-want)) > 1e-4*(1+math.Abs(float64(want))) {
			t.Fatalf("update[%d] = %v, want %v", i, res.Update[i], want)
		}
	}
	for i := range base {
		if tk.Params[i] != base[i] {
			t.Fatal("compute modified the base snapshot")
		}
	}
}

type panicky struct{ refBackend }

func (p *panicky) Gradient([]float32, []float32, []int32, []float32) (float64, int, error) {
	panic("kernel bug")
}

// A panicking backend fails the task, not the worker.
func TestBackendPanicBecomesAnError(t *testing.T) {
	m := smallModel(t)
	c := NewComputer(&panicky{}, m)
	if _, err := c.Compute(randomTask(m, 4, 4, 1, 0.1)); err == nil {
		t.Fatal("no error from a panicking backend")
	}
}

// stepperBackend records the Steps calls the computer makes.
type stepperBackend struct {
	refBackend
	calls     int
	gradients int
	id        SnapshotID
	n         int
	plan      InnerSteps
	err       error
}

func (b *stepperBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	b.gradients++
	return b.refBackend.Gradient(params, x, labels, grad)
}

func (b *stepperBackend) Steps(id SnapshotID, params, x []float32, labels []int32, plan InnerSteps, update []float32) (float64, int, error) {
	b.calls++
	b.id, b.n, b.plan = id, len(labels), plan
	if len(x) != len(labels)*b.model.InputSize || len(params) != len(update) {
		return 0, 0, fmt.Errorf("bad lengths: x %d, labels %d, params %d, update %d", len(x), len(labels), len(params), len(update))
	}
	for i := range update {
		update[i] = float32(i)
	}
	return 2.5, 7, b.err
}

// A backend that implements Stepper gets the whole lease in one call, and
// what it writes is the result.
func TestStepperGetsTheWholeLease(t *testing.T) {
	m := smallModel(t)
	tk := randomTask(m, 10, 4, 3, 0.25)
	tk.Snap = 42
	tk.X = append(tk.X, make([]float32, 5*m.InputSize)...) // a recycled, longer buffer
	b := &stepperBackend{}
	c := NewComputer(b, m)
	res, err := c.Compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	if b.calls != 1 || b.gradients != 0 {
		t.Fatalf("%d Steps and %d Gradient calls, want 1 and 0", b.calls, b.gradients)
	}
	if want := (InnerSteps{BatchSize: 4, Steps: 3, Inner: tk.Lease.Inner, UpdateKind: protocol.UpdateGradient, Seed: DropoutSeed(tk.Lease)}); b.id != 42 || b.n != 10 || b.plan != want {
		t.Errorf("Steps got id %d, %d examples, %+v; want 42, 10, %+v", b.id, b.n, b.plan, want)
	}
	if res.LossSum != 2.5 || res.Correct != 7 || res.Examples != 10 || res.Update[5] != 5 {
		t.Errorf("result %+v does not carry what Steps returned", res)
	}
	b.err = errors.New("device lost")
	if _, err := c.Compute(tk); err == nil || !strings.Contains(err.Error(), "device lost") {
		t.Errorf("compute returned %v, want the Steps error", err)
	}
}

// referenceAdamW runs H inner AdamW steps in float64, written out from the
// paper's rule independently of nn.AdamW, and returns w_after.
func referenceAdamW(m *nn.Model, tk *Task, o protocol.InnerOptimizer) []float64 {
	l := tk.Lease
	w := make([]float64, m.NumParams)
	for i, p := range tk.Params {
		w[i] = float64(p)
	}
	mom, vel := make([]float64, len(w)), make([]float64, len(w))
	w32, g := make([]float32, len(w)), make([]float32, len(w))
	ws := m.NewWorkspace(l.BatchSize)
	in := m.InputSize
	lr, wd, b1, b2, eps := float64(o.LR), float64(o.WeightDecay), float64(o.Beta1), float64(o.Beta2), float64(o.Epsilon)
	for s := 0; s < l.LocalSteps && s*l.BatchSize < l.Count; s++ {
		lo, hi := s*l.BatchSize, min((s+1)*l.BatchSize, l.Count)
		for i := range w {
			w32[i] = float32(w[i])
		}
		m.Gradient(ws, w32, tk.X[lo*in:hi*in], tk.Labels[lo:hi], g)
		if o.ClipNorm > 0 {
			var ss float64
			for _, gi := range g {
				ss += float64(gi) * float64(gi)
			}
			if c := float64(o.ClipNorm) / (math.Sqrt(ss) + 1e-6); c < 1 {
				for i := range g {
					g[i] = float32(float64(g[i]) * c)
				}
			}
		}
		t := float64(s + 1)
		for i, gi := range g {
			w[i] -= lr * wd * w[i]
			mom[i] = b1*mom[i] + (1-b1)*float64(gi)
			vel[i] = b2*vel[i] + (1-b2)*float64(gi)*float64(gi)
			w[i] -= lr * (mom[i] / (1 - math.Pow(b1, t))) / (math.Sqrt(vel[i]/(1-math.Pow(b2, t))) + eps)
		}
	}
	return w
}

// A lease with inner AdamW runs H AdamW steps (decoupled weight decay,
// bias-corrected) and returns, as update kind delta, w_base - w_after; as
// kind gradient the same divided by the inner lr. The state starts fresh
// for each lease: computing the same lease twice gives the same update.
func TestInnerAdamWLease(t *testing.T) {
	m := smallModel(t)
	const batch, steps = 4, 3
	o := protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 0.01, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.95, Epsilon: 1e-8}
	tk := randomTask(m, 11, batch, steps, o.LR)
	tk.Lease.Inner, tk.Lease.UpdateKind = o, protocol.UpdateDelta
	want := referenceAdamW(m, tk, o)
	c := NewComputer(&refBackend{}, m)
	for try := range 2 {
		res, err := c.Compute(tk)
		if err != nil {
			t.Fatal(err)
		}
		var moved float64
		for i, w := range want {
			d := float64(tk.Params[i]) - w
			moved = max(moved, math.Abs(d))
			if math.Abs(float64(res.Update[i])-d) > 2e-6 {
				t.Fatalf("try %d: delta[%d] = %v, want w_base - w_after = %v", try, i, res.Update[i], d)
			}
		}
		// Adam moves each weight by about lr per step: the check above
		// must not pass on an update of zeros.
		if moved < 0.5*float64(o.LR) {
			t.Fatalf("largest move %v; AdamW should move weights by about lr = %v per step", moved, o.LR)
		}
	}
	delta := append([]float32(nil), c.update...)
	tk.Lease.UpdateKind = protocol.UpdateGradient
	res, err := c.Compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	for i := range delta {
		if want := delta[i] / o.LR; math.Abs(float64(res.Update[i]-want)) > 1e-4*(1+math.Abs(float64(want))) {
			t.Fatalf("gradient[%d] = %v, want delta/lr = %v", i, res.Update[i], want)
		}
	}
}

// clip_norm clips each inner step's gradient to that global L2 norm: for
// one SGD step the update is the clipped gradient; for AdamW steps each
// gradient is clipped before its step (checked against the float64
// reference); a Stepper that does not say it clips gets no such lease,
// which runs on the host through its Gradient instead.
func TestInnerClipNorm(t *testing.T) {
	m := smallModel(t)
	tk := randomTask(m, 10, 10, 1, 0.5)
	g := make([]float32, m.NumParams)
	m.Gradient(m.NewWorkspace(10), tk.Params, tk.X, tk.Labels, g)
	var norm float64
	for _, v := range g {
		norm += float64(v) * float64(v)
	}
	norm = math.Sqrt(norm)
	clip := float32(norm / 4)
	tk.Lease.Inner.ClipNorm = clip
	c := NewComputer(&refBackend{}, m)
	res, err := c.Compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	for i := range g {
		want := float64(g[i]) * float64(clip) / (norm + 1e-6)
		if math.Abs(float64(res.Update[i])-want) > 1e-6*(1+math.Abs(want)) {
			t.Fatalf("update[%d] = %v, want the clipped gradient %v", i, res.Update[i], want)
		}
	}

	o := protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 0.01, WeightDecay: 0.1, Beta1: 0.9, Beta2: 0.95, Epsilon: 1e-8, ClipNorm: clip}
	tk = randomTask(m, 11, 4, 3, o.LR)
	tk.Lease.Inner, tk.Lease.UpdateKind = o, protocol.UpdateDelta
	want := referenceAdamW(m, tk, o)
	o.ClipNorm = 0
	unclipped := referenceAdamW(m, tk, o)
	var differ bool
	for i := range want {
		differ = differ || math.Abs(want[i]-unclipped[i]) > 1e-4
	}
	if !differ {
		t.Fatal("clipping changes nothing in this test: pick a smaller clip_norm")
	}
	b := &stepperBackend{}
	res, err = NewComputer(b, m).Compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	if b.calls != 0 || b.gradients != 3 {
		t.Errorf("a Stepper that does not clip got %d Steps and %d Gradient calls, want 0 and 3", b.calls, b.gradients)
	}
	for i, w := range want {
		if d := float64(tk.Params[i]) - w; math.Abs(float64(res.Update[i])-d) > 2e-6 {
			t.Fatalf("delta[%d] = %v, want w_base - w_after = %v", i, res.Update[i], d)
		}
	}
	tk.Lease.Inner.ClipNorm = -1
	if _, err := c.Compute(tk); err == nil || !strings.Contains(err.Error(), "clip_norm") {
		t.Errorf("a negative clip_norm gave %v, want an error naming clip_norm", err)
	}
}

// Update kind delta with inner SGD is lr times kind gradient, even for one
// step (where kind gradient is the gradient itself).
func TestDeltaIsLRTimesGradient(t *testing.T) {
	m := smallModel(t)
	for _, steps := range []int{1, 3} {
		const lr = 0.25
		tk := randomTask(m, 12, 4, steps, lr)
		c := NewComputer(&refBackend{}, m)
		res, err := c.Compute(tk)
		if err != nil {
			t.Fatal(err)
		}
		grad := append([]float32(nil), res.Update...)
		tk.Lease.UpdateKind = protocol.UpdateDelta
		if res, err = c.Compute(tk); err != nil {
			t.Fatal(err)
		}
		for i := range grad {
			if want := lr * grad[i]; math.Abs(float64(res.Update[i]-want)) > 1e-6*(1+math.Abs(float64(want))) {
				t.Fatalf("%d steps: delta[%d] = %v, want lr*gradient = %v", steps, i, res.Update[i], want)
			}
		}
	}
}

// A lease the worker cannot compute is an error that says what to fix.
func TestUnsupportedLeaseIsAnError(t *testing.T) {
	m := smallModel(t)
	c := NewComputer(&refBackend{}, m)
	for _, tc := range []struct {
		edit func(*protocol.Lease)
		want string
	}{
		{func(l *protocol.Lease) { l.Inner.Type = "lion" }, "inner optimizer"},
		{func(l *protocol.Lease) { l.UpdateKind = "sign" }, "update kind"},
		{func(l *protocol.Lease) {
			l.Inner = protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 0.1, Beta1: 0.9, Beta2: 0.99}
		}, "epsilon"},
		{func(l *protocol.Lease) { l.Snapshot = "oldest" }, "snapshot"},
	} {
		tk := randomTask(m, 4, 4, 1, 0.1)
		tc.edit(&tk.Lease)
		if _, err := c.Compute(tk); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("lease %+v: error %v, want one about %s", tk.Lease, err, tc.want)
		}
	}
}

// seedingBackend records the dropout seeds its Gradient calls draw with.
type seedingBackend struct {
	refBackend
	seed  uint64
	seeds []uint64
}

func (b *seedingBackend) SetDropoutSeed(seed uint64) { b.seed = seed }
func (b *seedingBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	b.seeds = append(b.seeds, b.seed)
	b.seed++
	return b.refBackend.Gradient(params, x, labels, grad)
}

// Each lease's steps draw their dropout masks from the lease's own seed,
// the same whenever the lease is computed, another for any other lease.
func TestLeaseDropoutSeed(t *testing.T) {
	m := smallModel(t)
	tk := randomTask(m, 10, 4, 3, 0.25)
	tk.Lease.ShardID, tk.Lease.Start = 3, 120
	seed := DropoutSeed(tk.Lease)
	for range 2 {
		b := &seedingBackend{}
		if _, err := NewComputer(b, m).Compute(tk); err != nil {
			t.Fatal(err)
		}
		if want := []uint64{seed, seed + 1, seed + 2}; fmt.Sprint(b.seeds) != fmt.Sprint(want) {
			t.Errorf("the steps drew with seeds %v, want %v", b.seeds, want)
		}
	}
	seen := map[uint64]string{seed: "the lease"}
	for what, change := range map[string]func(*protocol.Lease){
		"id":    func(l *protocol.Lease) { l.ID++ },
		"job":   func(l *protocol.Lease) { l.JobID += "x" },
		"shard": func(l *protocol.Lease) { l.ShardID++ },
		"start": func(l *protocol.Lease) { l.Start++ },
	} {
		l := tk.Lease
		change(&l)
		s := DropoutSeed(l)
		if prev, ok := seen[s]; ok {
			t.Errorf("another %s gives the seed of %s", what, prev)
		}
		seen[s] = "another " + what
	}
	if DropoutSeed(tk.Lease) != seed {
		t.Error("DropoutSeed is not a function of the lease")
	}
	// A spot check's copy, another lease of the same task, draws the
	// masks of the lease it copies.
	cp := tk.Lease
	cp.ID, cp.CopyOf = tk.Lease.ID+100, tk.Lease.ID
	if DropoutSeed(cp) != seed {
		t.Error("a copy draws other masks than the lease it copies")
	}
}
