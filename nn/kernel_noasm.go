//go:build !(amd64 || arm64) || purego

package nn

// platformKernels: no assembly kernels in this build (neither amd64 nor
// arm64, or built with -tags purego).
func platformKernels() []*kernel { return nil }
