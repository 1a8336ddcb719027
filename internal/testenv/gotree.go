package testenv

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// GoSourceTree copies the Go sources (tests left out) of this repository's
// packages pkgs, found under root (the repository's root, relative to the
// test's package: ".."), into a temporary text tree, one directory per
// package, and returns its directory: a small real code corpus for the
// tokenized text jobs.
func GoSourceTree(t testing.TB, root string, pkgs ...string) string {
	t.Helper()
	dir := t.TempDir()
	for _, pkg := range pkgs {
		files, err := filepath.Glob(filepath.Join(root, pkg, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		if err := os.MkdirAll(filepath.Join(dir, pkg), 0o755); err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(dir, pkg, filepath.Base(f)), b, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	return dir
}
