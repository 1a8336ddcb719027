package dist

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"time"
)

// Target is one platform a worker archive is built for.
type Target struct{ OS, Arch string }

func (t Target) String() string { return t.OS + "/" + t.Arch }

// Targets are the volunteer platforms `make dist` builds.
var Targets = []Target{
	{"linux", "amd64"}, {"linux", "arm64"},
	{"darwin", "amd64"}, {"darwin", "arm64"},
	{"windows", "amd64"}, {"windows", "arm64"},
}

// ParseTarget reads "os/arch", which must be one of Targets.
func ParseTarget(s string) (Target, error) {
	goos, goarch, _ := strings.Cut(strings.TrimSpace(s), "/")
	t := Target{goos, goarch}
	if !slices.Contains(Targets, t) {
		names := make([]string, len(Targets))
		for i, t := range Targets {
			names[i] = t.String()
		}
		return Target{}, fmt.Errorf("target %q is not one of %s", s, strings.Join(names, ", "))
	}
	return t, nil
}

// Binary is the executable's name inside the archive.
func (t Target) Binary() string {
	if t.OS == "windows" {
		return "crowdtrain.exe"
	}
	return "crowdtrain"
}

// Ext is the archive's extension: .zip for Windows, .tar.gz elsewhere.
func (t Target) Ext() string {
	if t.OS == "windows" {
		return ".zip"
	}
	return ".tar.gz"
}

// ArchiveName is crowdtrain_<version>_<os>_<arch>.tar.gz (or .zip).
func (t Target) ArchiveName(version string) string {
	return fmt.Sprintf("crowdtrain_%s_%s_%s%s", version, t.OS, t.Arch, t.Ext())
}

// SumsFile is the name of the checksum file beside the archives.
const SumsFile = "SHA256SUMS"

