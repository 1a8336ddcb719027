//go:build amd64 && !purego

package nn

// The direct convolution's AVX-512 kernels (conv_direct_amd64.s, written
// by scripts/gen_conv_kernels.py); see conv_direct.go.

//go:noescape
func convFwd8x32(k int, a, b []float32, off []int32, bias []float32, relu int, c []float32, ldc int)

//go:noescape
func convGradW8x2(n int, d, b []float32, off0, off1 int, acc []float32)

// The wrappers check every operand's extent once per call, so a bad
// geometry panics instead of reading or writing out of bounds. Tap offsets
// increase with the tap, so the last is the largest.

func convFwd8x32Checked(k int, a, b []float32, off []int32, bias []float32, relu bool, c []float32, ldc int) {
	if k <= 0 {
		panic("nn: convFwd8x32: no taps")
	}
	_, _, _, _ = a[:8*k], off[:k], bias[:8], c[:7*ldc+32]
	if off[0] < 0 {
		panic("nn: convFwd8x32: negative tap offset")
	}
	_ = b[int(off[k-1])+31]
	r := 0
	if relu {
		r = 1
	}
	convFwd8x32(k, a, b, off, bias, r, c, ldc)
}

func convGradW8x2Checked(n int, d, b []float32, off0, off1 int, acc []float32) {
	if n <= 0 || off0 < 0 || off1 < 0 {
		panic("nn: convGradW8x2: bad chunk count or offset")
	}
	_, _ = d[:128*n], acc[:256]
	_ = b[max(off0, off1)+16*n-1]
	convGradW8x2(n, d, b, off0, off1, acc)
}
