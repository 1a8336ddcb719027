package dataset

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestGlobMatch(t *testing.T) {
	for _, c := range []struct {
		glob, rel string
		want      bool
	}{
		{"**/*.go", "a.go", true},
		{"**/*.go", "x/y/z/a.go", true},
		{"**/*.go", "x/a.go.txt", false},
		{"*.go", "a.go", true},
		{"*.go", "x/a.go", false},
		{"src/**/*_test.go", "src/a_test.go", true},
		{"src/**/*_test.go", "src/p/q/a_test.go", true},
		{"src/**/*_test.go", "lib/a_test.go", false},
		{"src/**", "src/p/q/a", true},
		{"a/**/b/**/c", "a/b/c", true},
		{"a/**/b/**/c", "a/x/b/y/z/c", true},
		{"a/**/b/**/c", "a/x/y/z/c", false},
		{"[ab]?.txt", "bz.txt", true},
		{"[ab]?.txt", "cz.txt", false},
	} {
		if err := CheckGlob(c.glob); err != nil {
			t.Fatalf("CheckGlob(%q): %v", c.glob, err)
		}
		if got := matchGlob(c.glob, c.rel); got != c.want {
			t.Errorf("matchGlob(%q, %q) = %v, want %v", c.glob, c.rel, got, c.want)
		}
	}
	for glob, want := range map[string]string{
		"":          "empty",
		"/abs/*.go": "absolute",
		"a//b":      "empty segment",
		"a/":        "empty segment",
		"../*.go":   `".."`,
		"a**/b":     "whole segment",
		"[a-":       "not a valid pattern",
	} {
		if err := CheckGlob(glob); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("CheckGlob(%q) = %v, want an error saying %q", glob, err, want)
		}
	}
}

// A tree read by a glob: the matching files at any depth, hidden ones and
// exact duplicates left out, split by file (never by window) on the hash of
// each relative path, so the split stays put when other files come and go.
func TestReadTextTree(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, filepath.FromSlash(n)) }
	var want []string
	for i := range 40 {
		rel := []string{"a", "a/b", "c/d/e"}[i%3] + "/f" + string(rune('a'+i%26)) + strings.Repeat("x", i/26) + ".go"
		writeFile(t, p(rel), []byte("package p // "+rel+"\n"))
		want = append(want, rel)
	}
	writeFile(t, p("top.go"), []byte("package top\n"))
	want = append(want, "top.go")
	writeFile(t, p("zz/copy.go"), []byte("package top\n")) // a duplicate of top.go
	writeFile(t, p("README.md"), []byte("not selected\x00"))
	writeFile(t, p(".git/hook.go"), []byte("\xff hidden"))
	writeFile(t, p("a/.hidden.go"), []byte("\xff hidden"))
	slices.Sort(want)

	tree, err := ReadTextTree(dir, "**/*.go", 0.2)
	if err != nil {
		t.Fatal(err)
	}
	var got, val []string
	for _, f := range append(slices.Clone(tree.Train), tree.Val...) {
		got = append(got, f.Rel)
	}
	slices.Sort(got)
	if !slices.Equal(got, want) || tree.Duplicates != 1 {
		t.Fatalf("read %v (%d duplicates); want %v and 1 duplicate (zz/copy.go)", got, tree.Duplicates, want)
	}
	for _, f := range tree.Val {
		val = append(val, f.Rel)
		if string(f.Data) != "package p // "+f.Rel+"\n" {
			t.Fatalf("%s holds %q", f.Rel, f.Data)
		}
	}
	if len(tree.Val) < 2 || len(tree.Val) > 16 || !slices.IsSorted(val) {
		t.Fatalf("held out %v of %d files at val_fraction 0.2", val, len(want))
	}
	for _, f := range tree.Train {
		if valHash(f.Rel) < 0.2 {
			t.Errorf("%s (hash %.3f) is trained on, below the fraction", f.Rel, valHash(f.Rel))
		}
	}
	if string(Text(tree.Val)) != string(Text(tree.Val[:1]))+string(Text(tree.Val[1:])) {
		t.Fatal("Text does not concatenate in order")
	}

	// Removing files moves none of the others between the splits.
	for _, rel := range want[:10] {
		os.Remove(p(rel))
	}
	again, err := ReadTextTree(dir, "**/*.go", 0.2)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range again.Val {
		if !slices.Contains(val, f.Rel) {
			t.Errorf("%s moved to the held-out files when others were removed", f.Rel)
		}
	}

	// A top-level glob; the fraction too small to hold any file out still
	// holds out one, and one is trained on.
	small, err := ReadTextTree(dir, "*.go", 0.01)
	if err == nil {
		t.Fatalf("one file under *.go: want an error, got %d+%d files", len(small.Train), len(small.Val))
	}
	wantKeyError(t, err, "dataset.glob", "*.go", "1 distinct file", "at least 2")
	writeFile(t, p("top2.go"), []byte("package top2\n"))
	small, err = ReadTextTree(dir, "*.go", 0.01)
	if err != nil || len(small.Train) != 1 || len(small.Val) != 1 {
		t.Fatalf("two files at val_fraction 0.01: %v", err)
	}

	// The windows of each split come from its own files.
	train, test, err := TextSource{Path: dir, Glob: "**/*.go", ValFraction: 0.2}.Load(Options{Context: 4})
	if err != nil {
		t.Fatal(err)
	}
	if string(test.U8) != string(Text(again.Val)) || train.Stride != 4 || test.Classes != 256 {
		t.Fatalf("validation windows hold %q; want the held-out files %q", test.U8, Text(again.Val))
	}
}

