//go:build !amd64 || purego

package nn

// adamStepVector: no vector Adam in this build; the Go loop does it all.
func adamStepVector(params, g, m, v []float32, k *adamConsts) int { return 0 }

var adamVector = false