// versionRE is what a version may hold: it goes into file names and URLs.
var versionRE = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$`)

// Options says what Build builds.
type Options struct {
	Root    string    // the module's root (cmd/crowdtrain is built from there)
	Out     string    // the folder the archives and SHA256SUMS go to
	Version string    // stamped as main.version, and in the archive names
	Commit  string    // stamped as main.commit
	Time    time.Time // every file's time in the archives
	Targets []Target  // default Targets
	Docs    []string  // files beside the binary, relative to Root, when present
	Go      string    // the go command, default "go"
	Log     io.Writer
}

// DefaultDocs are the files an archive holds beside the binary, those of
// them the checkout has.
var DefaultDocs = []string{"README.md", "LICENSE"}

// Build cross-builds cmd/crowdtrain without cgo for each target, writes its
// archive to Out, and then Out/SHA256SUMS for them. Archives of earlier
// builds in Out (crowdtrain_*) are removed first, so that SHA256SUMS covers
// exactly what is there. It returns the archives' names.
func Build(ctx context.Context, o Options) ([]string, error) {
	if !versionRE.MatchString(o.Version) {
		return nil, fmt.Errorf("version %q: use letters, digits and . _ + - (it names the archives)", o.Version)
	}
	if o.Commit == "" {
		o.Commit = "unknown"
	}
	if o.Go == "" {
		o.Go = "go"
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if len(o.Targets) == 0 {
		o.Targets = Targets
	}
	if o.Docs == nil {
		o.Docs = DefaultDocs
	}
	if o.Time.IsZero() || o.Time.Year() < 1980 { // zip cannot say earlier
		o.Time = time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC)
	}
	if err := os.MkdirAll(o.Out, 0o755); err != nil {
		return nil, err
	}
	old, _ := filepath.Glob(filepath.Join(o.Out, "crowdtrain_*"))
	for _, f := range append(old, filepath.Join(o.Out, SumsFile)) {
		if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	var docs []file
	for _, d := range o.Docs {
		b, err := os.ReadFile(filepath.Join(o.Root, d))
		if errors.Is(err, os.ErrNotExist) {
			continue
		} else if err != nil {
			return nil, err
		}
		docs = append(docs, file{name: filepath.Base(d), mode: 0o644, data: b})
	}
	tmp, err := os.MkdirTemp("", "crowdtrain-dist-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	var names []string
	for _, t := range o.Targets {
		start := time.Now()
		bin := filepath.Join(tmp, t.OS+"_"+t.Arch, t.Binary())
		if err := goBuild(ctx, o, t, bin); err != nil {
			return nil, err
		}
		data, err := os.ReadFile(bin)
		if err != nil {
			return nil, err
		}
		files := append([]file{{name: t.Binary(), mode: 0o755, data: data}}, docs...)
		name := t.ArchiveName(o.Version)
		if err := writeArchive(filepath.Join(o.Out, name), t, files, o.Time); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.Log, "dist: %s (%d bytes binary, %s)\n", name, len(data), time.Since(start).Round(100*time.Millisecond))
		names = append(names, name)
	}
	if err := WriteSums(o.Out, names); err != nil {
		return nil, err
	}
	return names, nil
}

// goBuild builds the worker for t into out. Everything that could differ
// between machines is fixed: no cgo, no VCS stamp (the commit is stamped
// with -X instead), no paths (-trimpath), an empty build id, the baseline
// instruction sets (the kernels pick AVX2/AVX-512 at run time).
func goBuild(ctx context.Context, o Options, t Target, out string) error {
	ldflags := fmt.Sprintf("-s -w -buildid= -X main.version=%s -X main.commit=%s", o.Version, o.Commit)
	cmd := exec.CommandContext(ctx, o.Go, "build", "-trimpath", "-buildvcs=false", "-ldflags", ldflags, "-o", out, "./cmd/crowdtrain")
	cmd.Dir = o.Root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS="+t.OS, "GOARCH="+t.Arch,
		"GOAMD64=v1", "GOARM64=v8.0", "GOFLAGS=", "GOEXPERIMENT=")
	if b, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("building %s: %v\n%s", t, err, b)
	}
	return nil
}

// WriteSums writes dir/SHA256SUMS for the named files of dir, sorted, in the
// format of sha256sum's output ("<hex>  <name>"), which `sha256sum -c` and
// `shasum -a 256 -c` read.
func WriteSums(dir string, names []string) error {
	names = slices.Sorted(slices.Values(names))
	var b strings.Builder
	for _, n := range names {
		sum, err := FileSHA256(filepath.Join(dir, n))
		if err != nil {
			return err
		}
		fmt.Fprintf(&b, "%s  %s\n", sum, n)
	}
	return os.WriteFile(filepath.Join(dir, SumsFile), []byte(b.String()), 0o644)
}

// FileSHA256 is the hex SHA-256 of a file's contents.
func FileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", err
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// ParseSums reads a SHA256SUMS: file name to hex checksum. A line that is
// not "<64 hex digits>  <name>" (or "<hex> *<name>", binary mode) is an
// error naming its line.
func ParseSums(r io.Reader) (map[string]string, error) {
	sums := map[string]string{}
	sc := bufio.NewScanner(r)
	for n := 1; sc.Scan(); n++ {
		line := sc.Text()
		if line == "" {
			continue
		}
		sum, name, ok := strings.Cut(line, " ")
		if !ok || len(sum) != 64 || (!strings.HasPrefix(name, " ") && !strings.HasPrefix(name, "*")) {
			return nil, fmt.Errorf("%s line %d: %q is not \"<sha256>  <file>\"", SumsFile, n, line)
		}
		if _, err := hex.DecodeString(sum); err != nil {
			return nil, fmt.Errorf("%s line %d: %q is not a hex SHA-256", SumsFile, n, sum)
		}
		sums[name[1:]] = strings.ToLower(sum)
	}
	return sums, sc.Err()
}

// GitVersion is what `git describe --tags --always --dirty` says in root
// (v0.3.0, v0.3.0-4-g1f2e3d4, 1f2e3d4-dirty), and the full commit and its
// time; "dev" and "unknown" outside a checkout.
func GitVersion(ctx context.Context, root string) (version, commit string, at time.Time) {
	git := func(args ...string) string {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = root
		out, err := cmd.Output()
		if err != nil {
			return ""
		}
		return strings.TrimSpace(string(out))
	}
	version, commit = git("describe", "--tags", "--always", "--dirty"), git("rev-parse", "HEAD")
	if version == "" {
		version = "dev"
	}
	if commit == "" {
		commit = "unknown"
	}
	var sec int64
	if _, err := fmt.Sscan(git("log", "-1", "--format=%ct"), &sec); err == nil {
		at = time.Unix(sec, 0).UTC()
	}
	return version, commit, at
}
