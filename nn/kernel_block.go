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

// blockKernel is a kernel that computes whole packed blocks (BlockFunc).
type blockKernel struct {
	mr, nr int
	fn     BlockFunc
}

// RegisterBlockKernel makes a block kernel of mr×nr tiles available under
// name, placed before the others (as RegisterKernel); UseKernel switches to
// it. mr must divide 96 and nr 512 (the packing's block sizes), mr at most
// 8 and nr at most 32. A GEMM whose op(A) has at least the share
// sparseMinZeros of zeros runs on the pure-Go list kernel instead, which
// skips them (0: never). Registering a name again replaces it.
func RegisterBlockKernel(name string, mr, nr int, sparseMinZeros float64, f BlockFunc) error {
	if f == nil || mr < 1 || nr < 1 || mr > maxMR || nr > maxNR || blockM%mr != 0 || blockN%nr != 0 {
		return fmt.Errorf("nn: block kernel %q: %d×%d tiles; want mr dividing %d (at most %d) and nr dividing %d (at most %d)",
			name, mr, nr, blockM, maxMR, blockN, maxNR)
	}
	if !(sparseMinZeros >= 0 && sparseMinZeros <= 1) {
		return fmt.Errorf("nn: block kernel %q: sparseMinZeros %v is not a share in [0, 1]", name, sparseMinZeros)
	}
	register(&kernel{name: name, block: &blockKernel{mr: mr, nr: nr, fn: f}, sparseA: sparseMinZeros})
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
	if s.cblk == nil {
		s.cblk = make([]float32, blockM*blockN)
	}
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
				bk.fn(kb, mt, nt, s.a[:mt*mr*kb], s.b[:nt*nr*kb], s.cblk[:mt*mr*ld])
				for i := range mb {
					src := s.cblk[i*ld : i*ld+nb]
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
