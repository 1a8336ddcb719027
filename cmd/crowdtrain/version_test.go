package main

import (
	"bytes"
	"context"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
)

// `crowdtrain version` and `--version` print the lines scripts read: the
// platform, whether cgo (and so serve) is in, and the GEMM kernels.
func TestVersionPrintsBuild(t *testing.T) {
	for _, arg := range []string{"version", "--version"} {
		var out, errOut bytes.Buffer
		if code := run(context.Background(), []string{arg}, &out, &errOut); code != 0 {
			t.Fatalf("%s: exit %d: %s", arg, code, errOut.String())
		}
		lines := strings.Split(strings.TrimSpace(out.String()), "\n")
		want := map[string]bool{
			"crowdtrain " + version:    false,
			"commit: " + commit:        false,
			"go: " + runtime.Version(): false,
			fmt.Sprintf("os/arch: %s/%s", runtime.GOOS, runtime.GOARCH): false,
			"cgo: true": false, // the tests build with cgo: they start coordinators
			"kernels: " + strings.Join(nn.Kernels(), ","): false,
		}
		for _, l := range lines {
			if _, ok := want[l]; ok {
				want[l] = true
			}
		}
		for l, seen := range want {
			if !seen {
				t.Errorf("%s: no line %q in\n%s", arg, l, out.String())
			}
		}
		if !strings.Contains(out.String(), "kernels: ") || !strings.Contains(out.String(), nn.KernelGo) {
			t.Errorf("%s: the pure-Go kernel is not listed:\n%s", arg, out.String())
		}
	}
	var out, errOut bytes.Buffer
	if code := run(context.Background(), []string{"version", "extra"}, &out, &errOut); code != 2 {
		t.Errorf("version extra: exit %d, want 2", code)
	}
}