func TestReadTextTreeRefuses(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, filepath.FromSlash(n)) }
	writeFile(t, p("tree/ok.go"), []byte("package ok\n"))
	writeFile(t, p("tree/ok2.go"), []byte("package ok2\n"))
	writeFile(t, p("tree/sub/nul.go"), []byte("package nul\x00"))
	writeFile(t, p("outside.go"), []byte("package outside\n"))
	tree := p("tree")

	_, err := ReadTextTree(tree, "**/*.go", 0.1)
	wantKeyError(t, err, "dataset.path", filepath.Join(tree, "sub", "nul.go"), "NUL byte at offset 11", "leave it out of the glob")
	os.WriteFile(p("tree/sub/nul.go"), []byte("caf\xe9"), 0o644)
	_, err = ReadTextTree(tree, "**/*.go", 0.1)
	wantKeyError(t, err, "dataset.path", filepath.Join(tree, "sub", "nul.go"), "not UTF-8", "offset 3")
	os.Remove(p("tree/sub/nul.go"))

	_, err = ReadTextTree(tree, "**/*.rs", 0.1)
	wantKeyError(t, err, "dataset.glob", `"**/*.rs" matches no file under `+tree)
	_, err = ReadTextTree(tree, "../*.go", 0.1)
	wantKeyError(t, err, "dataset.glob", "..")
	_, err = ReadTextTree(p("tree/ok.go"), "**/*.go", 0.1)
	wantKeyError(t, err, "dataset.path", "ok.go", "not a directory")
	_, err = ReadTextTree(p("nope"), "**/*.go", 0.1)
	wantKeyError(t, err, "dataset.path", "nope does not exist")

	// A symlink within the tree is read (and here dropped as a duplicate);
	// one that leaves the tree is refused; symlinked directories are not
	// followed.
	if err := os.Symlink(p("tree/ok.go"), p("tree/link.go")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(dir, p("tree/loop")); err != nil {
		t.Fatal(err)
	}
	got, err := ReadTextTree(tree, "**/*.go", 0.1)
	if err != nil || got.Duplicates != 1 || len(got.Train)+len(got.Val) != 2 {
		t.Fatalf("tree with an inside symlink: %v", err)
	}
	if err := os.Symlink(p("outside.go"), p("tree/sub/out.go")); err != nil {
		t.Fatal(err)
	}
	_, err = ReadTextTree(tree, "**/*.go", 0.1)
	wantKeyError(t, err, "dataset.path", filepath.Join(tree, "sub", "out.go"), "outside the tree")
}

// The spec keys: glob only with type text, and a valid pattern.
func TestSpecGlob(t *testing.T) {
	ok := Spec{Type: TypeText, Path: "d", Glob: "**/*.go", ValFraction: 0.01}
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	bad := ok
	bad.Glob = "a**"
	wantKeyError(t, bad.Validate(), "dataset.glob", "whole segment")
	npy := Spec{Type: TypeNPY, TrainX: "a", TrainY: "b", TestX: "c", TestY: "d", Glob: "*.npy"}
	wantKeyError(t, npy.Validate(), "dataset.glob", "type text")
	if src, err := ok.Source(); err != nil || src.(TextSource).Glob != "**/*.go" {
		t.Fatalf("Source() = %#v, %v", src, err)
	}
}

// Any glob is either refused by CheckGlob or matched without panicking; a
// glob without pattern characters matches itself, and under "**/" it
// matches itself at any depth.
func FuzzGlob(f *testing.F) {
	for _, s := range [][2]string{{"**/*.go", "a/b/c.go"}, {"*.go", "x.go"}, {"a/**/b/**", "a/b"}, {"[a-", "a"}, {"a//b", "a/b"}, {"\\*", "*"}, {"**", ""}} {
		f.Add(s[0], s[1])
	}
	f.Fuzz(func(t *testing.T, glob, rel string) {
		if CheckGlob(glob) != nil {
			return
		}
		matchGlob(glob, rel)
		if !strings.ContainsAny(glob, `*?[\`) {
			if !matchGlob(glob, glob) || !matchGlob("**/"+glob, "x/y/"+glob) {
				t.Fatalf("literal glob %q does not match itself", glob)
			}
		}
	})
}

// Many ** segments against a deep path cost a product, not an explosion.
func TestGlobManyDoubleStars(t *testing.T) {
	glob := strings.Repeat("**/a/", 30) + "b"
	rel := strings.Repeat("a/", 200) + "c"
	if err := CheckGlob(glob); err != nil {
		t.Fatal(err)
	}
	if matchGlob(glob, rel) || !matchGlob(glob, strings.Repeat("a/", 200)+"b") {
		t.Fatal("wrong match")
	}
}
