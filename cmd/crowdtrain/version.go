package main

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/crowdtrain/crowdtrain/nn"
)

// version and commit are stamped at build time by make dist
// (-ldflags "-X main.version=... -X main.commit=..."). A plain go build
// leaves them empty: version is then "dev", and commit comes from the VCS
// information the go command records. Workers report the version in hello.
var version, commit string

func init() {
	if version == "" {
		version = "dev"
	}
	if commit == "" {
		commit = vcsCommit()
	}
}

// vcsCommit is the revision go build recorded from the checkout, with
// "-dirty" for uncommitted changes, or "unknown" (a build outside a
// checkout, or with -buildvcs=false).
func vcsCommit() string {
	info, ok := debug.ReadBuildInfo()
	if !ok {
		return "unknown"
	}
	rev, dirty := "", false
	for _, s := range info.Settings {
		switch s.Key {
		case "vcs.revision":
			rev = s.Value
		case "vcs.modified":
			dirty = s.Value == "true"
		}
	}
	if rev == "" {
		return "unknown"
	}
	if dirty {
		rev += "-dirty"
	}
	return rev
}

// cgoEnabled is whether this build has cgo, and with it SQLite and the
// commands that hold a database (serve, relay, export); cgo.go sets it.
var cgoEnabled bool

// versionCmd prints what this binary is. The os/arch, cgo and kernels
// lines are read by scripts and tests: keep their form.
func versionCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newCLIFlags("version", "version   (or crowdtrain --version)")
	if err := fs.parse(ctx, args, stderr); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "crowdtrain %s\n", version)
	fmt.Fprintf(stdout, "commit: %s\n", commit)
	fmt.Fprintf(stdout, "go: %s\n", runtime.Version())
	fmt.Fprintf(stdout, "os/arch: %s/%s\n", runtime.GOOS, runtime.GOARCH)
	fmt.Fprintf(stdout, "cgo: %t\n", cgoEnabled)
	// The kernels built in and usable on this CPU, the default first;
	// OpenBLAS joins them when work finds the library at run time.
	fmt.Fprintf(stdout, "kernels: %s\n", strings.Join(nn.Kernels(), ","))
	return nil
}
