//go:build amd64 && !purego

package nn

// adamVector: Adam's element-wise update runs 8 floats at a time in
// optim_amd64.s where the CPU has AVX2, with the same operations in the
// same order as the Go loop, so the parameters come out the same bits.
var adamVector = func() bool { avx2, _ := cpuFeatures(); return avx2 }()

//go:noescape
func adamStep8(n int, p, grad, m, v *float32, k *adamConsts)

// adamStepVector updates the first n&^7 values and returns how many it did.
func adamStepVector(params, g, m, v []float32, k *adamConsts) int {
	n := len(params) &^ 7
	if !adamVector || n == 0 {
		return 0
	}
	_, _, _ = g[:n], m[:n], v[:n]
	adamStep8(n, &params[0], &g[0], &m[0], &v[0], k)
	return n
}
