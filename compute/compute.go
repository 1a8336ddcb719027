package compute

import (
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// Task is a lease with its data and base parameters, ready to compute.
type Task struct {
	Lease  protocol.Lease
	Params []float32  // the snapshot at base
	Base   int64      // its version: the lease's, or started's for snapshot "latest"
	Snap   SnapshotID // identifies Params for a Stepper (0: unknown)
	X      []float32  // at least Lease.Count examples
	Labels []int32    // their labels, the model's labels per example for each
	// Reference is the reference policy's parameters, for a learn lease
	// with a KL penalty (protocol.LearnTask.KLCoef above 0).
	Reference []float32
}

// Computer turns tasks into results with a Backend. It owns the buffers
// for the update, the gradient and the local-steps parameters, reused
// from one task to the next.
type Computer struct {
	backend Backend
	model   *nn.Model
	// bs is what the backend is prepared for, which several computers
	// may share (Share): moving to another model prepares it again.
	bs     *Prepared
	update protocol.Floats
	grad   []float32
	local  []float32
	adamw  nn.AdamW
	result protocol.Result
	// decoder and ws compute RL leases (rl.go), made on first use.
	decoder *nn.Decoder
	ws      *nn.Workspace
}

// Prepared is the model and batch a backend was last prepared for.
type Prepared struct {
	model *nn.Model
	batch int
}

// NewComputer returns a Computer of model m's leases on b.
func NewComputer(b Backend, m *nn.Model) *Computer {
	return &Computer{backend: b, model: m, update: make(protocol.Floats, m.NumParams), bs: &Prepared{}}
}

// Share makes c record what its backend is prepared for in p, which the
// computers of other models on the same backend share: a worker's jobs
// take turns on one backend, and each must prepare it again after another.
func (c *Computer) Share(p *Prepared) { c.bs = p }

// Compute runs the lease: up to LocalSteps inner steps of BatchSize
// examples from the base parameters with the lease's inner optimizer (its
// state fresh for this lease; the first step's dropout seed
// DropoutSeed(lease)), then the update its update kind names:
// (w_base - w_after) / inner lr, or w_base - w_after. For one SGD step of
// kind gradient that is the gradient itself, written straight into the
// update. A panic in the backend is turned into an error here, so one bad
// task never kills the worker. The result and its update are c's, valid
// until the next call.
func (c *Computer) Compute(t *Task) (res *protocol.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("backend %s panicked: %v", c.backend.Name(), r)
		}
	}()
	l := t.Lease
	if IsRL(l) {
		return c.computeRL(t)
	}
	if l.Snapshot != protocol.SnapshotGranted && l.Snapshot != protocol.SnapshotLatest {
		return nil, fmt.Errorf("snapshot policy %q is not %q or %q: update crowdtrain", l.Snapshot, protocol.SnapshotGranted, protocol.SnapshotLatest)
	}
	plan := InnerSteps{BatchSize: l.BatchSize, Steps: l.LocalSteps, Inner: l.Inner, UpdateKind: l.UpdateKind, Seed: DropoutSeed(l)}
	if err := plan.Check(); err != nil {
		return nil, err
	}
	if bs := c.bs; bs.model != c.model || l.BatchSize > bs.batch {
		batch := l.BatchSize
		if bs.model == c.model {
			batch = max(batch, bs.batch)
		}
		if err := c.backend.Prepare(c.model, batch); err != nil {
			bs.model = nil
			return nil, fmt.Errorf("backend %s: %w", c.backend.Name(), err)
		}
		bs.model, bs.batch = c.model, batch
	}
	start := time.Now()
	in, lpe := c.model.InputSize, c.model.LabelsPerExample
	if len(t.Labels) < l.Count*lpe || len(t.X) < l.Count*in {
		return nil, fmt.Errorf("lease of %d examples with %d input values and %d labels (the model takes %d inputs and %d labels per example)",
			l.Count, len(t.X), len(t.Labels), in, lpe)
	}
	x, labels := t.X[:l.Count*in], t.Labels[:l.Count*lpe]
	var lossSum float64
	var correct int
	st, stepper := c.backend.(Stepper)
	stepper = stepper && (plan.Inner.ClipNorm == 0 || clips(st))
	if sd, ok := c.backend.(Seeder); ok && !stepper {
		sd.SetDropoutSeed(plan.Seed)
	}
	if stepper {
		lossSum, correct, err = st.Steps(t.Snap, t.Params, x, labels, plan, c.update)
	} else if plan.gradientOnly(l.Count) {
		n := min(l.Count, l.BatchSize)
		lossSum, correct, err = c.backend.Gradient(t.Params, x[:n*in], labels[:n*lpe], c.update)
		if err == nil {
			nn.ClipInPlace(c.update, float64(plan.Inner.ClipNorm))
		}
	} else {
		lossSum, correct, err = c.localSteps(t.Params, x, labels, plan)
	}
	if err != nil {
		return nil, err
	}
	c.result = protocol.Result{
		LeaseID: l.ID, JobID: l.JobID, BaseVersion: t.Base, Codec: protocol.CodecF32,
		Update: c.update, Examples: l.Count, LossSum: lossSum, Correct: correct,
		ComputeMs: float64(time.Since(start).Microseconds()) / 1000,
	}
	return &c.result, nil
}

