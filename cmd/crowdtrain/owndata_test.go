package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/internal/testnpy"
	"github.com/crowdtrain/crowdtrain/store"
)

// writeNPY writes a .npy file of dtype descr and shape holding data, as
// numpy.save does.
func writeNPY(t *testing.T, path, descr string, shape []int, data []byte) {
	t.Helper()
	writeTestFile(t, path, testnpy.Encode(descr, shape, data))
}

func writeTestFile(t *testing.T, path string, b []byte) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// writeIDX writes an unsigned-byte IDX file, gzipped when the name ends
// in .gz.
func writeIDX(t *testing.T, path string, dims []int, data []byte) {
	t.Helper()
	b, err := dataset.EncodeIDX(&dataset.IDX{Dims: dims, Data: data})
	if err != nil {
		t.Fatal(err)
	}
	if strings.HasSuffix(path, ".gz") {
		var buf bytes.Buffer
		zw := gzip.NewWriter(&buf)
		zw.Write(b)
		zw.Close()
		b = buf.Bytes()
	}
	writeTestFile(t, path, b)
}

// blobs is a learnable synthetic task no test has seen: classes points in
// dim features around random centres, with Gaussian noise.
func blobs(rng *rand.Rand, centres [][]float32, n int, noise float64) (x []byte, y []byte) {
	dim := len(centres[0])
	for range n {
		c := rng.IntN(len(centres))
		for d := range dim {
			v := centres[c][d] + float32(rng.NormFloat64()*noise)
			x = binary.LittleEndian.AppendUint32(x, math.Float32bits(v))
		}
		y = binary.LittleEndian.AppendUint64(y, uint64(c))
	}
	return x, y
}

// trainOwnData runs `serve --job spec` with two local workers until the
// job ends, and returns it.
func trainOwnData(t *testing.T, spec string, timeout time.Duration) coordinator.JobView {
	t.Helper()
	addr := freeAddr(t)
	start := time.Now()
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", spec, "--local-workers", "2", "--progress", "2s")
	v := waitJob(t, addr, timeout, "the job to finish", ended)
	acc := 0.0
	if v.Eval != nil {
		acc = v.Eval.Accuracy
	}
	t.Logf("%s: %s after %s: test accuracy %.4f at version %d, %d examples (%s)",
		v.Name, v.State, time.Since(start).Round(time.Second), acc, v.Version, v.ExamplesSeen, v.Reason)
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Accuracy < v.Spec.TargetAccuracy {
		t.Fatalf("%s ended %s (%s) at test accuracy %.4f, want done at >= %.2f; log:\n%s",
			v.Name, v.State, v.Reason, acc, v.Spec.TargetAccuracy, srv.logText())
	}
	return v
}

// NumPy arrays of float32 features and int64 labels, written here and named
// by a spec file with paths relative to it, train with no code change: the
// model's input comes from the data.
func TestOwnNPYDataTrainsFromASpecFile(t *testing.T) {
	testenv.Long(t, "trains a job end to end")
	dir := t.TempDir()
	rng := rand.New(rand.NewPCG(2026, 13))
	const classes, dim = 8, 24
	centres := make([][]float32, classes)
	for c := range centres {
		for range dim {
			centres[c] = append(centres[c], float32(rng.Float64()*2-1))
		}
	}
	x, y := blobs(rng, centres, 4000, 0.6)
	writeNPY(t, filepath.Join(dir, "data/train_x.npy"), "<f4", []int{4000, dim}, x)
	writeNPY(t, filepath.Join(dir, "data/train_y.npy"), "<i8", []int{4000}, y)
	x, y = blobs(rng, centres, 800, 0.6)
	writeNPY(t, filepath.Join(dir, "data/test_x.npy"), "<f4", []int{800, dim}, x)
	writeNPY(t, filepath.Join(dir, "data/test_y.npy"), "<i8", []int{800}, y)
	spec := filepath.Join(dir, "jobs", "blobs.yaml")
	writeTestFile(t, spec, []byte(`name: blobs
dataset:
  type: npy
  train_x: ../data/train_x.npy
  train_y: ../data/train_y.npy
  test_x: ../data/test_x.npy
  test_y: ../data/test_y.npy
model:
  - {type: dense, units: 32}
  - {type: relu}
  - {type: dense, units: 8}
shard_size: 500
eval_every: 20
target_accuracy: 0.95
max_epochs: 30
`))
	v := trainOwnData(t, spec, 3*time.Minute)
	if v.Spec.Dataset.TrainX != filepath.Join(dir, "data/train_x.npy") || !slices.Equal(v.Spec.Model.Input, []int{1, 1, dim}) {
		t.Errorf("job's dataset %+v and input %v; want paths relative to the spec file and the input from the data", v.Spec.Dataset, v.Spec.Model.Input)
	}
}

