package gpu

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// Executor trains a model on a Device: what a GPU backend's Prepare,
// Gradient, Steps and Forward do once the backend has checked that its
// device is open. Its methods must not be called concurrently.
type Executor struct {
	dev    Device
	prefix string // starts the errors of bad calls: "cuda", "webgpu"
	net    *net
	snap   worker.SnapshotID // the snapshot net.base holds, 0 none
	seed   uint64            // the next Gradient call's dropout seed
}

// New is an executor on dev whose errors start with prefix.
func New(dev Device, prefix string) *Executor { return &Executor{dev: dev, prefix: prefix} }

// Prepare lays model out in device memory for batches of up to maxBatch
// (the device's Reserve replaces what was there); the dropout seed starts
// again at 0.
func (e *Executor) Prepare(model *nn.Model, maxBatch int) error {
	if maxBatch < 1 {
		return fmt.Errorf("batch size must be positive, got %d", maxBatch)
	}
	e.net, e.snap, e.seed = nil, 0, 0 // as a new nn.Workspace's seed
	sized, err := layout(e.dev, model, maxBatch, 0)
	if err != nil {
		return err
	}
	base, err := e.dev.Reserve(sized.bytes, 4*sized.readFloats())
	if err != nil {
		return err
	}
	if e.net, err = layout(e.dev, model, maxBatch, base); err != nil {
		return err
	}
	return nil
}

// Release forgets the model; the device frees its memory.
func (e *Executor) Release() { e.net, e.snap = nil, 0 }

// SetDropoutSeed implements worker.Seeder: the next Gradient call draws
// its dropout masks with seed, the one after with seed+1, and so on.
// Steps takes its seed from its plan instead.
func (e *Executor) SetDropoutSeed(seed uint64) { e.seed = seed }

func (e *Executor) ready(params, x []float32, labels []int32) error {
	if e.net == nil {
		return fmt.Errorf("%s: Gradient or Steps before Prepare", e.prefix)
	}
	m := e.net.model
	if len(params) != m.NumParams {
		return fmt.Errorf("%s: %d parameters, the model has %d", e.prefix, len(params), m.NumParams)
	}
	if len(labels)%m.LabelsPerExample != 0 {
		return fmt.Errorf("%s: %d labels is not a whole number of examples of %d labels", e.prefix, len(labels), m.LabelsPerExample)
	}
	if err := m.CheckLabels(labels); err != nil {
		return err
	}
	// Token ids index the embedding's table on the device: check them here.
	return m.CheckInputs(x)
}

// Gradient implements worker.Backend: the parameters are uploaded on every
// call (Steps uploads a snapshot once).
func (e *Executor) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	if err := e.ready(params, x, labels); err != nil {
		return 0, 0, err
	}
	nt, dev := e.net, e.dev
	n := len(labels) / nt.model.LabelsPerExample
	if n < 1 || n > nt.maxBatch || len(x) != n*nt.model.InputSize || len(grad) != len(params) {
		return 0, 0, fmt.Errorf("%s: Gradient of %d examples (%d values, grad %d), want 1..%d examples of %d values",
			e.prefix, n, len(x), len(grad), nt.maxBatch, nt.model.InputSize)
	}
	nt.seed = e.seed
	e.seed++
	e.snap = 0 // base is not what w holds from here on
	if err := dev.Upload(nt.w, params); err != nil {
		return 0, 0, err
	}
	b, err := dev.Examples(x, labels, 0, n, nt.room)
	if err != nil {
		return 0, 0, err
	}
	if err := nt.clearSums(dev); err != nil {
		return 0, 0, err
	}
	if err := nt.gradient(dev, nt.w, b, n, nt.grad); err != nil {
		return 0, 0, err
	}
	if err := dev.Download(grad, nt.grad); err != nil {
		return 0, 0, err
	}
	return dev.Losses(nt.sums)
}

