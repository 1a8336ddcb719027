package dist

import (
	"bytes"
	"debug/elf"
	"debug/macho"
	"debug/pe"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// make dist, for real: every target cross-builds without cgo, each archive
// holds an executable of the right format for the right machine and the
// README, SHA256SUMS matches the files, a second build gives the same
// checksum, and the host's binary is the worker build it says it is.
func TestDistBuildsEveryTarget(t *testing.T) {
	testenv.Long(t, "cross-builds the worker for six targets")
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	at := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	opt := Options{Root: root, Out: out, Version: "v0.0.0-test", Commit: "0123456789abcdef", Time: at, Log: tlog{t}}
	start := time.Now()
	names, err := Build(t.Context(), opt)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("six targets built in %s", time.Since(start).Round(time.Second))

	raw, err := os.ReadFile(filepath.Join(out, SumsFile))
	if err != nil {
		t.Fatal(err)
	}
	sums, err := ParseSums(bytes.NewReader(raw))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, tg := range Targets {
		want = append(want, tg.ArchiveName(opt.Version))
	}
	if got := slices.Sorted(func(yield func(string) bool) {
		for n := range sums {
			if !yield(n) {
				return
			}
		}
	}); !slices.Equal(got, slices.Sorted(slices.Values(want))) || !slices.Equal(names, want) {
		t.Fatalf("SHA256SUMS lists %v and Build wrote %v; want %v", got, names, want)
	}
	for _, tg := range Targets {
		name := tg.ArchiveName(opt.Version)
		sum, err := FileSHA256(filepath.Join(out, name))
		if err != nil {
			t.Fatal(err)
		}
		if sums[name] != sum {
			t.Errorf("%s: SHA256SUMS says %s, the file is %s", name, sums[name], sum)
		}
		entries := readArchive(t, filepath.Join(out, name), tg)
		got := map[string]entry{}
		for _, e := range entries {
			got[e.name] = e
		}
		bin, ok := got[tg.Binary()]
		if !ok || bin.mode != 0o755 {
			t.Errorf("%s: no %s of mode 0755 in %v", name, tg.Binary(), entries)
			continue
		}
		if _, ok := got["README.md"]; !ok {
			t.Errorf("%s: no README.md", name)
		}
		if err := checkExecutable(tg, bin.data); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if tg.OS == runtime.GOOS && tg.Arch == runtime.GOARCH {
			runHostBinary(t, bin.data, opt)
		}
	}

	// The same commit built again, elsewhere, a moment later.
	again := opt
	again.Out, again.Targets = t.TempDir(), []Target{{"linux", "amd64"}}
	if _, err := Build(t.Context(), again); err != nil {
		t.Fatal(err)
	}
	name := again.Targets[0].ArchiveName(opt.Version)
	sum, err := FileSHA256(filepath.Join(again.Out, name))
	if err != nil {
		t.Fatal(err)
	}
	if sum != sums[name] {
		t.Errorf("%s built twice: %s, then %s", name, sums[name], sum)
	}
}

// checkExecutable reads data as the executable format of tg's OS and
// checks its machine.
func checkExecutable(tg Target, data []byte) error {
	r := bytes.NewReader(data)
	switch tg.OS {
	case "linux":
		f, err := elf.NewFile(r)
		if err != nil {
			return fmt.Errorf("not an ELF file: %v", err)
		}
		want := map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64}[tg.Arch]
		if f.Machine != want || f.Class != elf.ELFCLASS64 || f.Type != elf.ET_EXEC {
			return fmt.Errorf("ELF %v %v %v, want %v ELFCLASS64 ET_EXEC", f.Machine, f.Class, f.Type, want)
		}
		// purego (OpenBLAS, CUDA at run time) links the C library's
		// loader without cgo; nothing else may be asked for.
		libs, err := f.ImportedLibraries()
		if err != nil {
			return err
		}
		for _, l := range libs {
			if !slices.Contains([]string{"libc.so.6", "libdl.so.2", "libpthread.so.0"}, l) {
				return fmt.Errorf("links %s (of %v): built with cgo?", l, libs)
			}
		}
	case "darwin":
		f, err := macho.NewFile(r)
		if err != nil {
			return fmt.Errorf("not a Mach-O file: %v", err)
		}
		want := map[string]macho.Cpu{"amd64": macho.CpuAmd64, "arm64": macho.CpuArm64}[tg.Arch]
		if f.Cpu != want || f.Type != macho.TypeExec {
			return fmt.Errorf("Mach-O %v %v, want %v executable", f.Cpu, f.Type, want)
		}
	case "windows":
		f, err := pe.NewFile(r)
		if err != nil {
			return fmt.Errorf("not a PE file: %v", err)
		}
		want := map[string]uint16{"amd64": pe.IMAGE_FILE_MACHINE_AMD64, "arm64": pe.IMAGE_FILE_MACHINE_ARM64}[tg.Arch]
		if f.Machine != want || f.Characteristics&pe.IMAGE_FILE_EXECUTABLE_IMAGE == 0 {
			return fmt.Errorf("PE machine %#x characteristics %#x, want %#x, executable", f.Machine, f.Characteristics, want)
		}
	default:
		return fmt.Errorf("no check for %s", tg.OS)
	}
	return nil
}

// runHostBinary runs the archive's binary for this machine: version says
// what was stamped, and that there is no cgo; serve refuses with exit 2.
func runHostBinary(t *testing.T, data []byte, opt Options) {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "crowdtrain")
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "version").CombinedOutput()
	if err != nil {
		t.Fatalf("crowdtrain version: %v\n%s", err, out)
	}
	for _, line := range []string{"crowdtrain " + opt.Version, "commit: " + opt.Commit,
		"os/arch: " + runtime.GOOS + "/" + runtime.GOARCH, "cgo: false", "kernels: "} {
		if !strings.Contains(string(out), "\n"+line) && !strings.HasPrefix(string(out), line) {
			t.Errorf("crowdtrain version has no line %q:\n%s", line, out)
		}
	}
	for _, cmd := range []string{"serve", "relay"} {
		out, err = exec.Command(bin, cmd, "--addr", "127.0.0.1:0").CombinedOutput()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != 2 || !strings.Contains(string(out), "cannot hold a database") ||
			!strings.Contains(string(out), "CGO_ENABLED=1") {
			t.Errorf("crowdtrain %s in the worker build: %v\n%s\nwant exit 2 saying it cannot hold a database", cmd, err, out)
		}
	}
}

// tlog sends Build's progress to the test log.
type tlog struct{ t *testing.T }

func (l tlog) Write(p []byte) (int, error) {
	l.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}
