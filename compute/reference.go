package compute

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/nn"
)

// Reference is the pinned fp32 backend: nn's layers on one thread with
// the pure-Go GEMM kernel (nn.KernelGo), whatever kernel the process
// uses, so its figures are the same on every machine and equal, bit for
// bit, a one-thread CPU worker's on that kernel (worker/cpu's tests check
// it). The coordinator recomputes a disputed spot check on it. Its zero
// value is ready; use it from one goroutine.
type Reference struct {
	// AnyKernel runs it on the process's GEMM kernel instead (nn's
	// choice: vector instructions where the CPU has them): the same
	// layers on one thread, within rounding of the pinned figures and
	// several times faster on a CNN, for comparisons within a tolerance.
	AnyKernel bool

	model *nn.Model
	ws    *nn.Workspace
	seed  uint64 // the next Gradient call's dropout seed
}

// Name says what it computes with.
func (b *Reference) Name() string { return "reference-" + nn.KernelGo }

// Threads is 1: one goroutine, so that the order of every sum is fixed.
func (b *Reference) Threads() int { return 1 }

// Prepare readies a workspace for model with batches of up to maxBatch,
// pinned to the pure-Go kernel; the dropout seed starts again at 0.
func (b *Reference) Prepare(model *nn.Model, maxBatch int) error {
	if maxBatch < 1 {
		return fmt.Errorf("batch size must be positive, got %d", maxBatch)
	}
	ws := model.NewWorkspace(maxBatch)
	if !b.AnyKernel {
		if err := ws.PinKernel(nn.KernelGo); err != nil {
			return err
		}
	}
	b.model, b.ws, b.seed = model, ws, 0
	return nil
}

// SetDropoutSeed implements Seeder.
func (b *Reference) SetDropoutSeed(seed uint64) { b.seed = seed }

// Gradient implements Backend.
func (b *Reference) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	if b.model == nil {
		return 0, 0, fmt.Errorf("compute: Reference.Gradient before Prepare")
	}
	b.ws.SetSeed(b.seed)
	b.ws.SetFirstExample(0)
	b.seed++
	loss, correct := b.model.Gradient(b.ws, params, x, labels, grad)
	return loss, correct, nil
}
