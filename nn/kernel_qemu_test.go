package nn

import (
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// The NEON kernel, checked on every CI run although CI has no arm64
// machine: this package's kernel tests built for linux/arm64 and run under
// qemu-aarch64 (Debian's qemu-user). The same shapes, transposes, alpha
// and beta as every kernel (TestKernelsMatchReference), and whole training
// steps against gonum (TestGradientEveryKernel). Emulation checks the
// results, not the speed.
func TestKernelTestsUnderQEMU(t *testing.T) {
	testenv.Long(t, "cross-compiles nn's tests for arm64 and runs them under qemu-user")
	out := testenv.RunTestsUnderQEMU(t, "arm64", ".",
		"^(TestNEONKernelIsDefault|TestKernelsMatchReference|TestGradientEveryKernel)$/^neon$")
	for _, want := range []string{
		"--- PASS: TestNEONKernelIsDefault",
		"--- PASS: TestKernelsMatchReference/neon",
		"--- PASS: TestGradientEveryKernel",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the arm64 run:\n%s", want, out)
		}
	}
}
