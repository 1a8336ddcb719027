package nn

import "math"

// The pure-Go kernel runs at a few GFLOP/s in wasm (scalar code, no SIMD),
// and there the zeros that relu leaves are worth skipping: after a relu
// about half of the activations and of their gradients are zero, and they
// are the A operand of the second layer's forward GEMM and of most backward
// GEMMs. sparseGemm takes op(A) row by row as a list of its non-zero
// entries and adds, for each, one row of a packed strip of B: work in
// proportion to the non-zeros. Dense operands (the input images in these
// benchmarks) keep the packed 4×4 kernel.

// sparseNR is the width of a B strip: 8 accumulators stay in registers
// next to the operands (Go's wasm backend has 16 float registers).
const sparseNR = 8

// goSparseMinZeros: with the pure-Go kernel op(A) goes through sparseGemm
// when at least this share of a sample of it is zero. Measured in wasm
// (Node and Chromium), the list kernel about matches the 4×4 kernel on
// dense data, so it pays from about a quarter of zeros on.
const goSparseMinZeros = 0.25

// mostlyZero samples op(A) (m×k) at about 1024 evenly spread entries and
// reports whether at least the share minZeros of them are zero.
func mostlyZero(transA bool, m, k int, a []float32, lda int, minZeros float64) bool {
	total := m * k
	step := max(1, total/1024)
	zeros, n := 0, 0
	for t := 0; t < total; t += step {
		i, p := t/k, t%k
		var v float32
		if transA {
			v = a[p*lda+i]
		} else {
			v = a[i*lda+p]
		}
		// Branch-free count: x|-x has its top bit set exactly when x != 0
		// (the sign is shifted out first, so -0 counts as zero).
		x := math.Float32bits(v) << 1
		zeros += int(1 - (x|-x)>>31)
		n++
	}
	return float64(zeros) >= minZeros*float64(n)
}

// sparseGemm computes C += alpha*op(A)*op(B) (beta already applied),
// skipping the zero entries of op(A).
//
// With sb, each block's products come from sb (a block kernel's
// SparseBlockFunc) instead of sparseRow8, with the same sums.
func sparseGemm(s *gemmScratch, sb SparseBlockFunc, transA, transB bool, m, n, k int, alpha float32, a []float32, lda int, b []float32, ldb int, c []float32, ldc int) {
	for pc := 0; pc < k; pc += blockK {
		kb := min(blockK, k-pc)
		for jc := 0; jc < n; jc += blockN {
			nb := min(blockN, n-jc)
			packB(s.b, transB, b, ldb, pc, jc, kb, nb, sparseNR)
			for ic := 0; ic < m; ic += blockM {
				mb := min(blockM, m-ic)
				// The non-zeros of each row of this block of op(A):
				// values (times alpha) and their p within the block.
				for i := 0; i < mb; i++ {
					vals := s.spVal[i*blockK : i*blockK+kb]
					idx := s.spIdx[i*blockK : i*blockK+kb]
					cnt := 0
					if transA {
						for p := 0; p < kb; p++ {
							if v := a[(pc+p)*lda+ic+i]; v != 0 {
								vals[cnt], idx[cnt] = alpha*v, int32(p)
								cnt++
							}
						}
					} else {
						row := a[(ic+i)*lda+pc : (ic+i)*lda+pc+kb]
						for p, v := range row {
							if v != 0 {
								vals[cnt], idx[cnt] = alpha*v, int32(p)
								cnt++
							}
						}
					}
					s.spN[i] = int32(cnt)
				}
				if sb != nil {
					nt := ceilDiv(nb, sparseNR)
					ld := nt * sparseNR
					cblk := s.blockC()
					sb(mb, nt, kb, blockK, s.spVal, s.spIdx, s.spN[:mb], s.b[:nt*sparseNR*kb], cblk[:mb*ld])
					for i := range mb {
						if s.spN[i] != 0 {
							addTo(c[(ic+i)*ldc+jc:(ic+i)*ldc+jc+nb], cblk[i*ld:i*ld+nb])
						}
					}
					continue
				}
				for jr := 0; jr < nb; jr += sparseNR {
					bp := s.b[jr*kb : (jr+sparseNR)*kb]
					nj := min(sparseNR, nb-jr)
					for i := 0; i < mb; i++ {
						cnt := int(s.spN[i])
						if cnt == 0 {
							continue
						}
						off := (ic+i)*ldc + jc + jr
						vals, idx := s.spVal[i*blockK:i*blockK+cnt], s.spIdx[i*blockK:i*blockK+cnt]
						if nj == sparseNR {
							sparseRow8(vals, idx, bp, c[off:off+sparseNR])
							continue
						}
						t := s.tile[:sparseNR]
						clear(t)
						sparseRow8(vals, idx, bp, t)
						addTo(c[off:off+nj], t[:nj])
					}
				}
			}
		}
	}
}

// sparseRow8 adds Σ_t vals[t] · b[idx[t]*8 : idx[t]*8+8] to c[0:8].
func sparseRow8(vals []float32, idx []int32, b, c []float32) {
	idx = idx[:len(vals)]
	var c0, c1, c2, c3, c4, c5, c6, c7 float32
	for t, v := range vals {
		p := int(idx[t]) * sparseNR
		r := b[p : p+sparseNR : p+sparseNR] // one bounds check for the eight loads
		c0 += v * r[0]
		c1 += v * r[1]
		c2 += v * r[2]
		c3 += v * r[3]
		c4 += v * r[4]
		c5 += v * r[5]
		c6 += v * r[6]
		c7 += v * r[7]
	}
	c = c[:sparseNR]
	c[0] += c0
	c[1] += c1
	c[2] += c2
	c[3] += c3
	c[4] += c4
	c[5] += c5
	c[6] += c6
	c[7] += c7
}

// sparseRow8Set writes Σ_t vals[t] · b[idx[t]*8 : idx[t]*8+8] to c[0:8]:
// sparseRow8's sums, stored.
func sparseRow8Set(vals []float32, idx []int32, b, c []float32) {
	c = c[:sparseNR]
	clear(c)
	sparseRow8(vals, idx, b, c)
}
