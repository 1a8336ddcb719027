//go:build amd64 && !purego

package nn

// mathAVX512: the GELU runs in kernel_math_amd64.s (written by
// scripts/gen_math_kernels.py).
var mathAVX512 = func() bool { _, avx512 := cpuFeatures(); return avx512 }()

// geluFwd16 and geluBwd16 handle the first n values (a multiple of 16);
// the wrappers check the lengths first.
//
//go:noescape
func geluFwd16asm(n int, in, out []float32)

//go:noescape
func geluBwd16asm(n int, in, dOut, dIn []float32)

func geluFwd16(n int, in, out []float32) {
	_, _ = in[:n], out[:n]
	geluFwd16asm(n, in, out)
}

func geluBwd16(n int, in, dOut, dIn []float32) {
	_, _, _ = in[:n], dOut[:n], dIn[:n]
	geluBwd16asm(n, in, dOut, dIn)
}

// setMathAVX512 switches the vector GELU off and on (tests).
func setMathAVX512(on bool) { mathAVX512 = on }

//go:noescape
func expSub16asm(n int, x []float32, m float32)

func expSub16(n int, x []float32, m float32) {
	_ = x[:n]
	expSub16asm(n, x, m)
}
