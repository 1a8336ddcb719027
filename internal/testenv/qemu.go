package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
)

// QEMUVar, set to 1, fails rather than skips a test whose qemu-user
// emulator is missing, as RequireVar does (which .ci/run sets, and which
// covers qemu-user too).
const QEMUVar = "CROWDTRAIN_REQUIRE_QEMU"

// qemuNames maps a GOARCH to Debian qemu-user's emulator for it.
var qemuNames = map[string]string{"arm64": "qemu-aarch64"}

// NeedQEMU returns the path of qemu-user's emulator for goarch, or skips t
// (fails it under RequireVar or QEMUVar) saying what to install.
func NeedQEMU(t testing.TB, goarch string) string {
	t.Helper()
	name, ok := qemuNames[goarch]
	if !ok {
		t.Fatalf("testenv: no qemu-user emulator known for GOARCH=%s", goarch)
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	msg := name + " not found: install Debian's qemu-user to run the linux/" + goarch + " build's tests"
	if os.Getenv(QEMUVar) == "1" {
		t.Fatal(msg + "; " + QEMUVar + "=1 says this machine has it")
	}
	Missing(t, msg)
	return ""
}

// RunTestsUnderQEMU cross-compiles the tests of package pkg (an import
// path or a directory, as go test takes it) for linux/goarch without cgo,
// runs those that run (a -test.run pattern) matches with -test.short under
// qemu-user, in the package's directory, and returns their -test.v
// output. It fails t, with that output, when they fail or when none ran.
// On a linux/goarch host they run natively.
func RunTestsUnderQEMU(t testing.TB, goarch, pkg, run string) string {
	t.Helper()
	emu := "" // none on a linux/goarch host
	if runtime.GOOS != "linux" || runtime.GOARCH != goarch {
		emu = NeedQEMU(t, goarch)
	}
	bin := filepath.Join(t.TempDir(), "pkg-"+goarch+".test")
	build := exec.Command("go", "test", "-c", "-o", bin, pkg)
	build.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+goarch, "CGO_ENABLED=0")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go test -c %s for linux/%s: %v\n%s", pkg, goarch, err, out)
	}
	dir, err := exec.Command("go", "list", "-f", "{{.Dir}}", pkg).Output()
	if err != nil {
		t.Fatalf("go list %s: %v", pkg, err)
	}
	args := []string{"-test.short", "-test.v", "-test.count=1", "-test.run", run}
	cmd, how := exec.Command(bin, args...), "natively"
	if emu != "" {
		cmd, how = exec.Command(emu, append([]string{bin}, args...)...), "under "+filepath.Base(emu)
	}
	cmd.Dir = strings.TrimSpace(string(dir))
	// The kernel the tests start on is theirs to choose: a host's
	// CROWDTRAIN_KERNEL=avx2 names no kernel on arm64.
	cmd.Env = append(os.Environ(), "CROWDTRAIN_KERNEL=")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s for linux/%s, run %s: %v\n%s", pkg, goarch, how, err, out)
	}
	if !strings.Contains(string(out), "--- PASS") {
		t.Fatalf("%s for linux/%s, run %s: no test matched %q\n%s", pkg, goarch, how, run, out)
	}
	return string(out)
}
