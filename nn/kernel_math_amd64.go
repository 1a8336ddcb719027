//go:build amd64 && !purego

package nn

// The GELU and a softmax's exp run in kernel_math_amd64.s (written by
// scripts/gen_math_kernels.py): 16 floats at a time with AVX-512, 8 with
// AVX2 and FMA, which most machines without AVX-512 have.
var mathAVX512, mathAVX2 = func() (bool, bool) { avx2, avx512 := cpuFeatures(); return avx512, avx2 }()

// setMathVector picks the widest vector math up to width (16, 8, or 0 for
// the Go loops) that the CPU has, for tests; it returns the width set.
func setMathVector(width int) int {
	avx2, avx512 := cpuFeatures()
	mathAVX512, mathAVX2 = avx512 && width >= 16, avx2 && width >= 8
	switch {
	case mathAVX512:
		return 16
	case mathAVX2:
		return 8
	}
	return 0
}

// geluFwd16, geluBwd16 and expSub16 (and the 8-wide ones) handle the
// first n values (a multiple of the width); the wrappers check the
// lengths first.
//
//go:noescape
func geluFwd16asm(n int, in, out []float32)

//go:noescape
func geluBwd16asm(n int, in, dOut, dIn []float32)

//go:noescape
func expSub16asm(n int, x []float32, m float32)

//go:noescape
func geluFwd8asm(n int, in, out []float32)

//go:noescape
func geluBwd8asm(n int, in, dOut, dIn []float32)

//go:noescape
func expSub8asm(n int, x []float32, m float32)

func geluFwd16(n int, in, out []float32) {
	_, _ = in[:n], out[:n]
	geluFwd16asm(n, in, out)
}

func geluBwd16(n int, in, dOut, dIn []float32) {
	_, _, _ = in[:n], dOut[:n], dIn[:n]
	geluBwd16asm(n, in, dOut, dIn)
}

func expSub16(n int, x []float32, m float32) {
	_ = x[:n]
	expSub16asm(n, x, m)
}

func geluFwd8(n int, in, out []float32) {
	_, _ = in[:n], out[:n]
	geluFwd8asm(n, in, out)
}

func geluBwd8(n int, in, dOut, dIn []float32) {
	_, _, _ = in[:n], dOut[:n], dIn[:n]
	geluBwd8asm(n, in, dOut, dIn)
}

func expSub8(n int, x []float32, m float32) {
	_ = x[:n]
	expSub8asm(n, x, m)
}
