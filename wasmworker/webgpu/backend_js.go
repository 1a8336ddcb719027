//go:build js && wasm

package webgpu

import (
	"errors"
	"fmt"
	"math"
	"syscall/js"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// Name is the backend's name, as the page and GET /api/v1/workers show it.
const Name = "webgpu"

// Backend computes on the browser's GPU through WebGPU. It implements
// worker.Backend, worker.Stepper and worker.Seeder. Its methods must be
// called from one goroutine that is not a JS callback.
type Backend struct {
	d       *device
	adapter string // the adapter's description, for logs
	net     *net
	snap    worker.SnapshotID // the snapshot nt.base holds, 0 none
	seed    uint64            // the next Gradient call's dropout seed

	rowLoss []float32 // per-row sums read back
	rowHit  []int32
}

var (
	_ worker.Backend = (*Backend)(nil)
	_ worker.Stepper = (*Backend)(nil)
	_ worker.Seeder  = (*Backend)(nil)
)

// Open compiles the kernels on gpu, a GPUDevice the page requested, and
// describes the adapter it came from in adapter (for logs).
func Open(gpu js.Value, adapter string) (*Backend, error) {
	d, err := openDevice(gpu)
	if err != nil {
		return nil, err
	}
	if err := selfTest(d); err != nil {
		d.close()
		return nil, err
	}
	return &Backend{d: d, adapter: adapter}, nil
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
	pa, pb, pc := ptr(guardFloats), ptr(guardFloats+m*k), ptr(guardFloats+m*k+k*n)
	if err := d.setArena(int(pc)+m*n, m*n); err != nil {
		return err
	}
	defer d.release()
	if err := d.upload(pa, a); err != nil {
		return err
	}
	if err := d.upload(pb, bm); err != nil {
		return err
	}
	if err := d.gemm(false, false, m, n, k, 1, pa, k, 0, pb, n, 0, 0, pc, n, 0, 1); err != nil {
		return err
	}
	c := make([]float32, m*n)
	if err := d.download(c, pc); err != nil {
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
	nt, err := newNet(model, maxBatch)
	if err != nil {
		return err
	}
	if err := b.d.setArena(nt.floats, nt.readFloats()); err != nil {
		return fmt.Errorf("preparing the GPU for %d-parameter model batches of %d: %w", model.NumParams, maxBatch, err)
	}
	b.net, b.snap, b.seed = nt, 0, 0
	rows := maxBatch * model.LabelsPerExample
	b.rowLoss, b.rowHit = make([]float32, rows), make([]int32, rows)
	return nil
}

// SetDropoutSeed implements worker.Seeder.
func (b *Backend) SetDropoutSeed(seed uint64) { b.seed = seed }

// ClipsNorm reports that Steps clips each step's gradient on the GPU.
func (b *Backend) ClipsNorm() bool { return true }

func (b *Backend) ready(params, x []float32, labels []int32) error {
	if b.d == nil {
		return errors.New("webgpu: backend is closed")
	}
	if b.net == nil {
		return errors.New("webgpu: Gradient or Steps before Prepare")
	}
	if err := b.d.err(); err != nil {
		return err
	}
	m := b.net.model
	if len(params) != m.NumParams {
		return fmt.Errorf("webgpu: %d parameters, the model has %d", len(params), m.NumParams)
	}
	if len(labels)%m.LabelsPerExample != 0 {
		return fmt.Errorf("webgpu: %d labels is not a whole number of examples of %d labels", len(labels), m.LabelsPerExample)
	}
	if err := m.CheckLabels(labels); err != nil {
		return err
	}
	// Token ids index the embedding's table on the GPU: check them here.
	return m.CheckInputs(x)
}

// uploadBatch puts examples [lo, hi) of x and their labels into the
// net's batch.
func (b *Backend) uploadBatch(x []float32, labels []int32, lo, hi int) error {
	m := b.net.model
	if err := b.d.upload(b.net.x, x[lo*m.InputSize:hi*m.InputSize]); err != nil {
		return err
	}
	lpe := m.LabelsPerExample
	return b.d.uploadInts(b.net.labels, labels[lo*lpe:hi*lpe])
}

// sums reads the per-row loss and hit sums back and adds them up in row
// order, in float64.
func (b *Backend) sums() (float64, int, error) {
	if err := b.d.download(b.rowLoss, b.net.accLoss); err != nil {
		return 0, 0, err
	}
	if err := b.d.downloadInts(b.rowHit, b.net.accHit); err != nil {
		return 0, 0, err
	}
	var loss float64
	var hits int
	for i, l := range b.rowLoss {
		loss += float64(l)
		hits += int(b.rowHit[i])
	}
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, 0, fmt.Errorf("%w: the loss came back as %v", ErrDevice, loss)
	}
	return loss, hits, nil
}

// Gradient implements worker.Backend; the parameters go up on every call
// (Steps uploads a snapshot once).
func (b *Backend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	if err := b.ready(params, x, labels); err != nil {
		return 0, 0, err
	}
	nt := b.net
	n := len(labels) / nt.model.LabelsPerExample
	if n < 1 || n > nt.maxBatch || len(x) != n*nt.model.InputSize || len(grad) != len(params) {
		return 0, 0, fmt.Errorf("webgpu: Gradient of %d examples (%d values, grad %d), want 1..%d examples of %d values",
			n, len(x), len(grad), nt.maxBatch, nt.model.InputSize)
	}
	nt.seed = b.seed
	b.seed++
	b.snap = 0 // base is not what w holds from here on
	if err := b.d.upload(nt.w, params); err != nil {
		return 0, 0, err
	}
	if err := b.uploadBatch(x, labels, 0, n); err != nil {
		return 0, 0, err
	}
	if err := nt.clearSums(b.d); err != nil {
		return 0, 0, err
	}
	if err := nt.gradient(b.d, nt.w, n, nt.grad); err != nil {
		return 0, 0, err
	}
	if err := b.d.download(grad, nt.grad); err != nil {
		return 0, 0, err
	}
	return b.sums()
}

// Steps implements worker.Stepper: the snapshot goes up only when id is
// new, and the inner steps (SGD or AdamW, moments zeroed first) run on the
// GPU, each gradient clipped there to the inner optimizer's clip_norm.
func (b *Backend) Steps(id worker.SnapshotID, params, x []float32, labels []int32, plan worker.InnerSteps, update []float32) (float64, int, error) {
	if err := b.ready(params, x, labels); err != nil {
		return 0, 0, err
	}
	nt := b.net
	count := len(labels) / nt.model.LabelsPerExample
	if err := plan.Check(); err != nil {
		return 0, 0, fmt.Errorf("webgpu: %w", err)
	}
	switch {
	case plan.BatchSize > nt.maxBatch:
		return 0, 0, fmt.Errorf("webgpu: batch of %d, prepared for 1..%d", plan.BatchSize, nt.maxBatch)
	case count < 1 || len(x) != count*nt.model.InputSize || len(update) != len(params):
		return 0, 0, fmt.Errorf("webgpu: Steps with %d examples of %d values (want %d), update %d",
			count, len(x)/max(nt.model.InputSize, 1), nt.model.InputSize, len(update))
	}
	o := plan.Inner
	adamw := o.Type == protocol.InnerAdamW
	n := len(params)
	d := b.d
	if id == 0 || id != b.snap {
		b.snap = 0
		if err := d.upload(nt.base, params); err != nil {
			return 0, 0, err
		}
		b.snap = id
	}
	nt.seed = plan.Seed
	if err := d.launch("copy", n, nt.w, nt.base, n); err != nil {
		return 0, 0, err
	}
	if err := nt.clearSums(d); err != nil {
		return 0, 0, err
	}
	if adamw {
		for _, p := range []ptr{nt.moment1, nt.moment2} {
			if err := d.launch("fill", n, p, n, float32(0)); err != nil {
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
		if err := b.uploadBatch(x, labels, lo, hi); err != nil {
			return 0, 0, err
		}
		if err := nt.gradient(d, nt.w, hi-lo, nt.grad); err != nil {
			return 0, 0, err
		}
		if err := nt.clip(d, nt.grad, o.ClipNorm); err != nil {
			return 0, 0, err
		}
		if plan.GradientOnly(count) {
			break // the only step: its gradient is the update
		}
		var err error
		if adamw {
			c1, c2 := nn.AdamWScales(step+1, o.Beta1, o.Beta2)
			err = d.launch("adamw_step", n, nt.w, nt.grad, nt.moment1, nt.moment2, o.LR, o.WeightDecay, o.Beta1, o.Beta2, o.Epsilon, c1, c2, n)
		} else {
			err = d.launch("sgd_step", n, nt.w, nt.grad, o.LR, n)
		}
		if err != nil {
			return 0, 0, err
		}
	}
	if !plan.GradientOnly(count) {
		if err := d.launch("pseudo_gradient", n, nt.base, nt.w, nt.grad, plan.UpdateScale(), n); err != nil {
			return 0, 0, err
		}
	}
	if err := d.download(update, nt.grad); err != nil {
		return 0, 0, err
	}
	return b.sums()
}

// Forward writes the model's output (logits) for the n examples of x into
// out, without dropout: what a test compares with nn.Model.Forward.
func (b *Backend) Forward(params, x []float32, out []float32) error {
	if err := b.ready(params, x, nil); err != nil {
		return err
	}
	nt := b.net
	m := nt.model
	n := len(x) / m.InputSize
	top := nt.top
	L := len(top.layers)
	if n < 1 || n > nt.maxBatch || len(x) != n*m.InputSize || len(out) != n*m.NumClasses*m.LabelsPerExample {
		return fmt.Errorf("webgpu: Forward of %d values into %d, want 1..%d examples of %d values and %d outputs each",
			len(x), len(out), nt.maxBatch, m.InputSize, m.NumClasses*m.LabelsPerExample)
	}
	b.snap = 0
	if err := b.d.upload(nt.w, params); err != nil {
		return err
	}
	if err := b.d.upload(nt.x, x); err != nil {
		return err
	}
	top.acts[0] = nt.x
	if err := nt.forward(b.d, top, nt.w, n, false); err != nil {
		return err
	}
	return b.d.download(out, top.acts[L])
}
