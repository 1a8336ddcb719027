//go:build linux || windows

package driver

import "fmt"

// BLAS is cuBLAS, libcublas.
type BLAS struct {
	Path    string
	Version int

	cublasCreate       func(h *uintptr) int32
	cublasDestroy      func(h uintptr) int32
	cublasGetVersion   func(h uintptr, v *int32) int32
	cublasSgemm        func(h uintptr, ta, tb int32, m, n, k int32, alpha *float32, a DevicePtr, lda int32, b DevicePtr, ldb int32, beta *float32, c DevicePtr, ldc int32) int32
	cublasSgemmBatched func(h uintptr, ta, tb int32, m, n, k int32, alpha *float32, a DevicePtr, lda int32, strideA int64, b DevicePtr, ldb int32, strideB int64,
		beta *float32, c DevicePtr, ldc int32, strideC int64, batch int32) int32
	cublasGetStatusName func(code int32) *byte // optional (cuBLAS 11.4 and later)

	handle uintptr
	// alpha and beta are passed by pointer (host pointer mode).
	alpha, beta float32
}

// BLASNames are the file names tried for cuBLAS, newest first.
var BLASNames = blasNames

// LoadBLAS opens cuBLAS (see LoadDriver for dirs). It needs a current
// context only from Init on.
func LoadBLAS(dirs []string) (*BLAS, error) {
	lib, err := openLibrary(BLASNames, dirs, cublasHint, blasCompanions...)
	if err != nil {
		return nil, err
	}
	lib.hint = "cuBLAS is too old; install cuBLAS 11 or later"
	b := &BLAS{Path: lib.path}
	if err := lib.bindAll(map[string]any{
		"cublasCreate_v2":           &b.cublasCreate,
		"cublasDestroy_v2":          &b.cublasDestroy,
		"cublasGetVersion_v2":       &b.cublasGetVersion,
		"cublasSgemm_v2":            &b.cublasSgemm,
		"cublasSgemmStridedBatched": &b.cublasSgemmBatched,
	}); err != nil {
		return nil, err
	}
	if lib.bind(&b.cublasGetStatusName, "cublasGetStatusName") != nil {
		b.cublasGetStatusName = nil
	}
	return b, nil
}

// cublasStatus names, for cuBLAS versions without cublasGetStatusName.
var cublasStatus = map[int32]string{
	1: "CUBLAS_STATUS_NOT_INITIALIZED", 3: "CUBLAS_STATUS_ALLOC_FAILED", 7: "CUBLAS_STATUS_INVALID_VALUE",
	8: "CUBLAS_STATUS_ARCH_MISMATCH", 11: "CUBLAS_STATUS_MAPPING_ERROR", 13: "CUBLAS_STATUS_EXECUTION_FAILED",
	14: "CUBLAS_STATUS_INTERNAL_ERROR", 15: "CUBLAS_STATUS_NOT_SUPPORTED", 16: "CUBLAS_STATUS_LICENSE_ERROR",
}

const cublasAllocFailed = 3

func (b *BLAS) check(fn string, code int32) error {
	if code == 0 {
		return nil
	}
	name := ""
	if b.cublasGetStatusName != nil {
		name = goString(b.cublasGetStatusName(code))
	}
	if name == "" {
		name = cublasStatus[code]
	}
	if name == "" {
		name = fmt.Sprintf("cuBLAS status %d", code)
	}
	return &Error{Func: fn, Code: int(code), Name: name, oom: code == cublasAllocFailed}
}

// Init creates the cuBLAS handle on the current context.
func (b *BLAS) Init() error {
	if err := b.check("cublasCreate_v2", b.cublasCreate(&b.handle)); err != nil {
		return err
	}
	var v int32
	if b.cublasGetVersion(b.handle, &v) == 0 {
		b.Version = int(v)
	}
	return nil
}

// Close destroys the handle.
func (b *BLAS) Close() error {
	if b.handle == 0 {
		return nil
	}
	h := b.handle
	b.handle = 0
	return b.check("cublasDestroy_v2", b.cublasDestroy(h))
}

const (
	opN = 0 // CUBLAS_OP_N
	opT = 1 // CUBLAS_OP_T
)

func op(t bool) int32 {
	if t {
		return opT
	}
	return opN
}

// Gemm computes, in cuBLAS's own column-major terms, C = alpha·op(A)·op(B)
// + beta·C with C m×n.
func (b *BLAS) Gemm(transA, transB bool, m, n, k int, alpha float32, a DevicePtr, lda int, bm DevicePtr, ldb int, beta float32, c DevicePtr, ldc int) error {
	b.alpha, b.beta = alpha, beta
	return b.check("cublasSgemm_v2", b.cublasSgemm(b.handle, op(transA), op(transB), int32(m), int32(n), int32(k),
		&b.alpha, a, int32(lda), bm, int32(ldb), &b.beta, c, int32(ldc)))
}

// GemmRowMajor computes C = alpha·op(A)·op(B) + beta·C for ROW-major
// matrices (C is m×n with row stride ldc, and so on), the layout the rest
// of crowdtrain uses. A row-major matrix read column-major is its
// transpose, so this is the column-major product Cᵀ = op(B)ᵀ·op(A)ᵀ: the
// operands swap places and keep their transpose flags.
func (b *BLAS) GemmRowMajor(transA, transB bool, m, n, k int, alpha float32, a DevicePtr, lda int, bm DevicePtr, ldb int, beta float32, c DevicePtr, ldc int) error {
	return b.Gemm(transB, transA, n, m, k, alpha, bm, ldb, a, lda, beta, c, ldc)
}

// GemmStridedBatched is batch independent GEMMs in one call, in cuBLAS's
// column-major terms: C_i = alpha·op(A_i)·op(B_i) + beta·C_i, where X_i
// starts strideX floats after X_{i-1}.
func (b *BLAS) GemmStridedBatched(transA, transB bool, m, n, k int, alpha float32, a DevicePtr, lda, strideA int, bm DevicePtr, ldb, strideB int,
	beta float32, c DevicePtr, ldc, strideC, batch int) error {
	b.alpha, b.beta = alpha, beta
	return b.check("cublasSgemmStridedBatched", b.cublasSgemmBatched(b.handle, op(transA), op(transB), int32(m), int32(n), int32(k),
		&b.alpha, a, int32(lda), int64(strideA), bm, int32(ldb), int64(strideB), &b.beta, c, int32(ldc), int64(strideC), int32(batch)))
}

// GemmStridedBatchedRowMajor is GemmRowMajor on batch matrices at once:
// C_i = alpha·op(A_i)·op(B_i) + beta·C_i, all row-major, X_i at X +
// i·strideX floats. Attention multiplies every example's (or head's)
// blocks this way.
func (b *BLAS) GemmStridedBatchedRowMajor(transA, transB bool, m, n, k int, alpha float32, a DevicePtr, lda, strideA int, bm DevicePtr, ldb, strideB int,
	beta float32, c DevicePtr, ldc, strideC, batch int) error {
	return b.GemmStridedBatched(transB, transA, n, m, k, alpha, bm, ldb, strideB, a, lda, strideA, beta, c, ldc, strideC, batch)
}
