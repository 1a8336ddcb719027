//go:build js && wasm

package webgpu

import (
	"errors"
	"fmt"
	"syscall/js"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/gpu"
)

// Name is the backend's name, as the page and GET /api/v1/workers show it.
const Name = "webgpu"

// Backend computes on the browser's GPU through WebGPU. It implements
// worker.Backend, worker.Stepper and worker.Seeder. Its methods must be
// called from one goroutine that is not a JS callback.
type Backend struct {
	d       *device
	adapter string        // the adapter's description, for logs
	exec    *gpu.Executor // the layers and inner steps, on d
}

var (
	_ worker.Backend = (*Backend)(nil)
	_ worker.Stepper = (*Backend)(nil)
	_ worker.Seeder  = (*Backend)(nil)
)

// Open compiles the kernels on gpu, a GPUDevice the page requested, and
// describes the adapter it came from in adapter (for logs).
func Open(jsDevice js.Value, adapter string) (*Backend, error) {
	d, err := openDevice(jsDevice)
	if err != nil {
		return nil, err
	}
	if err := selfTest(d); err != nil {
		d.close()
		return nil, err
	}
	return &Backend{d: d, adapter: adapter, exec: gpu.New(d, "webgpu")}, nil
}

// selfTest multiplies two small matrices on the GPU and checks the
// product against the host's: a GPU that computes wrong numbers (a broken
// driver, a lost device) is found before it sends a wrong update.
func selfTest(d *device) error {
	const m, k, n = 37, 29, 70 // not multiples of the tile
	a, bm := make([]float32, m*k), make([]float32, k*n)
	for i := range a {
		a[i] = float32(i%13) - 6
	}
	for i := range bm {
		bm[i] = float32(i%7)*0.5 - 1.5
	}
	pa := gpu.Ptr(gpu.GuardBytes)
	pb, pc := gpu.Off(pa, m*k), gpu.Off(pa, m*k+k*n)
	if _, err := d.Reserve(int(gpu.Off(pc, m*n)), 4*m*n); err != nil {
		return err
	}
	defer d.release()
	if err := d.Upload(pa, a); err != nil {
		return err
	}
	if err := d.Upload(pb, bm); err != nil {
		return err
	}
	if err := d.Gemm(false, false, m, n, k, 1, pa, k, 0, pb, n, 0, 0, pc, n, 0, 1); err != nil {
		return err
	}
	c := make([]float32, m*n)
	if err := d.Download(c, pc); err != nil {
		return fmt.Errorf("webgpu: self-test: %w", err)
	}
	for i := range m {
		for j := range n {
			var want float32 // small integers and halves: exact in float32
			for p := range k {
				want += a[i*k+p] * bm[p*n+j]
			}
			if c[i*n+j] != want {
				return fmt.Errorf("%w: self-test: a matrix product on the GPU gave %v at (%d,%d), want %v", ErrDevice, c[i*n+j], i, j, want)
			}
		}
	}
	return nil
}

// Name is "webgpu".
func (b *Backend) Name() string { return Name }

// Threads is 1: the GPU, driven from Go's one thread.
func (b *Backend) Threads() int { return 1 }

// Adapter describes the GPU.
func (b *Backend) Adapter() string { return b.adapter }

// Close frees the GPU memory; the backend cannot be used afterwards.
func (b *Backend) Close() error {
	if b.d != nil {
		b.d.close()
		b.d = nil
	}
	return nil
}

// Prepare lays model out in GPU memory for batches of up to maxBatch; the
// dropout seed starts again at 0.
func (b *Backend) Prepare(model *nn.Model, maxBatch int) error {
	if b.d == nil {
		return errors.New("webgpu: backend is closed")
	}
	if maxBatch < 1 {
		return fmt.Errorf("batch size must be positive, got %d", maxBatch)
	}
	if err := b.exec.Prepare(model, maxBatch); err != nil {
		return fmt.Errorf("preparing the GPU for %d-parameter model batches of %d: %w", model.NumParams, maxBatch, err)
	}
	return nil
}

// SetDropoutSeed implements worker.Seeder.
func (b *Backend) SetDropoutSeed(seed uint64) { b.exec.SetDropoutSeed(seed) }

// ClipsNorm reports that Steps clips each step's gradient on the GPU.
func (b *Backend) ClipsNorm() bool { return true }

// ready says why the GPU cannot take a call: closed, or failed.
func (b *Backend) ready() error {
	if b.d == nil {
		return errors.New("webgpu: backend is closed")
	}
	return b.d.err()
}

// Gradient implements worker.Backend; the parameters go up on every call
// (Steps uploads a snapshot once).
func (b *Backend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	if err := b.ready(); err != nil {
		return 0, 0, err
	}
	return b.exec.Gradient(params, x, labels, grad)
}

// Steps implements worker.Stepper: the snapshot goes up only when id is
// new, and the inner steps (SGD or AdamW, moments zeroed first) run on the
// GPU, each gradient clipped there to the inner optimizer's clip_norm.
func (b *Backend) Steps(id worker.SnapshotID, params, x []float32, labels []int32, plan worker.InnerSteps, update []float32) (float64, int, error) {
	if err := b.ready(); err != nil {
		return 0, 0, err
	}
	return b.exec.Steps(id, params, x, labels, plan, update)
}

// Forward writes the model's output (logits) for the n examples of x into
// out, without dropout: what a test compares with nn.Model.Forward.
func (b *Backend) Forward(params, x []float32, out []float32) error {
	if err := b.ready(); err != nil {
		return err
	}
	return b.exec.Forward(params, x, out)
}
