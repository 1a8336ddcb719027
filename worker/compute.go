package worker

import (
	"fmt"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// task is a lease with its data and base parameters, ready to compute.
// Task buffers are recycled, never reallocated per lease.
type task struct {
	lease  protocol.Lease
	params []float32 // the snapshot at lease.BaseVersion
	snap   SnapshotID
	x      []float32
	labels []int32
}

// computer turns tasks into results with a Backend. It owns the buffers
// for the update, the gradient and the local-steps parameters.
type computer struct {
	backend  Backend
	model    *nn.Model
	prepared int // batch size the backend is prepared for
	update   protocol.Floats
	grad     []float32
	local    []float32
	result   protocol.Result
}

func newComputer(b Backend, m *nn.Model) *computer {
	return &computer{backend: b, model: m, update: make(protocol.Floats, m.NumParams)}
}

// compute runs the lease: LocalSteps inner SGD steps of BatchSize examples
// from the base parameters, then the pseudo-gradient
// (w_base - w_after) / inner_lr. For one step that is the gradient itself,
// so it is written straight into the update. A panic in the backend is
// turned into an error here, so one bad task never kills the worker.
func (c *computer) compute(t *task) (res *protocol.Result, err error) {
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("backend %s panicked: %v", c.backend.Name(), r)
		}
	}()
	l := t.lease
	if l.Inner.Type != protocol.InnerSGD || l.UpdateKind != protocol.UpdateGradient || l.Snapshot != protocol.SnapshotGranted {
		return nil, fmt.Errorf("this worker computes only inner sgd, update_kind %q and snapshot %q, not %q/%q/%q: update crowdtrain",
			protocol.UpdateGradient, protocol.SnapshotGranted, l.Inner.Type, l.UpdateKind, l.Snapshot)
	}
	if l.BatchSize > c.prepared {
		if err := c.backend.Prepare(c.model, l.BatchSize); err != nil {
			return nil, fmt.Errorf("backend %s: %w", c.backend.Name(), err)
		}
		c.prepared = l.BatchSize
	}
	start := time.Now()
	in := c.model.InputSize
	var lossSum float64
	var correct int
	if st, ok := c.backend.(Stepper); ok {
		lossSum, correct, err = st.Steps(t.snap, t.params, t.x[:l.Count*in], t.labels[:l.Count], l.BatchSize, l.LocalSteps, l.Inner.LR, c.update)
		if err != nil {
			return nil, err
		}
	} else if l.LocalSteps == 1 && l.Count <= l.BatchSize {
		lossSum, correct, err = c.backend.Gradient(t.params, t.x[:l.Count*in], t.labels[:l.Count], c.update)
		if err != nil {
			return nil, err
		}
	} else {
		if c.grad == nil {
			c.grad = make([]float32, c.model.NumParams)
			c.local = make([]float32, c.model.NumParams)
		}
		copy(c.local, t.params)
		for step := 0; step < l.LocalSteps; step++ {
			lo := step * l.BatchSize
			if lo >= l.Count {
				break
			}
			hi := min(lo+l.BatchSize, l.Count)
			ls, cor, err := c.backend.Gradient(c.local, t.x[lo*in:hi*in], t.labels[lo:hi], c.grad)
			if err != nil {
				return nil, err
			}
			lossSum += ls
			correct += cor
			nn.SGDStep(c.local, c.grad, l.Inner.LR)
		}
		inv := 1 / l.Inner.LR
		for i, w := range c.local {
			c.update[i] = (t.params[i] - w) * inv
		}
	}
	c.result = protocol.Result{
		LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Codec: protocol.CodecF32,
		Update: c.update, Examples: l.Count, LossSum: lossSum, Correct: correct,
		ComputeMs: float64(time.Since(start).Microseconds()) / 1000,
	}
	return &c.result, nil
}
