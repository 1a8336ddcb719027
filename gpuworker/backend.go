//go:build linux || windows

package gpuworker

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log"
	"math"
	"os"
	"path/filepath"

	"github.com/crowdtrain/crowdtrain/gpuworker/cuda"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/worker"
)

// Backend computes on one NVIDIA GPU. It implements worker.Backend and
// worker.Stepper. Methods must not be called concurrently (the worker loop
// calls them from one goroutine); each runs its CUDA calls on the
// backend's own OS thread.
type Backend struct {
	th   *thread
	d    *cuda.Driver
	nv   *cuda.NVRTC
	blas *cuda.BLAS
	ctx  *cuda.Context
	mod  cuda.Module
	fn   map[string]cuda.Function

	info          cuda.DeviceInfo
	driverVersion int
	net           *net
	seed          uint64 // the next Gradient call's dropout seed
}

var (
	_ worker.Backend = (*Backend)(nil)
	_ worker.Stepper = (*Backend)(nil)
	_ worker.Seeder  = (*Backend)(nil)
)

// minComputeCapability is the oldest GPU generation supported (Maxwell);
// NVRTC may require a newer one, which Open reports too.
const minComputeCapability = 50

// Open loads the CUDA libraries, opens device and compiles the kernels.
// Its error names what is missing: the driver, a GPU, NVRTC or cuBLAS.
func Open(device int) (*Backend, error) { return OpenWith(Options{Device: device}) }

// OpenWith is Open with options.
func OpenWith(o Options) (*Backend, error) {
	if o.Device < 0 {
		return nil, fmt.Errorf("device must be >= 0, got %d", o.Device)
	}
	if o.Logf == nil {
		o.Logf = log.Printf
	}
	if o.CacheDir == "" {
		if dir, err := os.UserCacheDir(); err == nil {
			o.CacheDir = filepath.Join(dir, "crowdtrain")
		}
	}
	if o.CacheDir == "-" {
		o.CacheDir = ""
	}
	b := &Backend{th: startThread()}
	if err := b.th.do(func() error { return b.open(o) }); err != nil {
		b.th.do(func() error { b.release(); return nil })
		b.th.stop()
		return nil, err
	}
	return b, nil
}

func (b *Backend) open(o Options) (err error) {
	if b.d, err = cuda.LoadDriver(o.LibDirs); err != nil {
		return err
	}
	if err := b.d.Init(); err != nil {
		var ce *cuda.Error
		if errors.As(err, &ce) && ce.Code == 100 { // CUDA_ERROR_NO_DEVICE
			return fmt.Errorf("%w: the NVIDIA driver (%s) sees no GPU (%v)", ErrNoDevice, b.d.Path, err)
		}
		return fmt.Errorf("the NVIDIA driver (%s) failed to start: %w", b.d.Path, err)
	}
	if b.driverVersion, err = b.d.Version(); err != nil {
		return err
	}
	n, err := b.d.DeviceCount()
	if err != nil {
		return err
	}
	if n == 0 {
		return fmt.Errorf("%w: the NVIDIA driver (%s) sees no GPU", ErrNoDevice, b.d.Path)
	}
	if o.Device >= n {
		return fmt.Errorf("%w: device %d does not exist; the driver sees %d GPU(s), numbered from 0", ErrNoDevice, o.Device, n)
	}
	if b.info, err = b.d.Device(o.Device); err != nil {
		return err
	}
	if cc := b.info.Major*10 + b.info.Minor; cc < minComputeCapability {
		return fmt.Errorf("%w: %s has compute capability %d.%d; the GPU worker needs %d.%d or newer",
			ErrNoDevice, b.info.Name, b.info.Major, b.info.Minor, minComputeCapability/10, minComputeCapability%10)
	}
	if b.ctx, err = b.d.RetainPrimaryContext(o.Device); err != nil {
		return err
	}
	if b.nv, err = cuda.LoadNVRTC(o.LibDirs); err != nil {
		return err
	}
	if b.blas, err = cuda.LoadBLAS(o.LibDirs); err != nil {
		return err
	}
	if err := b.blas.Init(); err != nil {
		return fmt.Errorf("starting cuBLAS (%s): %w", b.blas.Path, err)
	}
	dir := o.CacheDir
	if dir != "" {
		dir = filepath.Join(dir, "kernels")
	}
	if b.mod, err = compileKernels(b.d, b.nv, b.info, b.driverVersion, dir, o.Logf); err != nil {
		return err
	}
	b.fn = map[string]cuda.Function{}
	for _, name := range kernelNames {
		if b.fn[name], err = b.d.Function(b.mod, name); err != nil {
			return err
		}
	}
	return nil
}

// release frees whatever open and Prepare made; on the device thread.
func (b *Backend) release() {
	if b.net != nil {
		b.net.free(b.d)
		b.net = nil
	}
	if b.mod != 0 {
		b.d.UnloadModule(b.mod)
		b.mod = 0
	}
	if b.blas != nil {
		b.blas.Close()
	}
	if b.ctx != nil {
		b.ctx.Release()
		b.ctx = nil
	}
}

