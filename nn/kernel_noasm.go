//go:build !amd64 || purego

package nn

// platformKernels: no assembly kernels in this build (not amd64, or built
// with -tags purego).
func platformKernels() []*kernel { return nil }
