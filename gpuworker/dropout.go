package gpuworker

import "math"

// dropoutThreshold is the kernels' dropout_keep threshold for a rate: an
// element is dropped when the top 24 bits of its hash are below it, so
// with probability rate (to 2^-24).
func dropoutThreshold(rate float32) uint32 {
	return uint32(math.Round(float64(rate) * (1 << 24)))
}
