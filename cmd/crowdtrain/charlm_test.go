package main

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/store"
)

// corpus is English-like text no test has trained on: sentences drawn
// from a small grammar, so a small model learns it fast.
func corpus(n int) string {
	subj := []string{"the farmer", "a shepherd", "the king", "my brother", "the old woman", "a child"}
	verb := []string{"walked to", "looked at", "spoke of", "went down to", "came from", "dreamed of"}
	obj := []string{"the river", "the city", "the mountain", "a field of wheat", "the sea", "the gate"}
	var b strings.Builder
	for i := 0; b.Len() < n; i++ {
		fmt.Fprintf(&b, "%s %s %s. ", subj[(i*7)%len(subj)], verb[(i*5+i/3)%len(verb)], obj[(i*11+i/7)%len(obj)])
		if i%4 == 3 {
			b.WriteString("\n")
		}
	}
	return b.String()
}

// A text spec file trains a small transformer on a text file: the job
// reports loss and bits per character on held-out windows, and its loss
// falls far below chance (ln 256 = 5.55 nats).
func TestTextSpecTrainsATransformer(t *testing.T) {
	testenv.Long(t, "trains a text job end to end")
	dir := t.TempDir()
	writeTestFile(t, filepath.Join(dir, "text", "a.txt"), []byte(corpus(60_000)))
	writeTestFile(t, filepath.Join(dir, "text", "b.txt"), []byte(corpus(20_000)))
	spec := filepath.Join(dir, "tiny.yaml")
	writeTestFile(t, spec, []byte(`name: tiny-text
dataset: {type: text, path: text, val_fraction: 0.1}
model: charlm-tiny
outer_optimizer: {type: adamw, lr: 0.003, clip_norm: 1}
batch_size: 16
shard_size: 200
eval_every: 40
target_loss: 0.7
max_epochs: 20
`))
	addr := freeAddr(t)
	start := time.Now()
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", spec, "--local-workers", "2", "--progress", "2s")
	v := waitJob(t, addr, 4*time.Minute, "the text job to finish", ended)
	if v.Eval == nil {
		t.Fatalf("no evaluation; log:\n%s", srv.logText())
	}
	t.Logf("%s: %s after %s: loss %.4f nats, %.4f bits/char at version %d, %d windows (%s)",
		v.Name, v.State, time.Since(start).Round(time.Second), v.Eval.Loss, v.Eval.BitsPerChar, v.Version, v.ExamplesSeen, v.Reason)
	if v.State != coordinator.StateDone || v.Eval.Loss > 0.7 {
		t.Fatalf("ended %s (%s) at loss %.4f; want done at <= 0.7; log:\n%s", v.State, v.Reason, v.Eval.Loss, srv.logText())
	}
	if math.Abs(v.Eval.BitsPerChar-v.Eval.Loss/math.Ln2) > 1e-9 {
		t.Errorf("bits_per_char %v is not loss/ln 2 = %v", v.Eval.BitsPerChar, v.Eval.Loss/math.Ln2)
	}
	// The evaluations of a text job show a sample of the model: after this
	// much training it writes the corpus's words.
	sample := waitJob(t, addr, 30*time.Second, "a sample", func(v coordinator.JobView) bool { return v.Eval != nil && v.Eval.Sample != "" }).Eval.Sample
	words := 0
	for _, w := range []string{"the ", "farmer", "shepherd", "king", "river", "city", "walked", "spoke"} {
		words += strings.Count(sample, w)
	}
	t.Logf("sample: %q", sample)
	if words < 3 {
		t.Errorf("the sample %q has %d words of the corpus, want at least 3", sample, words)
	}
	if v.Spec.Dataset.Path != filepath.Join(dir, "text") {
		t.Errorf("dataset path %q, want the directory beside the spec file", v.Spec.Dataset.Path)
	}
}

// `serve --job charlm --data FILE` trains the built-in transformer on that
// file: the job names it, and the workers' results are accepted.
func TestServeCharlmWithData(t *testing.T) {
	testenv.Long(t, "starts the charlm job")
	dir := t.TempDir()
	text := filepath.Join(dir, "corpus.txt")
	writeTestFile(t, text, []byte(corpus(100_000)))
	addr := freeAddr(t)
	srv := startProc(t, "serve", "--addr", addr, "--db", "", "--job", "charlm", "--data", text, "--local-workers", "2", "--progress", "2s")
	v := waitJob(t, addr, 2*time.Minute, "charlm to apply updates", func(v coordinator.JobView) bool { return v.UpdatesApplied >= 4 })
	if v.Spec.Dataset.Type != dataset.TypeText || v.Spec.Dataset.Path != text || v.Spec.Model.Input[0] != 128 {
		t.Fatalf("charlm --data %s: dataset %+v, input %v; log:\n%s", text, v.Spec.Dataset, v.Spec.Model.Input, srv.logText())
	}
	// 95% of 100,000 bytes in windows of 128.
	if want := (95_000 - 1) / 128; v.Shards != (want+999)/1000 || v.UpdatesRejected != 0 {
		t.Errorf("%d shards, %d rejected; want %d windows in %d shards, none rejected", v.Shards, v.UpdatesRejected, want, (want+999)/1000)
	}
}

// Without the bible program, `serve --job charlm` says how to install it
// or what to pass instead, exits 2 and creates no database.
func TestServeCharlmWithoutBibleExits2(t *testing.T) {
	t.Setenv("PATH", t.TempDir())
	db := filepath.Join(t.TempDir(), "ct.db")
	code, _, stderr := runCmd(t, context.Background(), "serve", "--addr", "127.0.0.1:0", "--db", db, "--job", "charlm")
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, w := range []string{"apt-get install bible-kjv bible-kjv-text", "--data FILE"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, stderr)
		}
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the database exists (stat: %v)", err)
	}
}

