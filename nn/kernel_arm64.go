//go:build arm64 && !purego

package nn

// The NEON micro-kernel (kernel_arm64.s, written by
// scripts/gen_neon_kernels.py). AdvSIMD is part of every arm64 CPU Go runs
// on (the runtime's own memmove uses it), so there is nothing to detect.
// Build with -tags purego, or set CROWDTRAIN_KERNEL=go, to run without it.

//go:noescape
func neonKernel8x8(k int, a, b, c []float32, ldc int)

//go:noescape
func neonKernel8x8Set(k int, a, b, c []float32, ldc int)

// The Go wrappers check the operands' lengths once per tile, so a packing
// bug panics instead of corrupting memory.

func neonMicro(k int, a, b, c []float32, ldc int) {
	_, _, _ = a[:8*k], b[:8*k], c[:7*ldc+8]
	neonKernel8x8(k, a, b, c, ldc)
}

func neonMicroSet(k int, a, b, c []float32, ldc int) {
	_, _, _ = a[:8*k], b[:8*k], c[:7*ldc+8]
	neonKernel8x8Set(k, a, b, c, ldc)
}

// An 8×8 tile takes 16 of the 32 vector registers for C, leaving room to
// load two steps of both operands at once; 8 divides the packing's blockM
// and blockN, so packedGemm drives it as it drives the amd64 kernels.
func platformKernels() []*kernel {
	return []*kernel{{name: KernelNEON, micro: &microKernel{mr: 8, nr: 8, fn: neonMicro, set: neonMicroSet}}}
}
