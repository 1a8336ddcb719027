//go:build !amd64 || purego

package nn

// No direct-convolution kernels in this build: no kernel sets directConv,
// so these are never called.

func convFwd8x32Checked(k int, a, b []float32, off []int32, bias []float32, relu bool, c []float32, ldc int) {
	panic("nn: direct convolution without its kernels")
}

func convGradW8x2Checked(n int, d, b []float32, off0, off1 int, acc []float32) {
	panic("nn: direct convolution without its kernels")
}