// The King James text loads for charlm when bible is installed (CI
// installs it): 4,404,412 bytes, 95% of them training windows of 128.
func TestCharlmDataIsTheKingJamesText(t *testing.T) {
	if _, err := exec.LookPath(dataset.BibleCommand); err != nil {
		t.Skip("bible is not installed (apt-get install " + dataset.BiblePackages + "); TestBibleSource says so where CI requires it")
	}
	spec, err := jobspec.Load("charlm")
	if err != nil {
		t.Fatal(err)
	}
	opts, err := coordinator.DataOptions(spec)
	if err != nil {
		t.Fatal(err)
	}
	train, test, err := dataset.Load(spec.Dataset, opts)
	if err != nil {
		t.Fatal(err)
	}
	if err := coordinator.CheckData(&spec, train); err != nil {
		t.Fatal(err)
	}
	total := 4404412
	cut := total - int(float64(total)*dataset.DefaultValFraction)
	if train.N != (cut-1)/128 || test.N != (total-cut-1)/128 || train.Classes != 256 {
		t.Fatalf("train %s, validation %s", train.Describe(), test.Describe())
	}
}

// Bad text for charlm exits 2 naming the file and what is wrong, and leaves
// the database as it was.
func TestServeCharlmBadTextExits2(t *testing.T) {
	dir := t.TempDir()
	db := filepath.Join(dir, "ct.db")
	st, err := store.Open(db)
	if err != nil {
		t.Fatal(err)
	}
	st.Close()
	sum := func() [32]byte {
		b, _ := os.ReadFile(db)
		return sha256.Sum256(b)
	}
	before := sum()
	writeTestFile(t, filepath.Join(dir, "latin1.txt"), []byte("na\xefve caf\xe9 "+strings.Repeat("text ", 1000)))
	writeTestFile(t, filepath.Join(dir, "short.txt"), []byte(corpus(2000)))
	for _, c := range []struct {
		data  string
		words []string
	}{
		{"latin1.txt", []string{"dataset.path", "latin1.txt", "not UTF-8", "offset 2", "iconv"}},
		{"short.txt", []string{"dataset.path", "longer than the data", "shorter context"}},
		{"missing.txt", []string{"dataset.path", "missing.txt does not exist"}},
	} {
		code, _, stderr := runCmd(t, context.Background(), "serve", "--addr", "127.0.0.1:0", "--db", db, "--job", "charlm", "--data", filepath.Join(dir, c.data))
		if code != 2 {
			t.Fatalf("--data %s: exit %d, want 2; stderr:\n%s", c.data, code, stderr)
		}
		for _, w := range c.words {
			if !strings.Contains(stderr, w) {
				t.Errorf("--data %s: stderr does not say %q:\n%s", c.data, w, stderr)
			}
		}
		if sum() != before {
			t.Fatalf("--data %s changed the database", c.data)
		}
	}
}

// A job on go-source without the Go source: serve says where it looked and
// what to do, exits 2 and creates no database.
func TestServeGoSourceMissingExits2(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "gpt.yaml")
	os.WriteFile(job, []byte("name: gpt\nmodel: charlm-tiny\ndataset: go-source\n"), 0o644)
	t.Setenv(dataset.EnvGoSource, filepath.Join(dir, "no-such-tree"))
	db := filepath.Join(dir, "ct.db")
	code, _, stderr := runCmd(t, context.Background(), "serve", "--addr", "127.0.0.1:0", "--db", db, "--job", job)
	if code != 2 {
		t.Fatalf("exit %d, want 2; stderr:\n%s", code, stderr)
	}
	for _, w := range []string{"go-source", "$" + dataset.EnvGoSource + "=" + filepath.Join(dir, "no-such-tree"), "apt-get install golang-go", "--data DIR"} {
		if !strings.Contains(stderr, w) {
			t.Errorf("stderr does not say %q:\n%s", w, stderr)
		}
	}
	if _, err := os.Stat(db); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the database exists (stat: %v)", err)
	}
}

// serve --data DIR for a job on go-source reads DIR as go-source reads
// GOROOT/src: its .go files at any depth (here a binary one, refused by
// name), not only the files at its top.
func TestServeGoSourceDataDirKeepsTheGlob(t *testing.T) {
	dir := t.TempDir()
	job := filepath.Join(dir, "gpt.yaml")
	os.WriteFile(job, []byte("name: gpt\nmodel: charlm-tiny\ndataset: go-source\n"), 0o644)
	tree := filepath.Join(dir, "tree")
	os.MkdirAll(filepath.Join(tree, "sub"), 0o755)
	os.WriteFile(filepath.Join(tree, "sub", "a.go"), []byte("package a\n"), 0o644)
	os.WriteFile(filepath.Join(tree, "sub", "b.go"), []byte("package b\x00"), 0o644)
	os.WriteFile(filepath.Join(tree, "sub", "notes.bin"), []byte("\x00\xff"), 0o644)
	code, _, stderr := runCmd(t, context.Background(), "serve", "--addr", "127.0.0.1:0", "--db", "", "--job", job, "--data", tree)
	if code != 2 || !strings.Contains(stderr, filepath.Join(tree, "sub", "b.go")) || !strings.Contains(stderr, "NUL byte") {
		t.Fatalf("exit %d, want 2 naming sub/b.go's NUL byte; stderr:\n%s", code, stderr)
	}
}
