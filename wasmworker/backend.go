package wasmworker

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// Backend computes gradients with package nn on one thread, the only kind
// of thread Go's js/wasm has.
type Backend struct {
	model *nn.Model
	ws    *nn.Workspace
	seed  uint64 // the next Gradient call's dropout seed
}

func (b *Backend) Kind() string { return protocol.KindBrowser }

// Name is "wasm-" and the GEMM kernel in use: "wasm-go" unless a test
// switched kernels.
func (b *Backend) Name() string { return "wasm-" + nn.KernelName() }
func (b *Backend) Threads() int { return 1 }

// Prepare allocates the workspace once; later leases reuse it. The
// dropout seed starts again at 0.
func (b *Backend) Prepare(model *nn.Model, maxBatch int) error {
	if maxBatch < 1 {
		return fmt.Errorf("batch size must be positive, got %d", maxBatch)
	}
	b.model = model
	b.ws = model.NewWorkspace(maxBatch)
	b.seed = 0 // as the new workspace's
	return nil
}

// SetDropoutSeed implements worker.Seeder: the next Gradient call draws
// its dropout masks with seed, the one after with seed+1, and so on.
func (b *Backend) SetDropoutSeed(seed uint64) { b.seed = seed }

// Gradient implements worker.Backend.
func (b *Backend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	if b.model == nil {
		return 0, 0, fmt.Errorf("wasmworker: Gradient before Prepare")
	}
	b.ws.SetSeed(b.seed)
	b.seed++
	loss, hits := b.model.Gradient(b.ws, params, x, labels, grad)
	return loss, hits, nil
}
