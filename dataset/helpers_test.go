package dataset

import (
	"bytes"
	"compress/gzip"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// MNIST loads once per test binary (about a second): several tests share it.
var mnist struct {
	once        sync.Once
	train, test *Set
	err         error
}

// loadMNIST fails (never skips) the test when MNIST is missing: GoMNIST is a
// declared dependency, so a missing file is a broken setup, not an optional
// feature.
func loadMNIST(tb testing.TB) (train, test *Set) {
	tb.Helper()
	dir := mnistDir(tb)
	mnist.once.Do(func() { mnist.train, mnist.test, mnist.err = LoadMNIST(dir) })
	if mnist.err != nil {
		tb.Fatalf("LoadMNIST: %v", mnist.err)
	}
	return mnist.train, mnist.test
}

// mnistDir is FindMNIST("") in the unmodified environment (memoized, so
// tests that then change the environment still know where the real files
// are), or a test failure.
var realDir struct {
	once sync.Once
	dir  string
	err  error
}

func mnistDir(tb testing.TB) string {
	tb.Helper()
	realDir.once.Do(func() { realDir.dir, realDir.err = FindMNIST("") })
	if realDir.err != nil {
		tb.Fatalf("FindMNIST: %v", realDir.err)
	}
	return realDir.dir
}

// loadMNISTTest loads only the (small, fast) test set, for fuzz seeds.
func loadMNISTTest(tb testing.TB) *Set {
	tb.Helper()
	d := mnistDir(tb)
	s, err := LoadIDXPair("mnist-test", mnistFile(d, MNISTTestImages), mnistFile(d, MNISTTestLabels))
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func gzipBytes(tb testing.TB, b []byte) []byte {
	tb.Helper()
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	if _, err := zw.Write(b); err != nil {
		tb.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func gunzipFile(tb testing.TB, path string) []byte {
	tb.Helper()
	f, err := os.Open(path)
	if err != nil {
		tb.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		tb.Fatal(err)
	}
	b, err := io.ReadAll(zr)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func mustEncodeIDX(tb testing.TB, x *IDX) []byte {
	tb.Helper()
	b, err := EncodeIDX(x)
	if err != nil {
		tb.Fatal(err)
	}
	return b
}

func writeFile(tb testing.TB, path string, b []byte) {
	tb.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		tb.Fatal(err)
	}
}

// smallSet is a hand-built 5-example, 1x2x3, 3-class Set.
func smallSet() *Set {
	s := &Set{Name: "small", Elem: Pixels, Kind: ClassLabels, N: 5, Shape: []int{1, 2, 3}, Classes: 3}
	for i := range s.N * 6 {
		s.U8 = append(s.U8, byte(i*7))
	}
	s.Labels = []int32{0, 1, 2, 1, 0}
	return s
}