// localSteps runs the inner steps on the host, one Gradient call per
// batch, and writes the update. labels holds the model's labels per
// example for each.
func (c *Computer) localSteps(base, x []float32, labels []int32, plan InnerSteps) (lossSum float64, correct int, err error) {
	in, lpe := c.model.InputSize, c.model.LabelsPerExample
	count := len(labels) / lpe
	c.startInner(base, plan.Inner)
	for step := 0; step < plan.Steps; step++ {
		lo := step * plan.BatchSize
		if lo >= count {
			break
		}
		hi := min(lo+plan.BatchSize, count)
		ls, cor, err := c.backend.Gradient(c.local, x[lo*in:hi*in], labels[lo*lpe:hi*lpe], c.grad)
		if err != nil {
			return 0, 0, err
		}
		lossSum += ls
		correct += cor
		c.innerStep(plan.Inner)
	}
	scale := plan.UpdateScale()
	for i, w := range c.local {
		c.update[i] = (base[i] - w) * scale
	}
	return lossSum, correct, nil
}

// startInner readies local steps from base: c.local holds a copy of it,
// c.grad room for a gradient, and the inner optimizer o its state fresh.
func (c *Computer) startInner(base []float32, o protocol.InnerOptimizer) {
	if c.grad == nil {
		c.grad = make([]float32, c.model.NumParams)
		c.local = make([]float32, c.model.NumParams)
	}
	copy(c.local, base)
	if o.Type == protocol.InnerAdamW {
		c.adamw.LR, c.adamw.WeightDecay, c.adamw.Beta1, c.adamw.Beta2, c.adamw.Epsilon = o.LR, o.WeightDecay, o.Beta1, o.Beta2, o.Epsilon
		c.adamw.ClipNorm = o.ClipNorm
		c.adamw.Reset(len(c.local))
	}
}

// innerStep takes one step of the inner optimizer o on c.local with the
// gradient in c.grad.
func (c *Computer) innerStep(o protocol.InnerOptimizer) {
	if o.Type == protocol.InnerAdamW {
		c.adamw.Step(c.local, c.grad)
	} else {
		nn.SGDStep(c.local, c.grad, o.LR*nn.ClipScale(c.grad, float64(o.ClipNorm)))
	}
}

// Lease runs lease l on b from params over the lease's examples x and
// labels (l.Count times the labels per example) as a worker would: for the
// coordinator's recomputation of a disputed spot check, and for tools and
// tests that compare backends and builds. The result's update is a fresh
// slice.
func Lease(b Backend, m *nn.Model, l protocol.Lease, params, x []float32, labels []int32) (*protocol.Result, error) {
	if len(labels) != l.Count*m.LabelsPerExample || len(x) != l.Count*m.InputSize || len(params) != m.NumParams {
		return nil, fmt.Errorf("lease of %d examples with %d labels, %d input values and %d parameters (model: %d inputs, %d parameters)",
			l.Count, len(labels), len(x), len(params), m.InputSize, m.NumParams)
	}
	res, err := NewComputer(b, m).Compute(&Task{Lease: l, Params: params, Base: l.BaseVersion, X: x, Labels: labels})
	if err != nil {
		return nil, err
	}
	r := *res
	r.Update = append(protocol.Floats(nil), res.Update...)
	return &r, nil
}

// clips reports whether a Stepper clips the gradient to the inner
// optimizer's clip_norm itself; one that does not says nothing, and the
// lease runs on the host through its Gradient instead.
func clips(st Stepper) bool {
	c, ok := st.(interface{ ClipsNorm() bool })
	return ok && c.ClipsNorm()
}
