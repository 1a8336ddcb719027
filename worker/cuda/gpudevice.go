//go:build linux || windows

package cuda

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/crowdtrain/crowdtrain/worker/cuda/driver"
	"github.com/crowdtrain/crowdtrain/worker/gpu"
)

// gpuDevice is the CUDA side of worker/gpu's Device: memory by the
// driver, GEMMs by cuBLAS, the other kernels from kernels.cu. Used on the
// backend's device thread only.
type gpuDevice struct {
	b       *Backend
	arena   driver.DevicePtr   // the executor's memory (Reserve)
	stage   *driver.HostBuffer // pinned: uploads and downloads go through it
	x, labs driver.DevicePtr   // a lease's examples and labels
	xCap    [2]int             // the bytes x and labs hold
	args    []any              // a launch's arguments, pointers converted
}

var _ gpu.Device = (*gpuDevice)(nil)

func (g *gpuDevice) Name() string { return "CUDA" }

func (g *gpuDevice) Reserve(bytes, readBytes int) (gpu.Ptr, error) {
	d := g.b.d
	d.Free(g.arena)
	g.arena = 0
	p, err := d.Alloc(bytes)
	if err != nil {
		return 0, err
	}
	g.arena = p
	if err := g.ensureStage(readBytes); err != nil {
		return 0, err
	}
	return gpu.Ptr(p), nil
}

// free gives the device and pinned memory back.
func (g *gpuDevice) free() {
	d := g.b.d
	for _, p := range []*driver.DevicePtr{&g.arena, &g.x, &g.labs} {
		d.Free(*p)
		*p = 0
	}
	g.xCap = [2]int{}
	if g.stage != nil {
		d.FreeHost(g.stage)
		g.stage = nil
	}
}

// ensureStage grows the pinned staging buffer to at least bytes.
func (g *gpuDevice) ensureStage(bytes int) error {
	if g.stage != nil && g.stage.Bytes() >= bytes {
		return nil
	}
	g.b.d.FreeHost(g.stage)
	var err error
	g.stage, err = g.b.d.AllocHost(max(bytes, 4))
	return err
}

func (g *gpuDevice) Upload(p gpu.Ptr, v []float32) error {
	if err := g.ensureStage(4 * len(v)); err != nil {
		return err
	}
	copy(g.stage.Float32s(len(v)), v)
	return g.b.d.Upload(driver.DevicePtr(p), g.stage, 4*len(v))
}

func (g *gpuDevice) Download(v []float32, p gpu.Ptr) error {
	if err := g.ensureStage(4 * len(v)); err != nil {
		return err
	}
	if err := g.b.d.Download(g.stage, driver.DevicePtr(p), 4*len(v)); err != nil {
		return err
	}
	copy(v, g.stage.Float32s(len(v)))
	return nil
}

func (g *gpuDevice) Zero(p gpu.Ptr, floats int) error {
	return g.b.d.Memset32(driver.DevicePtr(p), 0, floats)
}

func (g *gpuDevice) Copy(dst, src gpu.Ptr, floats int) error {
	return g.b.d.Copy(driver.DevicePtr(dst), driver.DevicePtr(src), 4*floats)
}

// Examples uploads a whole lease on its first call, growing the buffers
// when a lease has more examples than any before, and points into it:
// one copy per lease rather than one per inner step.
func (g *gpuDevice) Examples(x []float32, labels []int32, lo, hi int, room gpu.Batch) (gpu.Batch, error) {
	in, lpe := room.InputSize, room.LabelsPerExample
	if lo == 0 {
		if err := g.uploadLease(x, labels); err != nil {
			return gpu.Batch{}, err
		}
	}
	return gpu.Batch{X: gpu.Off(gpu.Ptr(g.x), lo*in), Labels: gpu.Off(gpu.Ptr(g.labs), lo*lpe), InputSize: in, LabelsPerExample: lpe}, nil
}