// Steps implements worker.Stepper: the snapshot is uploaded only when id
// is new, and the inner steps (SGD or AdamW, its moments zeroed first) run
// on the device, each gradient clipped there to the inner optimizer's
// clip_norm first.
func (e *Executor) Steps(id worker.SnapshotID, params, x []float32, labels []int32, plan worker.InnerSteps, update []float32) (float64, int, error) {
	if err := e.ready(params, x, labels); err != nil {
		return 0, 0, err
	}
	nt, dev := e.net, e.dev
	in, lpe := nt.model.InputSize, nt.model.LabelsPerExample
	count := len(labels) / lpe
	if err := plan.Check(); err != nil {
		return 0, 0, fmt.Errorf("%s: %w", e.prefix, err)
	}
	switch {
	case plan.BatchSize > nt.maxBatch:
		return 0, 0, fmt.Errorf("%s: batch of %d, prepared for 1..%d", e.prefix, plan.BatchSize, nt.maxBatch)
	case count < 1 || len(x) != count*in || len(update) != len(params):
		return 0, 0, fmt.Errorf("%s: Steps with %d examples of %d values (want %d), update %d", e.prefix, count, len(x)/max(in, 1), in, len(update))
	}
	o := plan.Inner
	adamw := o.Type == protocol.InnerAdamW
	n := len(params)
	if id == 0 || id != e.snap {
		e.snap = 0
		if err := dev.Upload(nt.base, params); err != nil {
			return 0, 0, err
		}
		e.snap = id
	}
	nt.seed = plan.Seed
	if err := dev.Copy(nt.w, nt.base, n); err != nil {
		return 0, 0, err
	}
	if err := nt.clearSums(dev); err != nil {
		return 0, 0, err
	}
	if adamw {
		for _, p := range []Ptr{nt.moment1, nt.moment2} {
			if err := dev.Zero(p, n); err != nil {
				return 0, 0, err
			}
		}
	}
	for step := 0; step < plan.Steps; step++ {
		lo := step * plan.BatchSize
		if lo >= count {
			break
		}
		hi := min(lo+plan.BatchSize, count)
		b, err := dev.Examples(x, labels, lo, hi, nt.room)
		if err != nil {
			return 0, 0, err
		}
		if err := nt.gradient(dev, nt.w, b, hi-lo, nt.grad); err != nil {
			return 0, 0, err
		}
		if err := nt.clip(dev, nt.grad, o.ClipNorm); err != nil {
			return 0, 0, err
		}
		if plan.GradientOnly(count) {
			break // the only step: its gradient is the update
		}
		if adamw {
			c1, c2 := nn.AdamWScales(step+1, o.Beta1, o.Beta2)
			err = dev.Launch("adamw_step", n, nt.w, nt.grad, nt.moment1, nt.moment2, o.LR, o.WeightDecay, o.Beta1, o.Beta2, o.Epsilon, c1, c2, n)
		} else {
			err = dev.Launch("sgd_step", n, nt.w, nt.grad, o.LR, n)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if !plan.GradientOnly(count) {
		if err := dev.Launch("pseudo_gradient", n, nt.base, nt.w, nt.grad, plan.UpdateScale(), n); err != nil {
			return 0, 0, err
		}
	}
	if err := dev.Download(update, nt.grad); err != nil {
		return 0, 0, err
	}
	return dev.Losses(nt.sums)
}

// Forward writes the model's output (logits) for the examples of x into
// out, without dropout: what a test compares with nn.Model.Forward.
func (e *Executor) Forward(params, x []float32, out []float32) error {
	if err := e.ready(params, x, nil); err != nil {
		return err
	}
	nt, dev := e.net, e.dev
	m := nt.model
	n := len(x) / max(m.InputSize, 1)
	if n < 1 || n > nt.maxBatch || len(x) != n*m.InputSize || len(out) != n*m.NumClasses*m.LabelsPerExample {
		return fmt.Errorf("%s: Forward of %d values into %d, want 1..%d examples of %d values and %d outputs each",
			e.prefix, len(x), len(out), nt.maxBatch, m.InputSize, m.NumClasses*m.LabelsPerExample)
	}
	e.snap = 0
	if err := dev.Upload(nt.w, params); err != nil {
		return err
	}
	if err := dev.Upload(nt.room.X, x); err != nil {
		return err
	}
	top := nt.top
	top.acts[0] = nt.room.X
	p := &pass{dev: dev, nt: nt, w: nt.w, n: n}
	if err := p.forward(top); err != nil {
		return err
	}
	return dev.Download(out, top.acts[len(top.layers)])
}