// An IDX image set no test has seen (MNIST's test images inverted,
// transposed and relabelled, cut 8000/2000, training files gzipped) trains
// from a spec file with no code change.
func TestOwnIDXDataTrainsFromASpecFile(t *testing.T) {
	testenv.Long(t, "trains a job end to end")
	mnist, err := dataset.FindMNIST("")
	if err != nil {
		t.Fatal(err)
	}
	src, err := dataset.LoadIDXPair("src", filepath.Join(mnist, dataset.MNISTTestImages), filepath.Join(mnist, dataset.MNISTTestLabels))
	if err != nil {
		src, err = dataset.LoadIDXPair("src", filepath.Join(mnist, dataset.MNISTTestImages+".gz"), filepath.Join(mnist, dataset.MNISTTestLabels+".gz"))
	}
	if err != nil {
		t.Fatal(err)
	}
	img := make([]byte, len(src.U8))
	lab := make([]byte, src.N)
	for i := range src.N {
		for r := range 28 {
			for c := range 28 {
				img[i*784+r*28+c] = 255 - src.U8[i*784+c*28+r]
			}
		}
		lab[i] = byte((7*src.Labels[i] + 3) % 10)
	}
	dir := t.TempDir()
	writeIDX(t, filepath.Join(dir, "glyphs", "train-img.gz"), []int{8000, 28, 28}, img[:8000*784])
	writeIDX(t, filepath.Join(dir, "glyphs", "train-lab.gz"), []int{8000}, lab[:8000])
	writeIDX(t, filepath.Join(dir, "glyphs", "test-img"), []int{2000, 28, 28}, img[8000*784:])
	writeIDX(t, filepath.Join(dir, "glyphs", "test-lab"), []int{2000}, lab[8000:])
	spec := filepath.Join(dir, "glyphs.json")
	writeTestFile(t, spec, []byte(`{"name": "glyphs",
 "dataset": {"type": "idx", "train_images": "glyphs/train-img.gz", "train_labels": "glyphs/train-lab.gz",
             "test_images": "glyphs/test-img", "test_labels": "glyphs/test-lab"},
 "model": [{"type": "dense", "units": 64}, {"type": "relu"}, {"type": "dense", "units": 10}],
 "shard_size": 500, "eval_every": 25, "target_accuracy": 0.90, "max_epochs": 30}`))
	v := trainOwnData(t, spec, 3*time.Minute)
	if v.Spec.Dataset.Type != dataset.TypeIDX || !slices.Equal(v.Spec.Model.Input, []int{1, 28, 28}) {
		t.Errorf("job's dataset %+v, input %v", v.Spec.Dataset, v.Spec.Model.Input)
	}
}

