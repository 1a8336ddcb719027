package coordinator_test

import (
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/crowdtrain/crowdtrain/coordinator"
	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/jobspec"
	"github.com/crowdtrain/crowdtrain/store"
	"github.com/crowdtrain/crowdtrain/tokenizer"
	"github.com/crowdtrain/crowdtrain/worker"
	"github.com/crowdtrain/crowdtrain/worker/cpu"
)

// goTree is a tree of this repository's own Go sources of a few packages
// (about 200 KB).
func goTree(t testing.TB) string {
	return testenv.GoSourceTree(t, "..", "tokenizer", "dataset", "jobspec")
}

// gptMiniSpec is gpt-mini on tree, with tokenizer (a YAML value) and any
// further keys.
func gptMiniSpec(t testing.TB, tree, tokenizer, more string) jobspec.Spec {
	t.Helper()
	s, err := jobspec.Parse([]byte(fmt.Sprintf(`name: tok-mini
model: gpt-mini
dataset: {type: text, path: %q, glob: "**/*.go", val_fraction: 0.1}
tokenizer: %s
outer_optimizer: {type: adamw, lr: 0.003, weight_decay: 0.01, clip_norm: 1}
batch_size: 16
%s`, tree, tokenizer, more)))
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func withTextData(cfg *coordinator.Config) { cfg.LoadData = dataset.Load }

// A tokenizer the spec cannot use is a spec error naming the key: a file
// cut short, a file of another vocabulary than the model's embedding, a
// training text too small for the vocabulary asked. A trained one is the
// same every time.
func TestTokenizerKeyIsChecked(t *testing.T) {
	tree := goTree(t)
	dir := t.TempDir()
	docs, _, err := dataset.TrainingDocs(dataset.Spec{Type: dataset.TypeText, Path: tree, Glob: "**/*.go", ValFraction: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	small, err := tokenizer.Train(300, docs...)
	if err != nil {
		t.Fatal(err)
	}
	smallPath := filepath.Join(dir, "small.bpe")
	if err := small.Save(smallPath); err != nil {
		t.Fatal(err)
	}
	whole, _ := os.ReadFile(smallPath)
	cutPath := filepath.Join(dir, "cut.bpe")
	if err := os.WriteFile(cutPath, whole[:len(whole)/2], 0o644); err != nil {
		t.Fatal(err)
	}
	tiny := t.TempDir()
	for i, text := range []string{"package a\n", "package b\n", "package c\n"} {
		os.WriteFile(filepath.Join(tiny, fmt.Sprintf("%d.go", i)), []byte(strings.Repeat(text, 40)), 0o644)
	}
	for _, c := range []struct {
		name, tree, tok string
		key             string
		words           []string
	}{
		{"truncated file", tree, fmt.Sprintf("%q", cutPath), "tokenizer", []string{cutPath}},
		{"vocab mismatch", tree, fmt.Sprintf("%q", smallPath), "tokenizer", []string{"300", "1024"}},
		{"text too small", tiny, "{type: bpe, vocab: 1024}", "tokenizer.vocab", []string{"1024", "lower tokenizer.vocab"}},
	} {
		spec := gptMiniSpec(t, c.tree, c.tok, "")
		err := coordinator.PrepareTokenizer(&spec)
		var se *jobspec.Error
		if !errors.As(err, &se) || se.Key != c.key {
			t.Errorf("%s: %v; want a spec error for %s", c.name, err, c.key)
			continue
		}
		for _, w := range c.words {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: %q does not name %q", c.name, err, w)
			}
		}
	}
	a, b := gptMiniSpec(t, tree, "{type: bpe, vocab: 1024}", ""), gptMiniSpec(t, tree, "{type: bpe, vocab: 1024}", "")
	if err := coordinator.PrepareTokenizer(&a); err != nil {
		t.Fatal(err)
	}
	if err := coordinator.PrepareTokenizer(&b); err != nil {
		t.Fatal(err)
	}
	if a.Tokenizer.Data == "" || a.Tokenizer.Data != b.Tokenizer.Data || a.Tokenizer.Vocab != 1024 {
		t.Fatalf("two trainings on the same text: %d and %d bytes, vocab %d; want the same 1024-token tokenizer", len(a.Tokenizer.Data), len(b.Tokenizer.Data), a.Tokenizer.Vocab)
	}
}

// unigramNats is the held-out text's cross-entropy, in nats per token,
// under the training tokens' frequencies (add-one smoothed): what a model
// that ignores context scores.
func unigramNats(t testing.TB, spec jobspec.Spec) float64 {
	t.Helper()
	tok, err := tokenizer.Read(strings.NewReader(spec.Tokenizer.Data), "job")
	if err != nil {
		t.Fatal(err)
	}
	tree, err := dataset.ReadTextTree(spec.Dataset.Path, spec.Dataset.Glob, spec.Dataset.ValFraction)
	if err != nil {
		t.Fatal(err)
	}
	counts := make([]float64, tok.VocabSize())
	train := tok.Encode(dataset.Text(tree.Train))
	for _, id := range train {
		counts[id]++
	}
	total := float64(len(train) + len(counts))
	var nats float64
	val := tok.Encode(dataset.Text(tree.Val))
	for _, id := range val {
		nats -= math.Log((counts[id] + 1) / total)
	}
	return nats / float64(len(val))
}

// gpt-mini learns tokens: one native worker trains it on a small tree of
// Go source, tokenized by a BPE trained when the job was created, to a
// held-out loss below the unigram baseline; the evaluation reports
// bits_per_byte (not bits_per_char), and a sample is decoded text. The
// worker has a memory budget (work --memory-mb) too small for a batch of
// 16 in one pass, so it trains in micro-batches.
func TestGPTMiniLearnsTokens(t *testing.T) {
	testenv.Long(t, "trains gpt-mini")
	spec := gptMiniSpec(t, goTree(t), "{type: bpe, vocab: 1024}", "eval_every: 10\nmax_epochs: 20\n")
	if err := coordinator.PrepareTokenizer(&spec); err != nil {
		t.Fatal(err)
	}
	spec.TargetLoss = unigramNats(t, spec)
	t.Logf("unigram baseline %.3f nats/token", spec.TargetLoss)
	g := newTestGridWith(t, spec, withTextData)
	var cb *cpu.Backend
	g.addWorker(1, func(b worker.Backend) worker.Backend {
		cb = b.(*cpu.Backend)
		cb.SetMemoryBudget(14 << 20)
		return b
	})
	v := g.waitDone(4 * time.Minute)
	g.close()
	if planned, micro := cb.MemoryPlanned(); micro < 2 || micro >= 16 || planned > 14<<20 {
		t.Errorf("the worker planned %d bytes in passes of %d examples: want micro-batches of a batch of 16 within 14 MB", planned, micro)
	} else {
		t.Logf("trained in micro-batches of %d examples, %.1f MB planned", micro, float64(planned)/(1<<20))
	}
	if v.State != coordinator.StateDone || v.Eval == nil || v.Eval.Loss > spec.TargetLoss {
		t.Fatalf("job ended %s (%s) with eval %+v; want the loss below the unigram baseline %.3f", v.State, v.Reason, v.Eval, spec.TargetLoss)
	}
	b, err := json.Marshal(v.Eval)
	if err != nil {
		t.Fatal(err)
	}
	var ev map[string]any
	json.Unmarshal(b, &ev)
	bpb, ok := ev["bits_per_byte"].(float64)
	if _, byteLevel := ev["bits_per_char"]; !ok || byteLevel {
		t.Fatalf("eval %s: want bits_per_byte and no bits_per_char", b)
	}
	// Tokens of code are 2 to 5 bytes: bits per byte is the loss per token
	// in bits spread over them.
	perToken := v.Eval.Loss / math.Ln2
	if !(bpb > perToken/6 && bpb < perToken/1.5) {
		t.Errorf("bits_per_byte %.3f for %.3f bits per token: want about a third of it", bpb, perToken)
	}
	t.Logf("done at version %d: loss %.3f nats/token, %.3f bits/byte; sample %q", v.Eval.Version, v.Eval.Loss, bpb, v.Eval.Sample)
}

// The tokenizer is stored with the job: a coordinator restarted on the
// same database, with the tokenizer file gone, resumes the job with the
// same tokenizer and decodes its samples the same way; a sample is the
// tokenizer's text, not one byte per token.
func TestTokenizerSurvivesRestart(t *testing.T) {
	tree := goTree(t)
	docs, _, err := dataset.TrainingDocs(dataset.Spec{Type: dataset.TypeText, Path: tree, Glob: "**/*.go", ValFraction: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Train(1024, docs...)
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "go.bpe")
	if err := tok.Save(path); err != nil {
		t.Fatal(err)
	}
	db, err := store.Open(filepath.Join(t.TempDir(), "ct.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	spec := gptMiniSpec(t, tree, fmt.Sprintf("%q", path), "")
	sample := func(g *testGrid) coordinator.Sample {
		code, body := g.call(http.MethodPost, "/api/v1/jobs/"+g.job.ID+"/sample", testAdminToken,
			map[string]any{"prompt": "func (t *Tokenizer) ", "tokens": 40, "temperature": 0, "seed": 1}, nil)
		var s coordinator.Sample
		if code != http.StatusOK || json.Unmarshal(body, &s) != nil {
			t.Fatalf("sample: %d %s", code, body)
		}
		return s
	}
	g := newStoredGridWith(t, db, &spec, withTextData)
	before, stored := sample(g), g.job.Spec.Tokenizer.Data
	if before.Tokens != 40 || len(before.Text) <= before.Tokens {
		t.Fatalf("sample of %d tokens is %d bytes (%q); want the tokenizer's tokens, most longer than a byte", before.Tokens, len(before.Text), before.Text)
	}
	g.close()
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	g2 := newStoredGridWith(t, db, nil, withTextData)
	if g2.job == nil || g2.job.ID != g.job.ID {
		t.Fatalf("job %s not resumed", g.job.ID)
	}
	if g2.job.Spec.Tokenizer == nil || g2.job.Spec.Tokenizer.Data != stored {
		t.Fatal("the resumed job's tokenizer differs from the stored one")
	}
	if after := sample(g2); after.Text != before.Text || after.Version != before.Version {
		t.Fatalf("after the restart the sample at version %d is %q; before, at version %d, %q", after.Version, after.Text, before.Version, before.Text)
	}
}

// A spec submitted over the API names its tokenizer file under the data
// root, as its data: one outside is refused with a 400 for `tokenizer`,
// one inside starts a job whose stored spec holds the tokenizer.
func TestSubmittedTokenizerReadsOnlyUnderTheDataRoot(t *testing.T) {
	root, outside := t.TempDir(), t.TempDir()
	tree := filepath.Join(root, "src")
	if err := os.Rename(goTree(t), tree); err != nil {
		t.Fatal(err)
	}
	docs, _, err := dataset.TrainingDocs(dataset.Spec{Type: dataset.TypeText, Path: tree, Glob: "**/*.go", ValFraction: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Train(1024, docs...)
	if err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{root, outside} {
		if err := tok.Save(filepath.Join(dir, "go.bpe")); err != nil {
			t.Fatal(err)
		}
	}
	g := newTestGridWith(t, quietJob(t), func(c *coordinator.Config) {
		c.DataRoot = root
		c.LoadData = dataset.Load
	})
	submit := func(tokenizer string) (int, []byte) {
		return g.call(http.MethodPost, "/api/v1/jobs", testAdminToken, map[string]string{"spec": `name: mine
model: gpt-mini
dataset: {type: text, path: src, glob: "**/*.go", val_fraction: 0.1}
eval_every: 1000000
tokenizer: ` + tokenizer}, nil)
	}
	code, body := submit(fmt.Sprintf("%q", filepath.Join(outside, "go.bpe")))
	var e struct{ Key, Error string }
	json.Unmarshal(body, &e)
	if code != http.StatusBadRequest || e.Key != "tokenizer" || !strings.Contains(e.Error, "outside the coordinator's data root") {
		t.Fatalf("a tokenizer outside the root: %d %s; want 400 for tokenizer", code, body)
	}
	var views [2]coordinator.JobView
	for i, tk := range []string{"go.bpe", "{type: bpe, vocab: 1024}"} {
		code, body = submit(tk)
		if code != http.StatusCreated || json.Unmarshal(body, &views[i]) != nil {
			t.Fatalf("tokenizer %s under the root: %d %s", tk, code, body)
		}
	}
	realRoot, _ := filepath.EvalSymlinks(root)
	// The view names the tokenizer without its data (the stored spec
	// keeps that).
	if got := views[0].Spec.Tokenizer; got == nil || got.File != filepath.Join(realRoot, "go.bpe") || got.Vocab != 1024 || got.Data != "" {
		t.Fatalf("the job's tokenizer %+v: want the file under the root, of 1024 tokens, its data left out of the view", got)
	}
	if got := views[1].Spec.Tokenizer; got == nil || got.Type != "bpe" || got.Vocab != 1024 || got.Data != "" {
		t.Fatalf("the trained job's tokenizer %+v: want bpe of 1024 tokens, its data left out of the view", got)
	}
}
