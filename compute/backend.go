package compute

import (
	"fmt"
	"hash/fnv"
	"math"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// Backend computes gradients for one worker. The loop calls Prepare once
// per job, then Gradient from a single goroutine.
type Backend interface {
	// Name identifies the implementation, e.g. "cpu-gonum".
	Name() string
	// Threads is how many threads it computes with.
	Threads() int
	// Prepare readies the backend for model with batches of up to maxBatch.
	Prepare(model *nn.Model, maxBatch int) error
	// Gradient overwrites grad with the gradient of the mean loss over the
	// batch (len(labels) examples of x) at params, and returns the summed
	// loss and the number of correct predictions.
	Gradient(params, x []float32, labels []int32, grad []float32) (lossSum float64, correct int, err error)
}

// Seeder is implemented by backends that train models with dropout: the
// loop calls SetDropoutSeed before a lease's first Gradient call, and
// each Gradient call then draws its masks (nn.DropoutKeep) with the seed
// and moves it on by one, numbering the values of the whole batch however
// the backend splits it. A backend without it draws whatever masks its
// own seed gives, the same for every lease.
type Seeder interface {
	SetDropoutSeed(seed uint64)
}

// DropoutSeed is the dropout seed of a lease's first inner step: a hash of
// its job, lease id, shard and first example. Leases differ in at least
// the id, so two tasks draw different masks, and every backend computing
// the same lease draws the same ones. A spot check's copy (CopyOf) draws
// the masks of the lease it copies.
func DropoutSeed(l protocol.Lease) uint64 {
	h := fnv.New64a()
	h.Write([]byte(l.JobID))
	z := h.Sum64()
	id := l.ID
	if l.CopyOf != 0 {
		id = l.CopyOf
	}
	for _, v := range []uint64{id, uint64(int64(l.ShardID)), uint64(int64(l.Start))} {
		z = mix64(z ^ v)
	}
	return z
}

// mix64 is the finaliser of SplitMix64.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// SnapshotID identifies the parameters a Stepper is given: two calls with
// the same non-zero id carry the same parameters, so a backend that keeps
// them on a device may skip uploading them again. Zero means unknown.
type SnapshotID uint64

// InnerSteps is what a lease asks of its local steps: up to Steps steps
// of BatchSize examples with the inner optimizer, and the update it
// returns.
type InnerSteps struct {
	BatchSize  int
	Steps      int
	Inner      protocol.InnerOptimizer
	UpdateKind string // protocol.UpdateGradient or protocol.UpdateDelta
	// Seed is the dropout seed of the first step (DropoutSeed of the
	// lease); step k draws its masks with Seed+k.
	Seed uint64
}

// Check says what is wrong with s for a worker of this build: an unknown
// optimizer or update kind, a learning rate that is not positive, an AdamW
// without a positive epsilon.
func (s InnerSteps) Check() error {
	o := s.Inner
	switch {
	case s.BatchSize < 1 || s.Steps < 1:
		return fmt.Errorf("batch size %d and local steps %d must be positive", s.BatchSize, s.Steps)
	case o.Type != protocol.InnerSGD && o.Type != protocol.InnerAdamW:
		return fmt.Errorf("inner optimizer %q is not %q or %q: update crowdtrain", o.Type, protocol.InnerSGD, protocol.InnerAdamW)
	case s.UpdateKind != protocol.UpdateGradient && s.UpdateKind != protocol.UpdateDelta:
		return fmt.Errorf("update kind %q is not %q or %q: update crowdtrain", s.UpdateKind, protocol.UpdateGradient, protocol.UpdateDelta)
	case !(o.LR > 0) || math.IsInf(float64(o.LR), 0):
		return fmt.Errorf("inner learning rate %v must be a finite number > 0", o.LR)
	case o.Type == protocol.InnerAdamW && !(o.Epsilon > 0):
		return fmt.Errorf("inner adamw needs epsilon > 0 (got %v): with 0 a parameter whose gradient is 0 divides 0 by 0", o.Epsilon)
	case o.Type == protocol.InnerAdamW && !(o.Beta1 >= 0 && o.Beta1 < 1 && o.Beta2 >= 0 && o.Beta2 < 1):
		return fmt.Errorf("inner adamw betas must be in [0, 1), got %v and %v", o.Beta1, o.Beta2)
	case !(o.ClipNorm >= 0) || math.IsInf(float64(o.ClipNorm), 0):
		return fmt.Errorf("inner clip_norm %v must be a finite number >= 0", o.ClipNorm)
	}
	return nil
}

// gradientOnly reports whether the update is the gradient of the first
// batch itself: one SGD step (the rest of the examples or the step budget
// ends there) and update kind gradient. (w_base - (w_base - lr*g))/lr
// would only round g.
func (s InnerSteps) gradientOnly(count int) bool {
	return s.Inner.Type == protocol.InnerSGD && s.UpdateKind == protocol.UpdateGradient && (s.Steps == 1 || count <= s.BatchSize)
}

// GradientOnly is gradientOnly for backends in other packages.
func (s InnerSteps) GradientOnly(count int) bool { return s.gradientOnly(count) }

// UpdateScale is what w_base - w_after is multiplied by: 1/lr for update
// kind gradient, 1 for delta.
func (s InnerSteps) UpdateScale() float32 {
	if s.UpdateKind == protocol.UpdateDelta {
		return 1
	}
	return 1 / s.Inner.LR
}

// Stepper is an optional extension of Backend for backends that keep the
// model in their own memory (a GPU): the loop hands it a whole lease at
// once, instead of calling Gradient per batch and stepping on the host.
// A lease whose inner optimizer has a clip_norm goes to Steps only when
// the backend also has a method ClipsNorm() bool that returns true;
// otherwise it runs on the host through Gradient.
type Stepper interface {
	// Steps runs up to s.Steps inner steps of s.Inner from params, each
	// on the next s.BatchSize examples of x (len(labels) examples),
	// stopping early when the examples run out, with optimizer state
	// fresh for this call, step k drawing its dropout masks with
	// s.Seed+k. It writes (params - w_after) * s.UpdateScale()
	// into update; when s.GradientOnly, that is the first batch's
	// gradient, written as computed. It returns the loss summed over every
	// example and the correct predictions. s.BatchSize is at most the
	// Prepare'd maxBatch; s has passed Check.
	Steps(id SnapshotID, params, x []float32, labels []int32, s InnerSteps, update []float32) (lossSum float64, correct int, err error)
}
