package gpuworker

// dropoutThreshold is the kernels' dropout_keep threshold for a rate, as
// package nn computes it: a value is dropped when the top 24 bits of its
// hash are below it, so with probability rate (to 2^-24).
func dropoutThreshold(rate float64) uint32 { return uint32(rate * (1 << 24)) }
