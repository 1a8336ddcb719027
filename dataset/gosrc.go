//go:build !js

package dataset

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
)

// GoSourceDir finds the Go source tree: $CROWDTRAIN_GO_SOURCE when set,
// else the src directory of `go env GOROOT` (the toolchain on PATH), else
// of runtime.GOROOT() (the toolchain this binary was built with, or
// $GOROOT). Its error wraps ErrGoSourceNotFound and says where it looked.
func GoSourceDir() (string, error) {
	if d := os.Getenv(EnvGoSource); d != "" {
		if fi, err := os.Stat(d); err != nil || !fi.IsDir() {
			return "", goSourceMissing(fmt.Sprintf("$%s=%s is not a directory", EnvGoSource, d))
		}
		return d, nil
	}
	var looked []string
	try := func(how, goroot string) (string, bool) {
		src := filepath.Join(goroot, "src")
		if fi, err := os.Stat(filepath.Join(src, "runtime")); err != nil || !fi.IsDir() {
			looked = append(looked, fmt.Sprintf("%s gives %s, which has no src/runtime", how, goroot))
			return "", false
		}
		return src, true
	}
	if goCmd, err := exec.LookPath("go"); err != nil {
		looked = append(looked, "no go command on $PATH")
	} else {
		var out, stderr bytes.Buffer
		cmd := exec.Command(goCmd, "env", "GOROOT")
		cmd.Stdout, cmd.Stderr = &out, &stderr
		if err := cmd.Run(); err != nil {
			looked = append(looked, fmt.Sprintf("`%s env GOROOT` failed: %v %s", goCmd, err, strings.TrimSpace(stderr.String())))
		} else if root := strings.TrimSpace(out.String()); root == "" {
			looked = append(looked, fmt.Sprintf("`%s env GOROOT` printed nothing", goCmd))
		} else if src, ok := try("`go env GOROOT`", root); ok {
			return src, nil
		}
	}
	if root := buildGOROOT(); root == "" {
		looked = append(looked, "runtime.GOROOT() is empty (built with -trimpath)")
	} else if src, ok := try("runtime.GOROOT()", root); ok {
		return src, nil
	}
	return "", goSourceMissing(fmt.Sprintf("$%s unset; %s", EnvGoSource, strings.Join(looked, "; ")))
}

// buildGOROOT is runtime.GOROOT, a variable so tests can take it away (it
// reads $GOROOT only as the process started).
var buildGOROOT = runtime.GOROOT //nolint:staticcheck // a fallback only: the toolchain this binary was built with

func goSourceMissing(looked string) error {
	return &KeyError{Key: "dataset", Problem: fmt.Sprintf("%s: %v (%s). Fix: %s", GoSource, ErrGoSourceNotFound, looked, GoSourceFix), Err: ErrGoSourceNotFound}
}
