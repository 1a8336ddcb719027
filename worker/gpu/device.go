package gpu

// Ptr is a place in device memory, in bytes. 0 is never handed out and
// means "no buffer" (an input gradient nobody reads, an embedding without
// a position table), as a null pointer does in CUDA.
type Ptr uint64

// Off is p moved on by floats 32-bit values.
func Off(p Ptr, floats int) Ptr { return p + Ptr(4*floats) }

// Device is what a GPU backend does for the executor. Its methods are
// called from one goroutine; work is queued in call order, and Download
// and Losses wait for what was queued before them.
//
// Kernel arguments are Ptr, int (a C int, i32), uint32, uint64 and
// float32, in the order of the kernel's parameters; kernels have the same
// names and arguments in every backend.
type Device interface {
	// Name names the backend in messages: "CUDA", "WebGPU".
	Name() string

	// Reserve replaces the device memory the executor had with one block
	// of bytes and returns where it starts; readBytes is the most one
	// Download reads. The executor keeps the block's first 256 bytes
	// unused, so that no buffer is at 0.
	Reserve(bytes, readBytes int) (Ptr, error)
	// Upload copies v to p, after the work queued before it.
	Upload(p Ptr, v []float32) error
	// Download waits for the queued work and copies len(v) floats at p
	// into v.
	Download(v []float32, p Ptr) error
	// Zero sets floats values at p to 0 (the bits of int32 0 too).
	Zero(p Ptr, floats int) error
	// Copy copies floats values from src to dst.
	Copy(dst, src Ptr, floats int) error
	// Examples makes examples [lo, hi) of a lease, x and their labels,
	// readable by the kernels and says where they are. lo == 0 starts a
	// lease (x and labels are new). room is the executor's place for one
	// batch: a device uploads each batch into it, or uploads the whole
	// lease elsewhere on its first call and points into that.
	Examples(x []float32, labels []int32, lo, hi int, room Batch) (Batch, error)

	// Launch runs an elementwise kernel (a grid-stride loop) over total
	// elements.
	Launch(name string, total int, args ...any) error
	// LaunchRows runs a kernel that gives each of rows rows a block (or
	// workgroup) of 128 threads and reduces over it.
	LaunchRows(name string, rows int, args ...any) error
	// LaunchBlocks runs a kernel on exactly blocks blocks of 256 threads:
	// the kernels whose order of additions depends on their grid.
	LaunchBlocks(name string, blocks int, args ...any) error
	// Gemm is C = alpha·op(A)·op(B) + beta·C on row-major matrices, for
	// batch matrices strideA, strideB and strideC floats apart. Batch 1
	// with all strides 0 is a single product (cuBLAS's plain GEMM).
	Gemm(transA, transB bool, m, n, k int, alpha float32, a Ptr, lda, strideA int, b Ptr, ldb, strideB int, beta float32, c Ptr, ldc, strideC, batch int) error

	// AddLosses adds rows rows' losses and hits (as softmax_xent wrote
	// them) into sums.
	AddLosses(rowLoss, rowHit Ptr, rows int, sums LossSums) error
	// Losses reads the sums back: the summed loss and the correct count.
	Losses(sums LossSums) (float64, int, error)
}

// Batch is where one batch of examples and its labels (int32) are.
type Batch struct {
	X, Labels Ptr
	// InputSize and LabelsPerExample are the model's: values of an
	// example and labels of one.
	InputSize, LabelsPerExample int
}

// LossSums is where a device adds up a call's losses and hits, each its
// own way (CUDA into a float64 and an int32, WebGPU per row, added up on
// the host): Rows floats at Loss and at Hits, Rows the most rows of a
// batch and at least 2 (a float64), zeroed by the executor at the start
// of each call.
type LossSums struct {
	Loss, Hits Ptr
	Rows       int
}

// Grids the executor fixes, so that the kernels that reduce over them add
// in one order on every device.
const (
	// ClipBlocks is grad_sumsq_partial's grid: a partial sum of squares
	// per block, which clip_scale adds up.
	ClipBlocks = 256
	// GuardBytes are left unused at the start of the device memory.
	GuardBytes = 256
)
