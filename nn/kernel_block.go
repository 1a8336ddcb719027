package nn

import "fmt"

// BlockFunc computes one packed block of a GEMM, the work between two
// packings: for each of nt panels of packed B (panel j is kb rows of nr
// values at b[j*kb*nr:]) and each of mt strips of packed A (strip i is kb
// columns of mr values at a[i*kb*mr:]), the mr×nr tile
//
//	C[i*mr+r][j*nr+q] = Σ_{p<kb} a[i*kb*mr + p*mr + r] · b[j*kb*nr + p*nr + q]
//
// summed in order of p, written (not added) into c, row-major with a row
// stride of nt*nr. It is how a kernel outside Go's reach runs: the
// browser's wasm SIMD module, called once per block rather than per tile.
type BlockFunc func(kb, mt, nt int, a, b, c []float32)

// SparseBlockFunc computes one block of a GEMM whose op(A) is mostly
// zeros, from its non-zeros alone: row i of the block (i < mb) has cnt[i]
// of them, values vals[i*stride+t] at steps p = idx[i*stride+t], and for
// each of nt panels of packed B (as BlockFunc's, nr = 8)
//
//	C[i][j*8+q] = Σ_{t<cnt[i]} vals[i*stride+t] · b[j*kb*8 + idx[i*stride+t]*8 + q]
//
// summed in order of t, written into c with a row stride of nt*8 (a row
// with no non-zeros may be left as it was).
type SparseBlockFunc func(mb, nt, kb, stride int, vals []float32, idx, cnt []int32, b, c []float32)

// BlockKernel is a kernel that computes whole packed blocks: one call per
// block, for kernels called across a boundary that costs too much per
// tile (the browser's wasm SIMD module).
type BlockKernel struct {
	// MR×NR are the tiles of Dense: MR must divide 96 and NR 512 (the
	// packing's block sizes), MR at most 8 and NR at most 32.
	MR, NR int
	Dense  BlockFunc
	// SparseMinZeros is the share of zeros in a sample of op(A) from
	// which a GEMM skips them (0: never), on Sparse, or on the pure-Go
	// list kernel when Sparse is nil.
	SparseMinZeros float64
	Sparse         SparseBlockFunc
}

// blockKernel is a registered BlockKernel.
type blockKernel struct {
	mr, nr int
	fn     BlockFunc
	sparse SparseBlockFunc
}

// RegisterBlockKernel makes k available under name, placed before the
// others (as RegisterKernel); UseKernel switches to it. Registering a
// name again replaces it.
func RegisterBlockKernel(name string, k BlockKernel) error {
	mr, nr := k.MR, k.NR
	if k.Dense == nil || mr < 1 || nr < 1 || mr > maxMR || nr > maxNR || blockM%mr != 0 || blockN%nr != 0 {
		return fmt.Errorf("nn: block kernel %q: %d×%d tiles; want a Dense function, mr dividing %d (at most %d) and nr dividing %d (at most %d)",
			name, mr, nr, blockM, maxMR, blockN, maxNR)
	}
	if !(k.SparseMinZeros >= 0 && k.SparseMinZeros <= 1) {
		return fmt.Errorf("nn: block kernel %q: SparseMinZeros %v is not a share in [0, 1]", name, k.SparseMinZeros)
	}
	register(&kernel{name: name, block: &blockKernel{mr: mr, nr: nr, fn: k.Dense, sparse: k.Sparse}, sparseA: k.SparseMinZeros})
	return nil
}

// blockGemm is packedGemm around a BlockFunc: the same blocking and
// packing; each block's product lands in the scratch cblk and is then
// added to C (or copied, on a first pass with beta 0), its edges cut off.
// Each element of C is the sum of the blocks' sums, each summed in order
// of p, as the pure-Go kernel sums it.
func blockGemm(bk *blockKernel, s *gemmScratch, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, beta float32, c []float32, ldc int) {
	if m <= 0 || n <= 0 {
		return
	}
	if k <= 0 || alpha == 0 {
		scaleC(beta, m, n, c, ldc)
		return
	}
	setFirst := beta == 0
	if !setFirst {
		scaleC(beta, m, n, c, ldc)
	}
	cblk := s.blockC()
	mr, nr := bk.mr, bk.nr
	for pc := 0; pc < k; pc += blockK {
		kb := min(blockK, k-pc)
		first := setFirst && pc == 0
		for jc := 0; jc < n; jc += blockN {
			nb := min(blockN, n-jc)
			nt := ceilDiv(nb, nr)
			ld := nt * nr
			packB(s.b, transB, b, ldb, pc, jc, kb, nb, nr)
			for ic := 0; ic < m; ic += blockM {
				mb := min(blockM, m-ic)
				mt := ceilDiv(mb, mr)
				packA(s.a, transA, a, lda, ic, pc, mb, kb, mr, alpha)
				bk.fn(kb, mt, nt, s.a[:mt*mr*kb], s.b[:nt*nr*kb], cblk[:mt*mr*ld])
				for i := range mb {
					src := cblk[i*ld : i*ld+nb]
					dst := c[(ic+i)*ldc+jc : (ic+i)*ldc+jc+nb]
					if first {
						copy(dst, src)
					} else {
						addTo(dst, src)
					}
				}
			}
		}
	}
}

// blockC is the scratch block of C of block kernels, made at first use.
func (s *gemmScratch) blockC() []float32 {
	if s.cblk == nil {
		s.cblk = make([]float32, blockM*blockN)
	}
	return s.cblk
}

// GoSparseBlock is a SparseBlockFunc in Go with the summation order every
// SparseBlockFunc must have (that of sparseRow8): the reference the wasm
// SIMD module is tested against.
func GoSparseBlock(mb, nt, kb, stride int, vals []float32, idx, cnt []int32, b, c []float32) {
	ld := nt * sparseNR
	for j := range nt {
		bp := b[j*kb*sparseNR : (j+1)*kb*sparseNR]
		for i := range mb {
			n := int(cnt[i])
			sparseRow8Set(vals[i*stride:i*stride+n], idx[i*stride:i*stride+n], bp, c[i*ld+j*sparseNR:i*ld+(j+1)*sparseNR])
		}
	}
}

// GoBlock is a BlockFunc in Go with the summation order every BlockFunc
// must have: the reference the wasm SIMD module is tested against.
func GoBlock(mr, nr int) BlockFunc {
	return func(kb, mt, nt int, a, b, c []float32) {
		ld := nt * nr
		for j := range nt {
			bp := b[j*kb*nr : (j+1)*kb*nr]
			for i := range mt {
				ap := a[i*kb*mr : (i+1)*kb*mr]
				for r := range mr {
					for q := range nr {
						var sum float32
						for p := range kb {
							sum += ap[p*mr+r] * bp[p*nr+q]
						}
						c[(i*mr+r)*ld+j*nr+q] = sum
					}
				}
			}
		}
	}
}
