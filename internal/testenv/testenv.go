// Package testenv is what tests in several packages share about the
// machine they run on and about the two test tiers: why a test is long
// (Long), and what it needs that the machine may lack (NeedNode,
// NeedPython, NeedTorch, NeedNginx, NeedQEMU, NeedONNXRuntime), and how a package's tests
// run built for another architecture (RunTestsUnderQEMU). Saying it here, in one
// place, keeps the tiers honest: `make test` runs `go test -short` and so
// skips every Long test with the reason it gives; `make test-e2e` runs
// them all; CI (RequireVar=1) fails, rather than skips, a test whose tool
// is missing.
package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"strings"
	"testing"
)

// RequireVar is set to 1 by CI (.ci/run), which installs everything the
// tests use: Chromium, Node.js, Python with numpy, websockets and msgpack,
// qemu-user, the Debian data packages and ONNX Runtime for Node.js.
const RequireVar = "CROWDTRAIN_REQUIRE_BROWSER"

// Missing skips t because something it needs is not on this machine (msg
// says what, and how to install it), or fails t where RequireVar says it
// must be there.
func Missing(t testing.TB, msg string) {
	t.Helper()
	if os.Getenv(RequireVar) == "1" {
		t.Fatal(msg + "; " + RequireVar + "=1 says this machine has it (CI installs it)")
	}
	t.Skip(msg)
}

// Long skips t in the fast tier (`go test -short`, which `make test` runs)
// and says why: it trains to a target, starts processes or a browser,
// compares with PyTorch, or otherwise takes more than a few seconds of a
// 2-core machine. `make test-e2e` runs it. A property such a test checks
// along the way belongs in a fast unit test as well.
func Long(t testing.TB, why string) {
	t.Helper()
	if testing.Short() {
		t.Skip("long (" + why + "): runs in make test-e2e, not under -short")
	}
}

// NeedNode returns Node.js's path, or skips t (fails it under RequireVar)
// when it is missing; what says what the test runs under Node.
func NeedNode(t testing.TB, what string) string {
	t.Helper()
	node, err := exec.LookPath("node")
	if err != nil {
		Missing(t, "node not found: install Node.js (Debian's nodejs) to run "+what)
	}
	return node
}

// Python is the interpreter the tests drive: Debian's, whose packages
// (python3-torch, python3-numpy, ...) .ci/run installs.
const Python = "/usr/bin/python3"

// NeedPython returns Python's path once it imports every module, or skips
// t (fails it under RequireVar) naming the Debian packages to install.
func NeedPython(t testing.TB, modules ...string) string {
	t.Helper()
	if len(modules) == 0 {
		if _, err := os.Stat(Python); err != nil {
			Missing(t, Python+" not found (apt-get install python3)")
		}
		return Python
	}
	out, err := exec.Command(Python, "-c", "import "+strings.Join(modules, ", ")).CombinedOutput()
	if err != nil {
		pkgs := make([]string, len(modules))
		for i, m := range modules {
			pkgs[i] = "python3-" + m
		}
		Missing(t, fmt.Sprintf("%s cannot import %s (apt-get install %s): %v %s",
			Python, strings.Join(modules, ", "), strings.Join(pkgs, " "), err, strings.TrimSpace(string(out))))
	}
	return Python
}

// NeedTorch is NeedPython with PyTorch and numpy, for the comparisons
// with PyTorch.
func NeedTorch(t testing.TB) string {
	t.Helper()
	return NeedPython(t, "numpy", "torch")
}

// NeedNginx returns nginx's path, or skips t (fails it under RequireVar).
func NeedNginx(t testing.TB) string {
	t.Helper()
	if bin, err := exec.LookPath("nginx"); err == nil {
		return bin
	}
	if _, err := os.Stat("/usr/sbin/nginx"); err == nil {
		return "/usr/sbin/nginx"
	}
	Missing(t, "no nginx (install Debian's nginx)")
	return ""
}
