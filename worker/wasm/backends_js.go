//go:build js && wasm

package wasm

import (
	"errors"
	"fmt"
	"syscall/js"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
	"github.com/crowdtrain/crowdtrain/worker/wasm/webgpu"
)

// BackendWebGPU is the GPU backend's name.
const BackendWebGPU = webgpu.Name

// computeBackend is the backend a tab trains on, its name as the page
// shows it, and why, when Go chose differently from worker.js (it fell
// back from the GPU); "" keeps worker.js's reason.
type computeBackend struct {
	worker.Backend
	name, reason string
}

// openBackend builds the backend worker.js chose: on "webgpu", the GPU
// worker.js handed over as globalThis.crowdtrainGPU, falling back to the
// best CPU backend when it fails; otherwise want's CPU backend.
func openBackend(want string) (computeBackend, error) {
	if want == BackendWebGPU {
		g, err := webgpu.Open(js.Global().Get("crowdtrainGPU"), js.Global().Get("crowdtrainGPUName").String())
		if err == nil {
			return computeBackend{Backend: g, name: BackendWebGPU}, nil
		}
		cb, cerr := openCPU(BackendSIMD)
		cb.reason = fmt.Sprintf("the GPU failed (%v): training on %s instead", err, cb.name)
		return cb, cerr
	}
	return openCPU(want)
}

// openCPU is want's CPU backend (wasm-simd or wasm-go), or wasm-go with
// why when wasm-simd cannot run.
func openCPU(want string) (computeBackend, error) {
	name, err := useBackend(want)
	cb := computeBackend{name: name}
	if err != nil {
		cb.reason = fmt.Sprintf("%s is not available (%v): the scalar Go kernel", want, err)
	}
	b, err := cpu.New(1)
	cb.Backend = b
	return cb, err
}

// keepWithin makes a CPU backend train within the tab's share of memory
// (memoryMB, as contribute.js's memoryMB tells it and the hello's caps
// say): a batch whose activations do not fit is computed in
// micro-batches.
func keepWithin(cb computeBackend, memoryMB int) {
	if c, ok := cb.Backend.(*cpu.Backend); ok && memoryMB > 0 {
		c.SetMemoryBudget(int64(memoryMB) << 20)
	}
}

// gpuWatch passes a worker's calls to the GPU backend and says on failed
// when the GPU fails (a lost device, a kernel error), so that the bridge
// moves the tab to the CPU; the failing lease goes back to the
// coordinator, as any lease a backend cannot compute.
type gpuWatch struct {
	*webgpu.Backend
	failed chan<- error
}

func (g gpuWatch) fail(err error) error {
	if err != nil && errors.Is(err, webgpu.ErrDevice) {
		select {
		case g.failed <- err:
		default:
		}
	}
	return err
}

// Prepare fails over to the CPU on any error: a model too large for the
// GPU's buffers trains on the CPU instead.
func (g gpuWatch) Prepare(m *nn.Model, maxBatch int) error {
	err := g.Backend.Prepare(m, maxBatch)
	if err != nil {
		select {
		case g.failed <- err:
		default:
		}
	}
	return err
}

func (g gpuWatch) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	l, c, err := g.Backend.Gradient(params, x, labels, grad)
	return l, c, g.fail(err)
}

func (g gpuWatch) Steps(id worker.SnapshotID, params, x []float32, labels []int32, s worker.InnerSteps, update []float32) (float64, int, error) {
	l, c, err := g.Backend.Steps(id, params, x, labels, s, update)
	return l, c, g.fail(err)
}
