//go:build amd64 && !purego

package nn

// Assembly micro-kernels (kernel_amd64.s, written by
// scripts/gen_kernels.py), chosen by CPU feature detection at start. Build
// with -tags purego, or set CROWDTRAIN_KERNEL=go, to run without them.

//go:noescape
func cpuid(eaxArg, ecxArg uint32) (eax, ebx, ecx, edx uint32)

func xgetbv() (eax, edx uint32)

//go:noescape
func avx2Kernel6x16(k int, a, b, c []float32, ldc int)

//go:noescape
func avx512Kernel8x32(k int, a, b, c []float32, ldc int)

//go:noescape
func avx512Kernel8x32Set(k int, a, b, c []float32, ldc int)

// cpuFeatures reports which of the kernels' instruction sets both the CPU
// and the operating system (which must save the wider registers) support.
// We read CPUID ourselves rather than add golang.org/x/sys/cpu for three bits.
func cpuFeatures() (avx2FMA, avx512 bool) {
	maxLeaf, _, _, _ := cpuid(0, 0)
	if maxLeaf < 7 {
		return false, false
	}
	_, _, ecx1, _ := cpuid(1, 0)
	const fma, osxsave, avx = 1 << 12, 1 << 27, 1 << 28
	if ecx1&(fma|osxsave|avx) != fma|osxsave|avx {
		return false, false
	}
	xcr0, _ := xgetbv()
	_, ebx7, _, _ := cpuid(7, 0)
	const ymmState, zmmState = 0x6, 0xe0 // XCR0: SSE+AVX, opmask+ZMM
	const avx2, avx512f = 1 << 5, 1 << 16
	avx2FMA = xcr0&ymmState == ymmState && ebx7&avx2 != 0
	avx512 = avx2FMA && xcr0&zmmState == zmmState && ebx7&avx512f != 0
	return avx2FMA, avx512
}

// The Go wrappers check the operands' lengths once per tile, so a packing
// bug panics instead of corrupting memory.

func avx2Micro(k int, a, b, c []float32, ldc int) {
	_, _, _ = a[:6*k], b[:16*k], c[:5*ldc+16]
	avx2Kernel6x16(k, a, b, c, ldc)
}

func avx512Micro(k int, a, b, c []float32, ldc int) {
	_, _, _ = a[:8*k], b[:32*k], c[:7*ldc+32]
	avx512Kernel8x32(k, a, b, c, ldc)
}

func avx512MicroSet(k int, a, b, c []float32, ldc int) {
	_, _, _ = a[:8*k], b[:32*k], c[:7*ldc+32]
	avx512Kernel8x32Set(k, a, b, c, ldc)
}

func platformKernels() []*kernel {
	avx2FMA, avx512 := cpuFeatures()
	var ks []*kernel
	if avx512 {
		ks = append(ks, &kernel{name: KernelAVX512, micro: &microKernel{mr: 8, nr: 32, fn: avx512Micro, set: avx512MicroSet}, directConv: true})
	}
	if avx2FMA {
		ks = append(ks, &kernel{name: KernelAVX2, micro: &microKernel{mr: 6, nr: 16, fn: avx2Micro}})
	}
	return ks
}