// Close frees the device memory and releases the GPU. The backend cannot
// be used afterwards.
func (b *Backend) Close() error {
	if b.th == nil {
		return nil
	}
	b.th.do(func() error { b.release(); return nil })
	b.th.stop()
	b.th = nil
	return nil
}

// Name is "cuda-" and the device's name, e.g. "cuda-NVIDIA H200".
func (b *Backend) Name() string { return "cuda-" + b.info.Name }

// Threads is 1: one GPU, driven from one thread.
func (b *Backend) Threads() int { return 1 }

// Device describes the GPU.
func (b *Backend) Device() cuda.DeviceInfo { return b.info }

// MemoryMB is the device's memory, what a job may use on it (hello's
// caps).
func (b *Backend) MemoryMB() int { return int(b.info.TotalMemoryBytes >> 20) }

// Describe names the device, the driver and the library files in use, for
// a log line.
func (b *Backend) Describe() string {
	return fmt.Sprintf("%s (compute capability %d.%d, %d MiB), driver CUDA %d.%d (%s), NVRTC %d.%d (%s), cuBLAS %d (%s)",
		b.info.Name, b.info.Major, b.info.Minor, b.info.TotalMemoryBytes>>20,
		b.driverVersion/1000, b.driverVersion%1000/10, b.d.Path, b.nv.Major, b.nv.Minor, b.nv.Path, b.blas.Version, b.blas.Path)
}

// Prepare allocates the device buffers for model with batches of up to
// maxBatch examples; the dropout seed starts again at 0.
func (b *Backend) Prepare(model *nn.Model, maxBatch int) error {
	if maxBatch < 1 {
		return fmt.Errorf("batch size must be positive, got %d", maxBatch)
	}
	if b.th == nil {
		return errors.New("gpuworker: backend is closed")
	}
	return b.th.do(func() error {
		if b.net != nil {
			b.net.free(b.d)
			b.net = nil
		}
		n, err := newNet(b, model, maxBatch)
		if err != nil {
			free, total, _ := b.d.MemInfo()
			return fmt.Errorf("preparing the GPU for %d-parameter model batches of %d (%d of %d MiB free): %w",
				model.NumParams, maxBatch, free>>20, total>>20, err)
		}
		b.net = n
		b.seed = 0 // as a new nn.Workspace's
		return nil
	})
}

func (b *Backend) ready(params, x []float32, labels []int32) error {
	if b.th == nil {
		return errors.New("gpuworker: backend is closed")
	}
	if b.net == nil {
		return errors.New("gpuworker: Gradient or Steps before Prepare")
	}
	m := b.net.model
	if len(params) != m.NumParams {
		return fmt.Errorf("gpuworker: %d parameters, the model has %d", len(params), m.NumParams)
	}
	if len(labels)%m.LabelsPerExample != 0 {
		return fmt.Errorf("gpuworker: %d labels is not a whole number of examples of %d labels", len(labels), m.LabelsPerExample)
	}
	if err := m.CheckLabels(labels); err != nil {
		return err
	}
	// Token ids index the embedding's table on the device: check them here.
	return m.CheckInputs(x)
}

// SetDropoutSeed implements worker.Seeder: the next Gradient call draws
// its dropout masks with seed, the one after with seed+1, and so on.
// Steps takes its seed from its plan instead.
func (b *Backend) SetDropoutSeed(seed uint64) { b.seed = seed }

// Gradient implements worker.Backend: the parameters are uploaded on every
// call. Steps uploads a snapshot once.
func (b *Backend) Gradient(params, x []float32, labels []int32, grad []float32) (float64, int, error) {
	if err := b.ready(params, x, labels); err != nil {
		return 0, 0, err
	}
	n := len(labels) / b.net.model.LabelsPerExample
	if n < 1 || n > b.net.maxBatch || len(x) != n*b.net.model.InputSize || len(grad) != len(params) {
		return 0, 0, fmt.Errorf("gpuworker: Gradient of %d examples (%d values, grad %d), want 1..%d examples of %d values",
			n, len(x), len(grad), b.net.maxBatch, b.net.model.InputSize)
	}
	var loss float64
	var correct int
	err := b.th.do(func() error {
		nt := b.net
		nt.seed = b.seed
		b.seed++
		nt.snap = 0 // base is not what w holds from here on
		if err := nt.upload(b.d, nt.w, params); err != nil {
			return err
		}
		if err := nt.uploadBatch(b.d, x, labels); err != nil {
			return err
		}
		if err := b.d.Memset32(nt.acc, 0, 4); err != nil {
			return err
		}
		if err := nt.gradient(b, nt.w, nt.x, nt.labels, n, nt.grad); err != nil {
			return err
		}
		if err := nt.download(b.d, grad, nt.grad); err != nil {
			return err
		}
		var err error
		loss, correct, err = nt.results(b.d)
		return err
	})
	return loss, correct, err
}

