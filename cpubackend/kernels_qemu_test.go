package cpubackend_test

import (
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// The NEON kernel's leases against pure Go's, within the spot-check
// tolerance (TestKernelsAgreeWithinSpotCheckTolerance), built for
// linux/arm64 and run under qemu-aarch64: an honest arm64 volunteer is not
// struck against an amd64 one for its kernel.
func TestSpotCheckToleranceUnderQEMU(t *testing.T) {
	testenv.Long(t, "cross-compiles cpubackend's tests for arm64 and runs them under qemu-user")
	out := testenv.RunTestsUnderQEMU(t, "arm64", ".", "^TestKernelsAgreeWithinSpotCheckTolerance$")
	if !strings.Contains(out, "neon vs go") || !strings.Contains(out, "--- PASS: TestKernelsAgreeWithinSpotCheckTolerance") {
		t.Errorf("the arm64 run compared no neon lease with pure Go:\n%s", out)
	}
	for _, line := range strings.Split(out, "\n") {
		if strings.Contains(line, "neon vs go") {
			t.Log(strings.TrimSpace(line))
		}
	}
}
