//go:build arm64 && !purego

package nn

import "testing"

// On arm64 the NEON kernel is built and is the default (the one --kernel
// auto starts from): the qemu run of the kernel tests must not pass on
// pure Go alone.
func TestNEONKernelIsDefault(t *testing.T) {
	if ks := Kernels(); len(ks) == 0 || ks[0] != KernelNEON {
		t.Fatalf("Kernels() = %v, want %s first", ks, KernelNEON)
	}
}