// Steps implements worker.Stepper: the snapshot is uploaded only when id
// is new, and the inner steps (SGD or AdamW, its moments zeroed first) run
// on the device, each gradient clipped there to the inner optimizer's
// clip_norm first.
func (b *Backend) Steps(id worker.SnapshotID, params, x []float32, labels []int32, plan worker.InnerSteps, update []float32) (float64, int, error) {
	if err := b.ready(params, x, labels); err != nil {
		return 0, 0, err
	}
	lpe := b.net.model.LabelsPerExample
	count := len(labels) / lpe
	in := b.net.model.InputSize
	if err := plan.Check(); err != nil {
		return 0, 0, fmt.Errorf("gpuworker: %w", err)
	}
	switch {
	case plan.BatchSize > b.net.maxBatch:
		return 0, 0, fmt.Errorf("gpuworker: batch of %d, prepared for 1..%d", plan.BatchSize, b.net.maxBatch)
	case count < 1 || len(x) != count*in || len(update) != len(params):
		return 0, 0, fmt.Errorf("gpuworker: Steps with %d examples of %d values (want %d), update %d", count, len(x)/max(in, 1), in, len(update))
	}
	o := plan.Inner
	adamw := o.Type == protocol.InnerAdamW
	n := len(params)
	var loss float64
	var correct int
	err := b.th.do(func() error {
		nt := b.net
		if id == 0 || id != nt.snap {
			nt.snap = 0
			if err := nt.upload(b.d, nt.base, params); err != nil {
				return err
			}
			nt.snap = id
		}
		nt.seed = plan.Seed
		if err := b.d.Copy(nt.w, nt.base, 4*n); err != nil {
			return err
		}
		if err := nt.uploadBatch(b.d, x, labels); err != nil {
			return err
		}
		if err := b.d.Memset32(nt.acc, 0, 4); err != nil {
			return err
		}
		if adamw {
			for _, p := range []cuda.DevicePtr{nt.moment1, nt.moment2} {
				if err := b.d.Memset32(p, 0, n); err != nil {
					return err
				}
			}
		}
		for step := 0; step < plan.Steps; step++ {
			lo := step * plan.BatchSize
			if lo >= count {
				break
			}
			hi := min(lo+plan.BatchSize, count)
			if err := nt.gradient(b, nt.w, off(nt.x, lo*in), off(nt.labels, lo*lpe), hi-lo, nt.grad); err != nil {
				return err
			}
			if err := nt.clip(b, nt.grad, o.ClipNorm); err != nil {
				return err
			}
			if plan.GradientOnly(count) {
				break // the only step: its gradient is the update
			}
			var err error
			if adamw {
				c1, c2 := nn.AdamWScales(step+1, o.Beta1, o.Beta2)
				err = b.launch("adamw_step", n, nt.w, nt.grad, nt.moment1, nt.moment2, o.LR, o.WeightDecay, o.Beta1, o.Beta2, o.Epsilon, c1, c2, n)
			} else {
				err = b.launch("sgd_step", n, nt.w, nt.grad, o.LR, n)
			}
			if err != nil {
				return err
			}
		}
		if !plan.GradientOnly(count) {
			if err := b.launch("pseudo_gradient", n, nt.base, nt.w, nt.grad, plan.UpdateScale(), n); err != nil {
				return err
			}
		}
		if err := nt.download(b.d, update, nt.grad); err != nil {
			return err
		}
		var err error
		loss, correct, err = nt.results(b.d)
		return err
	})
	return loss, correct, err
}

// ClipsNorm reports that Steps clips each step's gradient to the inner
// optimizer's clip_norm on the device, so the worker hands it leases with
// one.
func (b *Backend) ClipsNorm() bool { return true }

// launch runs a grid-stride kernel over total elements.
func (b *Backend) launch(name string, total int, args ...any) error {
	const block = 256
	grid := min((total+block-1)/block, max(1, b.info.Multiprocessors)*16)
	return b.launchGrid(name, max(grid, 1), block, args...)
}

// rowBlock is the block size of the kernels that give each row (or
// column) a block and reduce over it with block_sum: a power of two of at
// most 256.
const rowBlock = 128

// launchRows runs a kernel that takes one block per row (BLOCK_ROWS) over
// rows rows; a block takes several when there are more than the grid.
func (b *Backend) launchRows(name string, rows int, args ...any) error {
	return b.launchGrid(name, max(1, min(rows, 1<<16)), rowBlock, args...)
}

func (b *Backend) launchGrid(name string, grid, block int, args ...any) error {
	if err := b.d.Launch(b.fn[name], cuda.Dim3{X: uint32(grid), Y: 1, Z: 1}, cuda.Dim3{X: uint32(block), Y: 1, Z: 1}, 0, args...); err != nil {
		return fmt.Errorf("kernel %s: %w", name, err)
	}
	return nil
}

// results reads the loss and correct-count accumulators.
func (nt *net) results(d *cuda.Driver) (float64, int, error) {
	var acc [16]byte
	if err := d.DownloadBytes(acc[:], nt.acc); err != nil {
		return 0, 0, err
	}
	loss := math.Float64frombits(binary.LittleEndian.Uint64(acc[0:]))
	correct := int(int32(binary.LittleEndian.Uint32(acc[8:])))
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, 0, fmt.Errorf("gpuworker: the loss is %v: training diverged (lower the learning rate)", loss)
	}
	return loss, correct, nil
}
