//go:build !js

package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
)

// go-source reads the tree $CROWDTRAIN_GO_SOURCE names as a text tree of
// .go files; without any Go source the error says where it looked and
// what to do.
func TestGoSourceSource(t *testing.T) {
	dir := t.TempDir()
	for i, name := range []string{"a/a.go", "b/b.go", "c/c.go", "d/notes.txt"} {
		writeFile(t, filepath.Join(dir, name), []byte(strings.Repeat("package x // "+name+"\n", 3+i)))
	}
	t.Setenv(EnvGoSource, dir)
	spec := Builtin(GoSource)
	if err := spec.Validate(); err != nil || !spec.IsText() {
		t.Fatalf("Validate() = %v, IsText() = %v", err, spec.IsText())
	}
	train, val, err := Load(spec, Options{Context: 8})
	if err != nil {
		t.Fatal(err)
	}
	if train.Name != "go-source-train" || val.Name != "go-source-validation" || strings.Contains(string(train.U8)+string(val.U8), "notes.txt") {
		t.Fatalf("train %q, val %q", train.U8, val.U8)
	}

	t.Setenv(EnvGoSource, filepath.Join(dir, "nope"))
	_, _, err = Load(spec, Options{Context: 8})
	if !errors.Is(err, ErrGoSourceNotFound) || !IsNotFound(err) || !strings.Contains(err.Error(), "$"+EnvGoSource+"="+filepath.Join(dir, "nope")) {
		t.Fatalf("a missing $%s: %v", EnvGoSource, err)
	}

	// Nothing to be found: no go on PATH, no build GOROOT.
	t.Setenv(EnvGoSource, "")
	t.Setenv("PATH", t.TempDir())
	saved := buildGOROOT
	t.Cleanup(func() { buildGOROOT = saved })
	buildGOROOT = func() string { return filepath.Join(dir, "no-goroot") }
	_, _, err = Load(spec, Options{Context: 8})
	for _, want := range []string{"$" + EnvGoSource + " unset", "no go command on $PATH", "runtime.GOROOT() gives " + filepath.Join(dir, "no-goroot"), "apt-get install golang-go", "--data DIR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error does not say %q: %v", want, err)
		}
	}
	if !IsNotFound(err) {
		t.Errorf("IsNotFound(%v) = false", err)
	}
}

// The toolchain on this machine: its standard library loads, split by
// file, with no binary file among its .go files.
func TestGoSourceFromToolchain(t *testing.T) {
	testenv.Long(t, "reads the 90 MB of Go source")
	t.Setenv(EnvGoSource, "")
	dir, err := GoSourceDir()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(dir, "runtime", "proc.go")); err != nil {
		t.Fatalf("GoSourceDir() = %s: %v", dir, err)
	}
	tree, err := ReadTextTree(dir, GoSourceGlob, GoSourceValFraction)
	if err != nil {
		t.Fatal(err)
	}
	tr, va := len(Text(tree.Train)), len(Text(tree.Val))
	t.Logf("%s: %d training files (%d bytes), %d held out (%d bytes), %d duplicates", dir, len(tree.Train), tr, len(tree.Val), va, tree.Duplicates)
	if len(tree.Train) < 3000 || tr < 20<<20 || len(tree.Val) < 10 || len(tree.Val) > len(tree.Train)/30 {
		t.Fatalf("%d training files (%d bytes), %d held out: not a Go standard library", len(tree.Train), tr, len(tree.Val))
	}
}