func (g *gpuDevice) uploadLease(x []float32, labels []int32) error {
	d := g.b.d
	if need := [2]int{4 * len(x), 4 * len(labels)}; need[0] > g.xCap[0] || need[1] > g.xCap[1] {
		d.Free(g.x)
		d.Free(g.labs)
		g.x, g.labs, g.xCap = 0, 0, [2]int{}
		var err error
		if g.x, err = d.Alloc(max(need[0], 4)); err != nil {
			return err
		}
		if g.labs, err = d.Alloc(max(need[1], 4)); err != nil {
			d.Free(g.x)
			g.x = 0
			return err
		}
		g.xCap = need
	}
	if err := g.Upload(gpu.Ptr(g.x), x); err != nil {
		return err
	}
	if err := g.ensureStage(4 * len(labels)); err != nil {
		return err
	}
	copy(g.stage.Int32s(len(labels)), labels)
	return d.Upload(g.labs, g.stage, 4*len(labels))
}

// cudaArgs converts the executor's pointers into the driver's.
func (g *gpuDevice) cudaArgs(args []any) []any {
	g.args = append(g.args[:0], args...)
	for i, a := range g.args {
		if p, ok := a.(gpu.Ptr); ok {
			g.args[i] = driver.DevicePtr(p)
		}
	}
	return g.args
}

func (g *gpuDevice) Launch(name string, total int, args ...any) error {
	return g.b.launch(name, total, g.cudaArgs(args)...)
}

func (g *gpuDevice) LaunchRows(name string, rows int, args ...any) error {
	return g.b.launchRows(name, rows, g.cudaArgs(args)...)
}

func (g *gpuDevice) LaunchBlocks(name string, blocks int, args ...any) error {
	return g.b.launchGrid(name, blocks, 256, g.cudaArgs(args)...)
}

// Gemm is cuBLAS's plain GEMM for one product, its strided-batched GEMM
// for several (attention's per-head products, even over one example).
func (g *gpuDevice) Gemm(transA, transB bool, m, n, k int, alpha float32, a gpu.Ptr, lda, strideA int, b gpu.Ptr, ldb, strideB int, beta float32, c gpu.Ptr, ldc, strideC, batch int) error {
	A, B, C := driver.DevicePtr(a), driver.DevicePtr(b), driver.DevicePtr(c)
	if batch == 1 && strideA == 0 && strideB == 0 && strideC == 0 {
		return g.b.blas.GemmRowMajor(transA, transB, m, n, k, alpha, A, lda, B, ldb, beta, C, ldc)
	}
	return g.b.blas.GemmStridedBatchedRowMajor(transA, transB, m, n, k, alpha, A, lda, strideA, B, ldb, strideB, beta, C, ldc, strideC, batch)
}

// AddLosses adds the rows into a float64 loss and an int32 count, in one
// block in a fixed order (sum_losses).
func (g *gpuDevice) AddLosses(rowLoss, rowHit gpu.Ptr, rows int, sums gpu.LossSums) error {
	return g.b.launchGrid("sum_losses", 1, 256, driver.DevicePtr(rowLoss), driver.DevicePtr(rowHit), rows, driver.DevicePtr(sums.Loss), driver.DevicePtr(sums.Hits))
}

func (g *gpuDevice) Losses(sums gpu.LossSums) (float64, int, error) {
	var acc [12]byte
	if err := g.b.d.DownloadBytes(acc[:8], driver.DevicePtr(sums.Loss)); err != nil {
		return 0, 0, err
	}
	if err := g.b.d.DownloadBytes(acc[8:], driver.DevicePtr(sums.Hits)); err != nil {
		return 0, 0, err
	}
	loss := math.Float64frombits(binary.LittleEndian.Uint64(acc[0:]))
	correct := int(int32(binary.LittleEndian.Uint32(acc[8:])))
	if math.IsNaN(loss) || math.IsInf(loss, 0) {
		return 0, 0, fmt.Errorf("cuda: the loss is %v: training diverged (lower the learning rate)", loss)
	}
	return loss, correct, nil
}
