//go:build linux || windows

package cuda

import (
	"errors"
	"fmt"
	"log"
	"os"
	"path/filepath"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cuda/driver"
	"github.com/crowdtrain/crowdtrain/worker/gpu"
)

// Backend computes on one NVIDIA GPU. It implements worker.Backend and
// worker.Stepper. Methods must not be called concurrently (the worker loop
// calls them from one goroutine); each runs its CUDA calls on the
// backend's own OS thread.
type Backend struct {
	th   *thread
	d    *driver.Driver
	nv   *driver.NVRTC
	blas *driver.BLAS
	ctx  *driver.Context
	mod  driver.Module
	fn   map[string]driver.Function

	info          driver.DeviceInfo
	driverVersion int
	dev           *gpuDevice    // worker/gpu's Device on this GPU
	exec          *gpu.Executor // the layers and inner steps, on dev
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
	if b.d, err = driver.LoadDriver(o.LibDirs); err != nil {
		return err
	}
	if err := b.d.Init(); err != nil {
		var ce *driver.Error
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
	if b.nv, err = driver.LoadNVRTC(o.LibDirs); err != nil {
		return err
	}
	if b.blas, err = driver.LoadBLAS(o.LibDirs); err != nil {
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
	b.fn = map[string]driver.Function{}
	for _, name := range kernelNames {
		if b.fn[name], err = b.d.Function(b.mod, name); err != nil {
			return err
		}
	}
	b.dev = &gpuDevice{b: b}
	b.exec = gpu.New(b.dev, "cuda")
	return nil
}

// release frees whatever open and Prepare made; on the device thread.
func (b *Backend) release() {
	if b.dev != nil {
		b.exec.Release()
		b.dev.free()
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
func (b *Backend) Device() driver.DeviceInfo { return b.info }

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

// Prepare lays model out in device memory for batches of up to maxBatch
// examples; the dropout seed starts again at 0.
func (b *Backend) Prepare(model *nn.Model, maxBatch int) error {
	if maxBatch < 1 {
		return fmt.Errorf("batch size must be positive, got %d", maxBatch)
	}
	if b.th == nil {
		return errors.New("cuda: backend is closed")
	}
	return b.th.do(func() error {
		if err := b.exec.Prepare(model, maxBatch); err != nil {
			free, total, _ := b.d.MemInfo()
			return fmt.Errorf("preparing the GPU for %d-parameter model batches of %d (%d of %d MiB free): %w",
				model.NumParams, maxBatch, free>>20, total>>20, err)
		}
		return nil
	})
}

// SetDropoutSeed implements worker.Seeder: the next Gradient call draws
// its dropout masks with seed, the one after with seed+1, and so on.
// Steps takes its seed from its plan instead.
func (b *Backend) SetDropoutSeed(seed uint64) { b.exec.SetDropoutSeed(seed) }

// Gradient implements worker.Backend: the parameters are uploaded on every
// call. Steps uploads a snapshot once.
func (b *Backend) Gradient(params, x []float32, labels []int32, grad []float32) (loss float64, correct int, err error) {
	if b.th == nil {
		return 0, 0, errors.New("cuda: backend is closed")
	}
	err = b.th.do(func() (err error) {
		loss, correct, err = b.exec.Gradient(params, x, labels, grad)
		return err
	})
	return loss, correct, err
}

// Steps implements worker.Stepper: the snapshot is uploaded only when id
// is new, and the inner steps (SGD or AdamW, its moments zeroed first) run
// on the device, each gradient clipped there to the inner optimizer's
// clip_norm first.
func (b *Backend) Steps(id worker.SnapshotID, params, x []float32, labels []int32, plan worker.InnerSteps, update []float32) (loss float64, correct int, err error) {
	if b.th == nil {
		return 0, 0, errors.New("cuda: backend is closed")
	}
	err = b.th.do(func() (err error) {
		loss, correct, err = b.exec.Steps(id, params, x, labels, plan, update)
		return err
	})
	return loss, correct, err
}

// Forward writes the model's output (logits) for the examples of x into
// out, without dropout.
func (b *Backend) Forward(params, x, out []float32) error {
	if b.th == nil {
		return errors.New("cuda: backend is closed")
	}
	return b.th.do(func() error { return b.exec.Forward(params, x, out) })
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
	if err := b.d.Launch(b.fn[name], driver.Dim3{X: uint32(grid), Y: 1, Z: 1}, driver.Dim3{X: uint32(block), Y: 1, Z: 1}, 0, args...); err != nil {
		return fmt.Errorf("kernel %s: %w", name, err)
	}
	return nil
}
