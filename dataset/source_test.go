package dataset

import (
	"encoding/binary"
	"errors"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/internal/testnpy"
)

func f32Bytes(v ...float32) []byte {
	b := make([]byte, 0, 4*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint32(b, math.Float32bits(x))
	}
	return b
}

func i64Bytes(v ...int64) []byte {
	b := make([]byte, 0, 8*len(v))
	for _, x := range v {
		b = binary.LittleEndian.AppendUint64(b, uint64(x))
	}
	return b
}

func wantKeyError(t *testing.T, err error, key string, msgs ...string) {
	t.Helper()
	var ke *KeyError
	if !errors.As(err, &ke) || ke.Key != key {
		t.Fatalf("error %v; want a KeyError for %s", err, key)
	}
	for _, m := range msgs {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("error %q does not mention %q", err, m)
		}
	}
}

func TestNPYSource(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	writeFile(t, p("x.npy"), testnpy.Encode("<f4", []int{3, 2}, f32Bytes(1, 2, 3, 4, 5, 6)))
	writeFile(t, p("y.npy"), testnpy.Encode("<i8", []int{3}, i64Bytes(0, 4, 1)))
	writeFile(t, p("tx.npy"), testnpy.Encode("<f4", []int{1, 2}, f32Bytes(-1, 0.5)))
	writeFile(t, p("ty.npy"), testnpy.Encode("|u1", []int{1, 1}, []byte{2}))
	writeFile(t, p("img.npy"), testnpy.Encode("|u1", []int{2, 1, 2, 2}, []byte{0, 255, 1, 2, 3, 4, 5, 6}))
	writeFile(t, p("imgy.npy"), testnpy.Encode("<u2", []int{2}, []byte{1, 0, 0, 0}))
	src := NPYSource{TrainX: p("x.npy"), TrainY: p("y.npy"), TestX: p("tx.npy"), TestY: p("ty.npy")}
	train, test, err := src.Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if train.N != 3 || test.N != 1 || train.Elem != Float32 || !slices.Equal(train.Shape, []int{2}) || train.Classes != 5 || test.Classes != 5 {
		t.Fatalf("train %s, test %s", train.Describe(), test.Describe())
	}
	x, y := make([]float32, 6), make([]int32, 3)
	train.Fill(x, y, 0, 3)
	if !slices.Equal(x, []float32{1, 2, 3, 4, 5, 6}) || !slices.Equal(y, []int32{0, 4, 1}) {
		t.Errorf("filled %v %v", x, y)
	}
	img, _, err := NPYSource{TrainX: p("img.npy"), TrainY: p("imgy.npy"), TestX: p("img.npy"), TestY: p("imgy.npy")}.Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if img.Elem != Pixels || !slices.Equal(img.Shape, []int{1, 2, 2}) || img.Labels[0] != 1 {
		t.Errorf("uint8 images: %s labels %v", img.Describe(), img.Labels)
	}

	// Bad input: each error names the key and the file, and says what to do.
	bad := func(name string, b []byte) string { writeFile(t, p(name), b); return p(name) }
	cases := []struct {
		name string
		src  NPYSource
		key  string
		msgs []string
	}{
		{"missing", NPYSource{TrainX: p("nope.npy"), TrainY: p("y.npy"), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_x", []string{"nope.npy does not exist"}},
		{"not npy", NPYSource{TrainX: bad("t.npy", []byte("1,2,3\n")), TrainY: p("y.npy"), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_x", []string{"not a NumPy .npy file", "numpy.save"}},
		{"npz", NPYSource{TrainX: bad("z.npy", []byte("PK\x03\x04zzzzzz")), TrainY: p("y.npy"), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_x", []string{".npz"}},
		{"float64", NPYSource{TrainX: bad("f8.npy", testnpy.Encode("<f8", []int{3}, make([]byte, 24))), TrainY: p("y.npy"), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_x", []string{"float64", "astype('float32')"}},
		{"fortran", NPYSource{TrainX: bad("fo.npy", []byte(strings.Replace(string(testnpy.Encode("<f4", []int{3, 2}, make([]byte, 24))), "False", "True ", 1))), TrainY: p("y.npy"), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_x", []string{"fortran_order", "ascontiguousarray"}},
		{"big-endian", NPYSource{TrainX: bad("be.npy", testnpy.Encode(">f4", []int{3, 2}, make([]byte, 24))), TrainY: p("y.npy"), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_x", []string{"big-endian"}},
		{"truncated", NPYSource{TrainX: bad("tr.npy", testnpy.Encode("<f4", []int{3, 2}, make([]byte, 20))), TrainY: p("y.npy"), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_x", []string{"24 data bytes, got 20"}},
		{"count mismatch", NPYSource{TrainX: p("x.npy"), TrainY: bad("y2.npy", testnpy.Encode("<i8", []int{2}, i64Bytes(0, 1))), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_y", []string{"2 labels but the inputs have 3 examples"}},
		{"float labels", NPYSource{TrainX: p("x.npy"), TrainY: bad("yf.npy", testnpy.Encode("<f4", []int{3}, f32Bytes(0, 1, 2))), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_y", []string{"labels must be integers"}},
		{"negative label", NPYSource{TrainX: p("x.npy"), TrainY: bad("yn.npy", testnpy.Encode("<i8", []int{3}, i64Bytes(0, -1, 2))), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_y", []string{"label -1 of example 1 is out of range"}},
		{"huge label", NPYSource{TrainX: p("x.npy"), TrainY: bad("yh.npy", testnpy.Encode("<i8", []int{3}, i64Bytes(0, 70000, 2))), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_y", []string{"70000", "out of range"}},
		{"NaN input", NPYSource{TrainX: bad("nan.npy", testnpy.Encode("<f4", []int{3, 2}, f32Bytes(1, float32(math.NaN()), 3, 4, 5, 6))), TrainY: p("y.npy"), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_x", []string{"NaN", "finite"}},
		{"shape mismatch", NPYSource{TrainX: p("x.npy"), TrainY: p("y.npy"), TestX: p("img.npy"), TestY: p("imgy.npy")}, "dataset.test_x", []string{"different data sets"}},
		{"labels 2-d", NPYSource{TrainX: p("x.npy"), TrainY: bad("y2d.npy", testnpy.Encode("<i8", []int{3, 2}, make([]byte, 48))), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_y", []string{"(examples,)"}},
		{"trailing", NPYSource{TrainX: bad("tail.npy", append(testnpy.Encode("<f4", []int{3, 2}, make([]byte, 24)), 1, 2)), TrainY: p("y.npy"), TestX: p("tx.npy"), TestY: p("ty.npy")}, "dataset.train_x", []string{"bytes after"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, _, err := c.src.Load(Options{})
			wantKeyError(t, err, c.key, c.msgs...)
		})
	}
}

// Arrays that numpy.save itself wrote load to the values numpy holds.
func TestNPYFromNumpySave(t *testing.T) {
	testenv.NeedPython(t, "numpy")
	dir := t.TempDir()
	script := `
import numpy as np, sys
d = sys.argv[1]
rng = np.random.default_rng(5)
np.save(d + "/x.npy", rng.random((7, 3, 4, 5), dtype=np.float32))
np.save(d + "/u8.npy", rng.integers(0, 256, (7, 28, 28), dtype=np.uint8))
for dt in ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]:
    np.save(d + "/y_" + dt + ".npy", (np.arange(7) % 4).astype(dt))
np.save(d + "/col.npy", (np.arange(7) % 3).reshape(7, 1))
np.save(d + "/f64.npy", np.zeros((7, 2)))
np.save(d + "/fortran.npy", np.asfortranarray(np.zeros((7, 2), dtype=np.float32)))
np.save(d + "/big.npy", np.zeros((7, 2), dtype=">f4"))
np.save(d + "/bool.npy", np.zeros(7, dtype=bool))
np.asarray(np.load(d + "/x.npy"), dtype="<f4").tofile(d + "/x.raw")
`
	if out, err := exec.Command("/usr/bin/python3", "-c", script, dir).CombinedOutput(); err != nil {
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	p := func(n string) string { return filepath.Join(dir, n) }
	for _, dt := range []string{"int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"} {
		s, _, err := NPYSource{TrainX: p("x.npy"), TrainY: p("y_" + dt + ".npy"), TestX: p("u8.npy"), TestY: p("col.npy")}.Load(Options{})
		if err == nil {
			t.Fatalf("%s: float32 train and uint8 test loaded as one data set", dt)
		}
		s, _, err = NPYSource{TrainX: p("x.npy"), TrainY: p("y_" + dt + ".npy"), TestX: p("x.npy"), TestY: p("col.npy")}.Load(Options{})
		if err != nil {
			t.Fatalf("labels %s: %v", dt, err)
		}
		if !slices.Equal(s.Labels, []int32{0, 1, 2, 3, 0, 1, 2}) || s.Classes != 4 || !slices.Equal(s.Shape, []int{3, 4, 5}) {
			t.Fatalf("labels %s: %v, %s", dt, s.Labels, s.Describe())
		}
		raw, _ := os.ReadFile(p("x.raw"))
		if !slices.Equal(f32Bytes(s.F32...), raw) {
			t.Fatal("float32 inputs differ from numpy's values")
		}
	}
	u8, _, err := NPYSource{TrainX: p("u8.npy"), TrainY: p("col.npy"), TestX: p("u8.npy"), TestY: p("col.npy")}.Load(Options{})
	if err != nil || u8.Elem != Pixels || !slices.Equal(u8.Shape, []int{28, 28}) {
		t.Fatalf("uint8 (7, 28, 28): %v %v", err, u8)
	}
	for name, msg := range map[string]string{"f64.npy": "float64", "fortran.npy": "fortran_order", "big.npy": "big-endian", "bool.npy": "bool"} {
		_, _, err := NPYSource{TrainX: p(name), TrainY: p("col.npy"), TestX: p("x.npy"), TestY: p("col.npy")}.Load(Options{})
		if name == "bool.npy" {
			_, _, err = NPYSource{TrainX: p("x.npy"), TrainY: p(name), TestX: p("x.npy"), TestY: p("col.npy")}.Load(Options{})
			msg = "labels must be integers"
		}
		if err == nil || !strings.Contains(err.Error(), msg) {
			t.Errorf("%s: %v; want an error mentioning %q", name, err, msg)
		}
	}
}

func TestIDXSource(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	writeFile(t, p("ti"), mustEncodeIDX(t, &IDX{Dims: []int{4, 2, 3}, Data: make([]byte, 24)}))
	writeFile(t, p("tl.gz"), gzipBytes(t, mustEncodeIDX(t, &IDX{Dims: []int{4}, Data: []byte{0, 1, 2, 6}})))
	writeFile(t, p("si"), mustEncodeIDX(t, &IDX{Dims: []int{2, 3, 2, 3}, Data: make([]byte, 36)}))
	writeFile(t, p("si3"), mustEncodeIDX(t, &IDX{Dims: []int{2, 2, 3}, Data: make([]byte, 12)}))
	writeFile(t, p("sl"), mustEncodeIDX(t, &IDX{Dims: []int{2}, Data: []byte{7, 0}}))
	train, test, err := IDXSource{p("ti"), p("tl.gz"), p("si3"), p("sl")}.Load(Options{})
	if err != nil {
		t.Fatal(err)
	}
	if train.N != 4 || test.N != 2 || train.Classes != 8 || test.Classes != 8 || !slices.Equal(train.Shape, []int{1, 2, 3}) {
		t.Fatalf("train %s, test %s", train.Describe(), test.Describe())
	}
	_, _, err = IDXSource{p("ti"), p("tl.gz"), p("si"), p("sl")}.Load(Options{})
	wantKeyError(t, err, "dataset.test_images", "[3,2,3]", "[1,2,3]", "different data sets")
	_, _, err = IDXSource{p("ti"), p("sl"), p("si3"), p("sl")}.Load(Options{})
	wantKeyError(t, err, "dataset.train_labels", "4 images", "2 labels", "not a pair")
	_, _, err = IDXSource{p("tl.gz"), p("ti"), p("si3"), p("sl")}.Load(Options{})
	wantKeyError(t, err, "dataset.train_images", "labels file?")
	_, _, err = IDXSource{p("ti"), p("tl.gz"), p("missing"), p("sl")}.Load(Options{})
	wantKeyError(t, err, "dataset.test_images", "missing does not exist", "IDX")
	writeFile(t, p("html"), []byte("<html>not found</html>"))
	_, _, err = IDXSource{p("ti"), p("html"), p("si3"), p("sl")}.Load(Options{})
	wantKeyError(t, err, "dataset.train_labels", "not an IDX file")
}

func TestTextSource(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	body := strings.Repeat("Καλημέρα, world. ", 30) // multi-byte UTF-8
	writeFile(t, p("one.txt"), []byte(body))
	train, val, err := TextSource{Path: p("one.txt"), ValFraction: 0.1}.Load(Options{Context: 8})
	if err != nil {
		t.Fatal(err)
	}
	n := len(body)
	cut := n - int(float64(n)*0.1)
	if train.N != (cut-1)/8 || val.N != (n-cut-1)/8 || train.Classes != 256 || train.LabelsPerExample() != 8 {
		t.Fatalf("train %s, val %s; text of %d bytes cut at %d", train.Describe(), val.Describe(), n, cut)
	}
	x, y := make([]float32, 2*8), make([]int32, 2*8)
	train.Fill(x, y, 1, 2) // windows start at multiples of t
	for k := range 2 {
		for q := range 8 {
			off := (1+k)*8 + q
			if x[k*8+q] != float32(body[off]) || y[k*8+q] != int32(body[off+1]) {
				t.Fatalf("window %d position %d", 1+k, q)
			}
		}
	}
	val.Fill(x[:8], y[:8], 0, 1)
	if x[0] != float32(body[cut]) {
		t.Error("the validation split does not start where training ends")
	}

	// A directory: its files in name order, hidden ones and subdirectories left out.
	writeFile(t, p("dir/b.txt"), []byte("second "))
	writeFile(t, p("dir/a.txt"), []byte("first "))
	writeFile(t, p("dir/.hidden"), []byte("\xff"))
	writeFile(t, p("dir/sub/c.txt"), []byte("\xff"))
	text, err := ReadText(p("dir"))
	if err != nil || string(text) != "first second " {
		t.Fatalf("ReadText(dir) = %q, %v", text, err)
	}

	writeFile(t, p("latin1.txt"), []byte("caf\xe9 au lait"))
	_, _, err = TextSource{Path: p("latin1.txt"), ValFraction: 0.1}.Load(Options{Context: 2})
	wantKeyError(t, err, "dataset.path", "latin1.txt", "not UTF-8", "offset 3", "iconv")
	writeFile(t, p("dir2/ok.txt"), []byte("fine"))
	writeFile(t, p("dir2/zz.bin"), []byte{0x80, 0x81})
	_, err = ReadText(p("dir2"))
	wantKeyError(t, err, "dataset.path", "zz.bin", "offset 0")
	_, _, err = TextSource{Path: p("nope.txt"), ValFraction: 0.1}.Load(Options{Context: 2})
	wantKeyError(t, err, "dataset.path", "nope.txt does not exist")
	_, _, err = TextSource{Path: p("one.txt"), ValFraction: 0.1}.Load(Options{Context: 400})
	wantKeyError(t, err, "dataset.path", "context", "longer than the data")
	_, _, err = TextSource{Path: p("one.txt"), ValFraction: 0.1}.Load(Options{})
	wantKeyError(t, err, "model.input", "[t]")
	if err := os.Mkdir(p("empty"), 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = ReadText(p("empty"))
	wantKeyError(t, err, "dataset.path", "no files")
}

func TestBibleSource(t *testing.T) {
	if _, err := exec.LookPath(BibleCommand); err != nil {
		testenv.Missing(t, "the bible program is not installed (apt-get install "+BiblePackages+")")
	}
	train, val, err := BibleSource{}.Load(Options{Context: 128})
	if err != nil {
		t.Fatal(err)
	}
	total := (train.N*128 + 1) + len(val.U8)
	if len(train.U8)+len(val.U8) != 4404412 || total > 4404412 {
		t.Fatalf("King James text of %d+%d bytes, want 4404412", len(train.U8), len(val.U8))
	}
	if !strings.HasPrefix(string(train.U8), "Ge1:1 In the beginning God created the heaven and the earth.") {
		t.Errorf("text starts %q", train.U8[:80])
	}
	// Without the program, the error says how to install it or what else to pass.
	t.Setenv("PATH", t.TempDir())
	_, _, err = BibleSource{}.Load(Options{Context: 128})
	if !errors.Is(err, ErrBibleNotFound) || !IsNotFound(err) || !strings.Contains(err.Error(), "apt-get install bible-kjv bible-kjv-text") || !strings.Contains(err.Error(), "--data FILE") {
		t.Errorf("no bible: %v", err)
	}
}

// A spec submitted over the API names files under the data root only:
// relative paths resolve against it, and neither `..` nor a symlink leads
// out of it.
func TestResolveUnder(t *testing.T) {
	root := t.TempDir()
	outside := t.TempDir()
	writeFile(t, filepath.Join(root, "data/x.npy"), []byte("x"))
	writeFile(t, filepath.Join(outside, "secret.npy"), []byte("s"))
	if err := os.Symlink(filepath.Join(outside, "secret.npy"), filepath.Join(root, "data/link.npy")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(root, "data/x.npy"), filepath.Join(root, "inside-link.npy")); err != nil {
		t.Fatal(err)
	}
	realRoot, _ := filepath.EvalSymlinks(root)
	spec := func(x string) Spec {
		return Spec{Type: TypeNPY, TrainX: x, TrainY: "data/x.npy", TestX: "data/x.npy", TestY: "data/x.npy"}
	}
	s := spec("inside-link.npy")
	if err := s.ResolveUnder(root); err != nil {
		t.Fatal(err)
	}
	if s.TrainX != filepath.Join(realRoot, "data/x.npy") || s.TestY != filepath.Join(realRoot, "data/x.npy") {
		t.Errorf("resolved to %+v", s)
	}
	abs := spec(filepath.Join(root, "data/x.npy"))
	if err := abs.ResolveUnder(root); err != nil {
		t.Errorf("an absolute path under the root: %v", err)
	}
	for x, msg := range map[string]string{
		"../" + filepath.Base(outside) + "/secret.npy": "outside the coordinator's data root",
		"data/../../etc/passwd":                        "outside the coordinator's data root",
		filepath.Join(outside, "secret.npy"):           "outside the coordinator's data root",
		"data/link.npy":                                "through a symlink",
		"data/missing.npy":                             "does not exist",
	} {
		s := spec(x)
		wantKeyError(t, s.ResolveUnder(root), "dataset.train_x", msg)
	}
	b := Builtin(MNIST)
	if err := b.ResolveUnder(root); err != nil {
		t.Errorf("a built-in name: %v", err)
	}
}
