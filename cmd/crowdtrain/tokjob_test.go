//go:build cgo

package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/tokenizer"
)

// A job's tokenizer that cannot be used is bad input: serve --job exits 2
// naming the tokenizer key and what is wrong, before anything starts.
func TestServeRefusesABadTokenizer(t *testing.T) {
	tree := writeGoTree(t)
	dir := t.TempDir()
	docs, _, err := dataset.TrainingDocs(dataset.Spec{Type: dataset.TypeText, Path: tree, Glob: "**/*.go", ValFraction: 0.1})
	if err != nil {
		t.Fatal(err)
	}
	tok, err := tokenizer.Train(300, docs...)
	if err != nil {
		t.Fatal(err)
	}
	if err := tok.Save(filepath.Join(dir, "small.bpe")); err != nil {
		t.Fatal(err)
	}
	whole, err := os.ReadFile(filepath.Join(dir, "small.bpe"))
	if err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(dir, "cut.bpe"), whole[:len(whole)-20], 0o644)
	text := fmt.Sprintf("dataset: {type: text, path: %q, glob: \"**/*.go\", val_fraction: 0.1}\n", tree)
	vocab := strconv.Itoa(tok.VocabSize())
	for _, c := range []struct {
		name, spec string
		words      []string
	}{
		// Relative to the spec file, as data paths are.
		{"truncated", "model: gpt-mini\n" + text + "tokenizer: cut.bpe\n", []string{"tokenizer", "cut.bpe"}},
		{"vocab mismatch", "model: gpt-mini\n" + text + "tokenizer: small.bpe\n", []string{"tokenizer", vocab, "1024"}},
		{"missing file", "model: gpt-mini\n" + text + "tokenizer: none.bpe\n", []string{"tokenizer", "none.bpe"}},
		{"vocab too small", "model: gpt-mini\n" + text + "tokenizer: {type: bpe, vocab: 100}\n", []string{"tokenizer.vocab", "257"}},
		{"model mismatch", "model: charlm-tiny\n" + text + "tokenizer: {type: bpe, vocab: 1024}\n", []string{"tokenizer", "1024", "256"}},
		{"not text", "model: mnist-mlp\ndataset: mnist\ntokenizer: {type: bpe, vocab: 1024}\n", []string{"tokenizer", "text"}},
		{"unknown type", "model: gpt-mini\n" + text + "tokenizer: {type: wordpiece, vocab: 1024}\n", []string{"tokenizer.type", "wordpiece"}},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte("name: tok\n"+c.spec), 0o644); err != nil {
			t.Fatal(err)
		}
		code, _, stderr := runCmd(t, context.Background(), "serve", "--job", path, "--addr", "127.0.0.1:0", "--db", "")
		t.Logf("%s: %s", c.name, strings.TrimSpace(stderr))
		if code != 2 {
			t.Errorf("%s: exit %d, want 2 (stderr %q)", c.name, code, stderr)
			continue
		}
		for _, w := range c.words {
			if !strings.Contains(stderr, w) {
				t.Errorf("%s: stderr %q should mention %q", c.name, stderr, w)
			}
		}
	}
}
