package cpu_test

import (
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// The CPU backend on linux/arm64, under qemu-aarch64: the NEON kernel's
// leases against pure Go's within the spot-check tolerance
// (TestKernelsAgreeWithinSpotCheckTolerance), so an honest arm64 volunteer
// is not struck against an amd64 one for its kernel; and --kernel auto
// timing neon beside gonum and go on the job's model and taking one
// (TestAutoKernelPicksAValidKernel). Which one it takes under emulation
// says nothing about real arm64 hardware.
func TestArm64BackendUnderQEMU(t *testing.T) {
	testenv.Long(t, "cross-compiles worker/cpu's tests for arm64 and runs them under qemu-user")
	out := testenv.RunTestsUnderQEMU(t, "arm64", ".", "^(TestKernelsAgreeWithinSpotCheckTolerance|TestAutoKernelPicksAValidKernel)$")
	for _, want := range []string{
		"--- PASS: TestKernelsAgreeWithinSpotCheckTolerance",
		"--- PASS: TestAutoKernelPicksAValidKernel",
		"neon vs go", // a lease compared on the NEON kernel
		"neon ",      // and auto's figure for it
		"kernel auto: took",
	} {
		if !strings.Contains(out, want) {
			t.Errorf("no %q in the arm64 run:\n%s", want, out)
		}
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "neon vs go") || strings.Contains(line, "kernel auto: took") {
			t.Log(strings.TrimSpace(line))
		}
	}
}
