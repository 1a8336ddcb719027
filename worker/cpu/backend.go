package cpu

import (
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"

	"github.com/crowdtrain/crowdtrain/nn"
)

// autoKernel is set while the kernel is chosen by measurement (--kernel
// auto): Backends made by New then time the kernels on their model
// (autokernel.go).
var autoKernel atomic.Bool

// SetAutoKernel makes Backends made by New afterwards choose the GEMM
// kernel by timing their model on each (on), or run the one in use (off).
// native.UseKernel (worker/cpu/native) sets it for --kernel.
func SetAutoKernel(on bool) { autoKernel.Store(on) }

// Backend computes gradients on the CPU. With more than one thread, a batch
// is split into contiguous parts, one goroutine per part, and the parts'
// gradients are combined weighted by their size — the same mean-loss
// gradient as one thread computes, up to float32 rounding.
//
// A Backend is used by one worker loop at a time (Prepare, then Gradient
// from one goroutine).
type Backend struct {
	threads int
	model   *nn.Model
	parts   []part
	seed    uint64 // the next Gradient call's dropout seed
	// tune is set under --kernel auto (see autokernel.go).
	tune *kernelTuner
	// budget bounds the memory a job may take (SetMemoryBudget; 0: none),
	// micro is the most examples one Gradient call of a part computes at
	// once (membudget.go), and used what Prepare planned for.
	budget, used int64
	micro        int
	logf         func(string, ...any)
}

type part struct {
	ws   *nn.Workspace
	grad []float32
	acc  []float32 // a micro-batch's gradient, when a part computes in several
	loss float64
	hits int
}

// New returns a CPU backend with the given number of threads; 0 means one
// per CPU (one in a browser, where Go has no threads).
func New(threads int) (*Backend, error) {
	if threads < 0 {
		return nil, fmt.Errorf("threads must be >= 0 (0 = one per CPU), got %d", threads)
	}
	if threads == 0 {
		threads = runtime.NumCPU()
	}
	b := &Backend{threads: threads}
	if autoKernel.Load() {
		b.tune = &kernelTuner{}
	}
	return b, nil
}

// SetLog gives the backend somewhere to log what it decides (under
// --kernel auto: the kernel it measured fastest, and the figures).
func (b *Backend) SetLog(logf func(string, ...any)) {
	b.logf = logf
	if b.tune != nil {
		b.tune.logf = logf
	}
}

// Name is the platform's prefix and the GEMM kernel in use: "cpu-avx512"
// natively, "wasm-go" in a browser (name_wasm.go).
func (b *Backend) Name() string { return namePrefix + nn.KernelName() }
func (b *Backend) Threads() int { return b.threads }

// Tunes reports whether the backend chooses its kernel by measurement.
func (b *Backend) Tunes() bool { return b.tune != nil }

// Prepare allocates per-thread workspaces for batches of up to maxBatch;
// the dropout seed starts again at 0.
func (b *Backend) Prepare(model *nn.Model, maxBatch int) error {
	if maxBatch < 1 {
		return fmt.Errorf("batch size must be positive, got %d", maxBatch)
	}
	n := min(b.threads, maxBatch)
	b.model, b.parts = nil, nil // the old job's buffers go before the plan counts on their memory
	plan, err := planMemory(model, n, maxBatch, b.budget)
	if err != nil {
		return err
	}
	if b.logf != nil && (plan.parts < n || plan.micro < perPart(maxBatch, n)) {
		b.logf("backend cpu: %s", plan)
	}
	n, b.micro, b.used = plan.parts, plan.micro, plan.bytes
	b.model = model
	b.seed = 0 // as a new nn.Workspace's
	b.parts = make([]part, n)
	for i := range b.parts {
		b.parts[i].ws = model.NewWorkspace(b.micro)
		if i > 0 { // part 0 writes straight into the caller's grad
			b.parts[i].grad = make([]float32, model.NumParams)
		}
		if b.micro < perPart(maxBatch, n) {
			b.parts[i].acc = make([]float32, model.NumParams)
		}
	}
	if b.tune != nil && b.tune.model != model {
		return b.tune.probe(b, model, maxBatch)
	}
	return nil
}

// SetDropoutSeed implements worker.Seeder: the next Gradient call draws
// its dropout masks with seed, the one after with seed+1, and so on.
func (b *Backend) SetDropoutSeed(seed uint64) { b.seed = seed }

// Gradient implements worker.Backend. Every part draws its dropout mask
// with the call's seed and numbers its values from its first example's
// place in the batch, so the mask is the one a single thread draws.
func (b *Backend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	if b.tune != nil && b.model != nil {
		return b.tune.gradient(b, params, x, labels, grad)
	}
	return b.gradient(params, x, labels, grad)
}

func (b *Backend) gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	if b.model == nil {
		return 0, 0, fmt.Errorf("worker/cpu: Gradient before Prepare")
	}
	seed := b.seed
	b.seed++
	lpe := b.model.LabelsPerExample
	n := len(labels) / lpe
	parts := min(len(b.parts), n)
	if parts <= 1 {
		loss, hits := b.partGradient(&b.parts[0], params, x, labels, grad, 0, n, seed)
		return loss, hits, nil
	}
	per := (n + parts - 1) / parts
	var wg sync.WaitGroup
	for i := 0; i < parts; i++ {
		lo, hi := i*per, min((i+1)*per, n)
		if lo >= hi {
			parts = i
			break
		}
		p := &b.parts[i]
		g := p.grad
		if i == 0 {
			g = grad
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.loss, p.hits = b.partGradient(p, params, x, labels, g, lo, hi, seed)
		}()
	}
	wg.Wait()
	// Each part's gradient is the mean over its own examples; weight by
	// size to get the mean over the whole batch.
	w0 := float32(min(per, n)) / float32(n)
	for k := range grad {
		grad[k] *= w0
	}
	loss, hits := b.parts[0].loss, b.parts[0].hits
	for i := 1; i < parts; i++ {
		lo, hi := i*per, min((i+1)*per, n)
		w := float32(hi-lo) / float32(n)
		for k, v := range b.parts[i].grad {
			grad[k] += w * v
		}
		loss += b.parts[i].loss
		hits += b.parts[i].hits
	}
	return loss, hits, nil
}
