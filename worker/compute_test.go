package worker

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

func (b *refBackend) Kind() string { return protocol.KindNative }
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

func randomTask(m *nn.Model, count, batch, steps int, lr float32) *task {
	rng := rand.New(rand.NewPCG(5, 6))
	t := &task{
		lease: protocol.Lease{ID: 1, JobID: "j", Count: count, BatchSize: batch, LocalSteps: steps, Inner: protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: lr},
			UpdateKind: protocol.UpdateGradient, Snapshot: protocol.SnapshotGranted},
		params: make([]float32, m.NumParams),
		x:      make([]float32, count*m.InputSize),
		labels: make([]int32, count),
	}
	m.Init(t.params, 9)
	for i := range t.x {
		t.x[i] = rng.Float32()
	}
	for i := range t.labels {
		t.labels[i] = int32(rng.IntN(3))
	}
	return t
}

// With one local step the pseudo-gradient is the gradient itself.
func TestOneStepPseudoGradientIsTheGradient(t *testing.T) {
	m := smallModel(t)
	tk := randomTask(m, 10, 10, 1, 0.5)
	c := newComputer(&refBackend{}, m)
	res, err := c.compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, m.NumParams)
	m.Gradient(m.NewWorkspace(10), tk.params, tk.x, tk.labels, want)
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
	base := append([]float32(nil), tk.params...)
	c := newComputer(&refBackend{}, m)
	res, err := c.compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	w := append([]float32(nil), base...)
	g := make([]float32, m.NumParams)
	ws := m.NewWorkspace(batch)
	in := m.InputSize
	for s := 0; s < steps; s++ {
		lo, hi := s*batch, min((s+1)*batch, 11)
		m.Gradient(ws, w, tk.x[lo*in:hi*in], tk.labels[lo:hi], g)
		nn.SGDStep(w, g, lr)
	}
	for i := range w {
		want := (base[i] - w[i]) / lr
		if math.Abs(float64(res.Update[i]-want)) > 1e-4*(1+math.Abs(float64(want))) {
			t.Fatalf("update[%d] = %v, want %v", i, res.Update[i], want)
		}
	}
	for i := range base {
		if tk.params[i] != base[i] {
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
	c := newComputer(&panicky{}, m)
	if _, err := c.compute(randomTask(m, 4, 4, 1, 0.1)); err == nil {
		t.Fatal("no error from a panicking backend")
	}
}

// stepperBackend records the Steps calls the computer makes.
type stepperBackend struct {
	refBackend
	calls     int
	gradients int
	id        SnapshotID
	n, batch  int
	steps     int
	lr        float32
	err       error
}

func (b *stepperBackend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	b.gradients++
	return b.refBackend.Gradient(params, x, labels, grad)
}

func (b *stepperBackend) Steps(id SnapshotID, params, x []float32, labels []int32, batchSize, steps int, lr float32, update []float32) (float64, int, error) {
	b.calls++
	b.id, b.n, b.batch, b.steps, b.lr = id, len(labels), batchSize, steps, lr
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
	tk.snap = 42
	tk.x = append(tk.x, make([]float32, 5*m.InputSize)...) // a recycled, longer buffer
	b := &stepperBackend{}
	c := newComputer(b, m)
	res, err := c.compute(tk)
	if err != nil {
		t.Fatal(err)
	}
	if b.calls != 1 || b.gradients != 0 {
		t.Fatalf("%d Steps and %d Gradient calls, want 1 and 0", b.calls, b.gradients)
	}
	if b.id != 42 || b.n != 10 || b.batch != 4 || b.steps != 3 || b.lr != 0.25 {
		t.Errorf("Steps got id %d, %d examples, batch %d, %d steps, lr %v; want 42, 10, 4, 3, 0.25", b.id, b.n, b.batch, b.steps, b.lr)
	}
	if res.LossSum != 2.5 || res.Correct != 7 || res.Examples != 10 || res.Update[5] != 5 {
		t.Errorf("result %+v does not carry what Steps returned", res)
	}
	b.err = errors.New("device lost")
	if _, err := c.compute(tk); err == nil || !strings.Contains(err.Error(), "device lost") {
		t.Errorf("compute returned %v, want the Steps error", err)
	}
}