// Bad data: each case exits 2 before any training starts, says which key
// and file is wrong and what to do, and leaves the database as it was.
func TestServeBadDataExits2AndChangesNothing(t *testing.T) {
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	db := p("ct.db")
	st, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	sum := func() [32]byte {
		b, err := os.ReadFile(db)
		if err != nil {
			t.Fatal(err)
		}
		return sha256.Sum256(b)
	}
	before := sum()
	f32 := make([]byte, 4*6*4)
	writeNPY(t, p("x.npy"), "<f4", []int{6, 4}, f32)
	writeNPY(t, p("y.npy"), "<i8", []int{6}, make([]byte, 8*6))
	writeNPY(t, p("y5.npy"), "<i8", []int{5}, make([]byte, 8*5))
	writeNPY(t, p("yneg.npy"), "<i8", []int{6}, binary.LittleEndian.AppendUint64(make([]byte, 40), math.MaxUint64))
	writeNPY(t, p("y9.npy"), "<i8", []int{6}, binary.LittleEndian.AppendUint64(make([]byte, 40), 8))
	writeTestFile(t, p("notidx"), []byte("label,image\n1,0\n"))
	writeIDX(t, p("img"), []int{3, 2, 2}, make([]byte, 12))
	writeIDX(t, p("lab2"), []int{2}, []byte{0, 1})
	writeIDX(t, p("lab3"), []int{3}, []byte{0, 1, 1})
	npy := func(x, y, extra string) string {
		return fmt.Sprintf("name: bad\ndataset: {type: npy, train_x: %s, train_y: %s, test_x: x.npy, test_y: y.npy}\n%s", x, y, extra)
	}
	const small = "model: [{type: dense, units: 4}]\n"
	cases := []struct {
		name, spec string
		words      []string
	}{
		{"missing file", npy("nope.npy", "y.npy", small), []string{"dataset.train_x", "nope.npy does not exist"}},
		{"not its type", "name: bad\ndataset: {type: idx, train_images: notidx, train_labels: lab3, test_images: img, test_labels: lab3}\n" + small,
			[]string{"dataset.train_images", "notidx", "not an IDX file", "Fix:"}},
		{"count mismatch", "name: bad\ndataset: {type: idx, train_images: img, train_labels: lab2, test_images: img, test_labels: lab3}\n" + small,
			[]string{"dataset.train_labels", "3 images", "2 labels"}},
		{"npy count mismatch", npy("x.npy", "y5.npy", small), []string{"dataset.train_y", "5 labels but the inputs have 6"}},
		{"label out of range", npy("x.npy", "yneg.npy", small), []string{"dataset.train_y", "out of range"}},
		{"input does not fit", npy("x.npy", "y.npy", "model: {input: [1, 28, 28], layers: [{type: dense, units: 4}]}\n"),
			[]string{"model.input", "[1,28,28]", "[4]"}},
		{"output does not fit", npy("x.npy", "y9.npy", small), []string{"model", "4 outputs", "9 classes", "9 units"}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			spec := p(strings.ReplaceAll(c.name, " ", "-") + ".yaml")
			writeTestFile(t, spec, []byte(c.spec))
			code, _, stderr := runCmd(t, context.Background(), "serve", "--addr", "127.0.0.1:0", "--db", db, "--job", spec)
			if code != 2 {
				t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
			}
			for _, w := range c.words {
				if !strings.Contains(stderr, w) {
					t.Errorf("stderr does not say %q:\n%s", w, stderr)
				}
			}
			if sum() != before {
				t.Fatal("the database changed")
			}
		})
	}
}

// A stored job whose data file has gone since: the next start exits 2
// naming the key and file, and does not touch the job.
func TestResumeWithMissingDataExits2(t *testing.T) {
	testenv.Long(t, "starts a coordinator")
	dir := t.TempDir()
	p := func(n string) string { return filepath.Join(dir, n) }
	x, y := blobs(rand.New(rand.NewPCG(1, 1)), [][]float32{{1, 0}, {0, 1}}, 200, 0.1)
	writeNPY(t, p("x.npy"), "<f4", []int{200, 2}, x)
	writeNPY(t, p("y.npy"), "<i8", []int{200}, y)
	spec := p("job.yaml")
	writeTestFile(t, spec, []byte("name: gone\ndataset: {type: npy, train_x: x.npy, train_y: y.npy, test_x: x.npy, test_y: y.npy}\n"+
		"model: [{type: dense, units: 2}]\nshard_size: 100\ntarget_accuracy: 1\neval_every: 1000000\n"))
	db := p("ct.db")
	addr := freeAddr(t)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan int, 1)
	go func() {
		code, _, _ := runCmd(t, ctx, "serve", "--addr", addr, "--db", db, "--job", spec)
		done <- code
	}()
	waitJob(t, addr, 30*time.Second, "the job to start", func(v coordinator.JobView) bool { return v.State == coordinator.StateRunning })
	cancel()
	if code := <-done; code != 0 {
		t.Fatalf("first run exited %d", code)
	}
	if err := os.Remove(p("x.npy")); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, context.Background(), "serve", "--addr", addr, "--db", db, "--job", "mnist-mlp")
	if code != 2 || !strings.Contains(stderr, "dataset.train_x") || !strings.Contains(stderr, "x.npy does not exist") {
		t.Fatalf("exit %d, want 2 naming dataset.train_x and the file; stderr:\n%s", code, stderr)
	}
}
