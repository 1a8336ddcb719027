package nn

// goMicro is the pure-Go micro-kernel: a 4×4 tile of C in 16 local
// accumulators, so each loaded value of A and B is used four times. It is
// what the wasm build runs (Go emits no wasm SIMD), and elsewhere the
// fallback when no assembly kernel applies. In wasm, 4×4, 4×8 and 8×8 tiles
// and 2×4 or 3×3 ones (which fit Go's 16 float registers without spilling)
// all ran within 15% of each other; unrolling by four steps of k was worth
// 10-15%, the loop overhead weighing as much as the spills.
var goMicro = &microKernel{mr: 4, nr: 4, fn: goKernel4x4}

// goKernel4x4 computes C[0:4, 0:4] += Σ_p a[4p:4p+4]ᵀ · b[4p:4p+4].
func goKernel4x4(k int, a, b, c []float32, ldc int) {
	a, b = a[:4*k], b[:4*k]
	var c00, c01, c02, c03, c10, c11, c12, c13 float32
	var c20, c21, c22, c23, c30, c31, c32, c33 float32
	// Re-slicing each step lets the compiler drop every bounds check in
	// the loop body: the loop condition proves the lengths.
	for len(a) >= 16 && len(b) >= 16 {
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
		b0, b1, b2, b3 = b[4], b[5], b[6], b[7]
		a0, a1, a2, a3 = a[4], a[5], a[6], a[7]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
		b0, b1, b2, b3 = b[8], b[9], b[10], b[11]
		a0, a1, a2, a3 = a[8], a[9], a[10], a[11]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
		b0, b1, b2, b3 = b[12], b[13], b[14], b[15]
		a0, a1, a2, a3 = a[12], a[13], a[14], a[15]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
		a, b = a[16:], b[16:]
	}
	for len(a) >= 4 && len(b) >= 4 { // k not a multiple of 4
		b0, b1, b2, b3 := b[0], b[1], b[2], b[3]
		a0, a1, a2, a3 := a[0], a[1], a[2], a[3]
		c00 += a0 * b0
		c01 += a0 * b1
		c02 += a0 * b2
		c03 += a0 * b3
		c10 += a1 * b0
		c11 += a1 * b1
		c12 += a1 * b2
		c13 += a1 * b3
		c20 += a2 * b0
		c21 += a2 * b1
		c22 += a2 * b2
		c23 += a2 * b3
		c30 += a3 * b0
		c31 += a3 * b1
		c32 += a3 * b2
		c33 += a3 * b3
		a, b = a[4:], b[4:]
	}
	r0 := c[:4]
	r0[0] += c00
	r0[1] += c01
	r0[2] += c02
	r0[3] += c03
	r1 := c[1*ldc : 1*ldc+4]
	r1[0] += c10
	r1[1] += c11
	r1[2] += c12
	r1[3] += c13
	r2 := c[2*ldc : 2*ldc+4]
	r2[0] += c20
	r2[1] += c21
	r2[2] += c22
	r2[3] += c23
	r3 := c[3*ldc : 3*ldc+4]
	r3[0] += c30
	r3[1] += c31
	r3[2] += c32
	r3[3] += c33
}
