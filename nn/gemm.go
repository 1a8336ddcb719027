package nn

import (
	"gonum.org/v1/gonum/blas"
	"gonum.org/v1/gonum/blas/blas32"
)

// GEMM tile sizes. gonum's Sgemm goes parallel (spawning goroutines and
// allocating) once C spans >= 4 blocks of 64x64; tiles of at most 64x192 stay
// below that, so every call is serial and allocation-free. K is tiled too for
// the axpy-based cases, keeping the streamed rows of B in cache; the A·Bᵀ case
// is a dot product per element and runs faster untiled (longer dots, fewer
// horizontal sums), which measurably speeds up dense forward passes.
const (
	tileM = 64
	tileN = 192
	tileK = 256
)

// gonumGemm is the SgemmFunc of KernelGonum: blas32.Gemm in serial tiles.
func gonumGemm(transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if k == 0 {
		// The K loop below would not run, and C still needs its beta.
		scaleC(beta, m, n, c, ldc)
		return
	}
	tA, tB := blas.NoTrans, blas.NoTrans
	if transA {
		tA = blas.Trans
	}
	if transB {
		tB = blas.Trans
	}
	// Equal-sized tiles: 200 columns become 100+100, not 192+8.
	tm := ceilDiv(m, ceilDiv(m, tileM))
	tn := ceilDiv(n, ceilDiv(n, tileN))
	for i0 := 0; i0 < m; i0 += tm {
		mi := min(tm, m-i0)
		for j0 := 0; j0 < n; j0 += tn {
			nj := min(tn, n-j0)
			cs := blas32.General{Rows: mi, Cols: nj, Stride: ldc, Data: c[i0*ldc+j0:]}
			bt := beta
			tk := tileK
			if !transA && transB {
				tk = k
			}
			for l0 := 0; l0 < k; l0 += tk {
				kl := min(tk, k-l0)
				var as, bs blas32.General
				if transA {
					as = blas32.General{Rows: kl, Cols: mi, Stride: lda, Data: a[l0*lda+i0:]}
				} else {
					as = blas32.General{Rows: mi, Cols: kl, Stride: lda, Data: a[i0*lda+l0:]}
				}
				if transB {
					bs = blas32.General{Rows: nj, Cols: kl, Stride: ldb, Data: b[j0*ldb+l0:]}
				} else {
					bs = blas32.General{Rows: kl, Cols: nj, Stride: ldb, Data: b[l0*ldb+j0:]}
				}
				blas32.Gemm(tA, tB, alpha, as, bs, bt, cs)
				bt = 1
			}
		}
	}
}

func ceilDiv(a, b int) int { return (a + b - 1) / b }
