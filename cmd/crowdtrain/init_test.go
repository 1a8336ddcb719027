//go:build cgo

package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
)

// Starting parameters that do not fit the job's model, or an unknown
// job, are bad input: serve --job exits 2 naming the init key and what
// is wrong, and a file that does not fit creates no database.
func TestServeRefusesAnInitThatDoesNotFit(t *testing.T) {
	dir := t.TempDir()
	small, err := nn.NewModel(nn.ModelSpec{Input: []int{1, 28, 28}, Layers: []nn.LayerSpec{{Type: nn.TypeDense, Units: 64}, {Type: nn.TypeReLU}, {Type: nn.TypeDense, Units: 10}}})
	if err != nil {
		t.Fatal(err)
	}
	params := make([]float32, small.NumParams)
	small.Init(params, 1)
	var b bytes.Buffer
	if err := nn.WriteSafetensors(&b, small.Layout, params, nil); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "small.safetensors"), b.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cut.safetensors"), b.Bytes()[:b.Len()/2], 0o644); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name, init string
		words      []string
	}{
		// Relative to the spec file, as data paths are.
		{"other model", "small.safetensors", []string{"init", "small.safetensors", `tensor "0.dense.weight" has shape [64 784], want [256 784]`, `missing tensor "4.dense.weight"`}},
		{"truncated", "cut.safetensors", []string{"init", "cut.safetensors", "safetensors"}},
		{"missing file", "none.safetensors", []string{"init", "none.safetensors", "does not exist"}},
		{"unknown job", "{job: nope}", []string{"init.job", `no job "nope"`}},
	} {
		path := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".yaml")
		if err := os.WriteFile(path, []byte("name: warm\nmodel: mnist-mlp\ninit: "+c.init+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		db := filepath.Join(dir, strings.ReplaceAll(c.name, " ", "-")+".db")
		if c.name == "unknown job" {
			db = "" // a job's id is looked up once the database is open
		}
		code, _, stderr := runCmd(t, context.Background(), "serve", "--job", path, "--addr", "127.0.0.1:0", "--db", db)
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
		if db != "" {
			if _, err := os.Stat(db); !os.IsNotExist(err) {
				t.Errorf("%s: the database %s was created (%v)", c.name, db, err)
			}
		}
	}
}
