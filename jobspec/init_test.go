package jobspec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// `init` takes a file or {job: ID}; anything else is an error naming the
// key, and a spec file's relative path is relative to the file.
func TestInitKey(t *testing.T) {
	for _, c := range []struct {
		spec string
		want Init
	}{
		{"init: warm.safetensors", Init{File: "warm.safetensors"}},
		{"init: {job: mnist-mlp-0a1b2c3d}", Init{Job: "mnist-mlp-0a1b2c3d"}},
		{`{"name": "x", "model": "mnist-mlp", "init": {"job": "j-1"}}`, Init{Job: "j-1"}},
		{"init: {file: a.safetensors}", Init{File: "a.safetensors"}},
		{"init: {file: a.safetensors, sha256: " + strings.Repeat("0f", 32) + "}", Init{File: "a.safetensors", SHA256: strings.Repeat("0f", 32)}},
	} {
		text := c.spec
		if !strings.HasPrefix(text, "{") {
			text = "name: x\nmodel: mnist-mlp\n" + text
		}
		s, err := Parse([]byte(text))
		if err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if s.Init == nil || *s.Init != c.want {
			t.Errorf("%s: init %+v, want %+v", c.spec, s.Init, c.want)
		}
		// The stored spec keeps it.
		b, _ := json.Marshal(s)
		var back Spec
		if err := json.Unmarshal(b, &back); err != nil || back.Init == nil || *back.Init != c.want {
			t.Errorf("%s: stored and read back as %+v (%v)", c.spec, back.Init, err)
		}
	}
	if s, err := Parse([]byte("name: x\nmodel: mnist-mlp\n")); err != nil || s.Init != nil {
		t.Errorf("no init key: %+v, %v", s.Init, err)
	}
	for _, c := range []struct{ spec, key, says string }{
		{`init: ""`, "init", "safetensors file"},
		{"init: null", "init", "safetensors file"},
		{"init: 3", "init", "safetensors file"},
		{"init: [a, b]", "init", "{job: ID}"},
		{"init: {job: ''}", "init.job", "job's id"},
		{"init: {job: [a]}", "init.job", "job's id"},
		{"init: {model: a.safetensors}", "init.model", "unknown key"},
		{"init: {file: a.safetensors, job: b}", "init", "not both"},
		{"init: {job: b, sha256: " + strings.Repeat("0f", 32) + "}", "init.sha256", "with file"},
		{"init: {file: a.safetensors, sha256: abc}", "init.sha256", "64 digits"},
		{"init: {job: b, version: 3}", "init.version", "export it"},
		{"init: {job: a, job: b}", "init.job", "given twice"},
	} {
		_, err := Parse([]byte("name: x\nmodel: mnist-mlp\n" + c.spec))
		var se *Error
		if !errors.As(err, &se) || se.Key != c.key || !strings.Contains(se.Problem, c.says) {
			t.Errorf("%s: %v; want an error for %s saying %q", c.spec, err, c.key, c.says)
		}
	}
	both := Spec{Init: &Init{File: "a", Job: "b"}}
	if err := both.validateInit(); err == nil || !strings.Contains(err.Error(), "not both") {
		t.Errorf("a stored init with a file and a job: %v", err)
	}

	dir := t.TempDir()
	path := filepath.Join(dir, "warm.yaml")
	if err := os.WriteFile(path, []byte("name: warm\nmodel: mnist-mlp\ninit: models/v9.safetensors\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	s, err := Load(path)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "models", "v9.safetensors"); s.Init == nil || s.Init.File != want {
		t.Errorf("init from a spec file: %+v, want the file %s", s.Init, want)
	}
	// So are an RL job's policy file and jsonl task.
	rlPath := filepath.Join(dir, "rl.yaml")
	if err := os.WriteFile(rlPath, []byte("name: rl\nkind: rl\nmodel: charlm-tiny\npolicy: models/sft.safetensors\ntask: {type: jsonl, path: tasks/qa.jsonl}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	rs, err := Load(rlPath)
	if err != nil {
		t.Fatal(err)
	}
	if want := filepath.Join(dir, "models", "sft.safetensors"); rs.Policy == nil || rs.Policy.File != want {
		t.Errorf("policy from a spec file: %+v, want the file %s", rs.Policy, want)
	}
	if want := filepath.Join(dir, "tasks", "qa.jsonl"); rs.RL == nil || rs.RL.Task.Path != want {
		t.Errorf("task path from a spec file: %+v, want %s", rs.RL, want)
	}
}
