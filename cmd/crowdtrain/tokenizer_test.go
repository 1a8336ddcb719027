package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/internal/testenv"
	"github.com/crowdtrain/crowdtrain/tokenizer"
)

// runWithStdin runs the command in process with input on stdin.
func runWithStdin(t *testing.T, input string, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	saved := stdin
	stdin = strings.NewReader(input)
	defer func() { stdin = saved }()
	return runCmd(t, context.Background(), args...)
}

// writeGoTree writes a small tree of Go files (and a binary file the glob
// leaves out) and returns its directory.
func writeGoTree(t *testing.T) string {
	dir := t.TempDir()
	for i := range 30 {
		p := filepath.Join(dir, fmt.Sprintf("pkg%d", i%4), fmt.Sprintf("f%d.go", i))
		os.MkdirAll(filepath.Dir(p), 0o755)
		src := fmt.Sprintf("package pkg%d\n\nimport \"fmt\"\n\n// F%d prints its number.\nfunc F%d() {\n\tfor i := 0; i < %d; i++ {\n\t\tfmt.Println(\"value\", i)\n\t}\n}\n", i%4, i, i, i*7)
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	os.WriteFile(filepath.Join(dir, "logo.png"), []byte("\x89PNG\r\n\x1a\n\x00\x00"), 0o644)
	return dir
}

// train, encode and decode, as a user runs them: the file trains from a
// tree by a glob, encode prints one id a line, decode gives the text back.
func TestTokenizerCommands(t *testing.T) {
	dir := writeGoTree(t)
	out := filepath.Join(t.TempDir(), "go.bpe")
	code, stdout, stderr := runCmd(t, context.Background(), "tokenizer", "train", "--data", dir, "--glob", "**/*.go", "--vocab", "300", "--val-fraction", "0.1", "--out", out)
	if code != 0 {
		t.Fatalf("train: exit %d\n%s", code, stderr)
	}
	if !strings.Contains(stdout, "300 tokens (44 merges)") || !strings.Contains(stdout, "training files") || !strings.Contains(stdout, out) {
		t.Errorf("train printed %q", stdout)
	}
	tok, err := tokenizer.Load(out)
	if err != nil || tok.VocabSize() != 300 {
		t.Fatalf("the file: %v", err)
	}
	// The same data writes the same file.
	again := filepath.Join(t.TempDir(), "again.bpe")
	runCmd(t, context.Background(), "tokenizer", "train", "--data", dir, "--glob", "**/*.go", "--vocab", "300", "--val-fraction", "0.1", "--out", again)
	a, _ := os.ReadFile(out)
	b, _ := os.ReadFile(again)
	if string(a) != string(b) {
		t.Error("training twice on the same data wrote different files")
	}

	text := "func main() {\n\tfmt.Println(\"héllo, 世界\")\n}\n\xff"
	code, ids, stderr := runWithStdin(t, text, "tokenizer", "encode", "--tokenizer", out)
	if code != 0 {
		t.Fatalf("encode: exit %d\n%s", code, stderr)
	}
	lines := strings.Split(strings.TrimSuffix(ids, "\n"), "\n")
	if len(lines) >= len(text) || len(lines) < 5 {
		t.Fatalf("encode printed %d ids for %d bytes:\n%s", len(lines), len(text), ids)
	}
	code, back, stderr := runWithStdin(t, ids, "tokenizer", "decode", "--tokenizer", out)
	if code != 0 || back != text {
		t.Fatalf("decode: exit %d, %q (want %q)\n%s", code, back, text, stderr)
	}

	// Bad input: exit 2, saying what was wrong.
	for _, c := range []struct {
		input string
		args  []string
		want  string
	}{
		{"", []string{"tokenizer"}, "want a subcommand"},
		{"", []string{"tokenizer", "split"}, `unknown subcommand "split"`},
		{"", []string{"tokenizer", "train", "--data", dir, "--vocab", "100", "--out", out}, "--vocab 100"},
		{"", []string{"tokenizer", "train", "--data", dir, "--out", filepath.Join(t.TempDir(), "x")}, "logo.png"},
		{"", []string{"tokenizer", "train", "--data", dir, "--glob", "**/*.rs", "--out", filepath.Join(t.TempDir(), "x")}, `"**/*.rs" matches no file`},
		{"", []string{"tokenizer", "train", "--data", filepath.Join(dir, "nope"), "--out", out}, "nope"},
		{"", []string{"tokenizer", "train", "--data", "mnist", "--out", out}, "mnist is not text"},
		{"", []string{"tokenizer", "encode", "--tokenizer", filepath.Join(dir, "pkg0", "f0.go")}, "f0.go, line 1: does not start with \"crowdtrain-bpe\""},
		{"12\n300\n", []string{"tokenizer", "decode", "--tokenizer", out}, "stdin line 2: \"300\" is not a token id"},
		{"12\nabc\n", []string{"tokenizer", "decode", "--tokenizer", out}, "stdin line 2: \"abc\""},
		{strings.Repeat("1", 70000), []string{"tokenizer", "decode", "--tokenizer", out}, "longer than 64 KiB"},
	} {
		code, _, stderr := runWithStdin(t, c.input, c.args...)
		if code != 2 || !strings.Contains(stderr, c.want) {
			t.Errorf("%v: exit %d, stderr %q; want 2 and %q", c.args, code, stderr, c.want)
		}
	}
}

// A job spec's text data set, and go-source, as --data.
func TestTokenizerTrainFromSpec(t *testing.T) {
	dir := writeGoTree(t)
	spec := filepath.Join(dir, "gpt.yaml")
	os.WriteFile(spec, []byte("name: gpt\nmodel: charlm-tiny\ndataset: {type: text, path: ., glob: \"**/*.go\", val_fraction: 0.2}\n"), 0o644)
	out := filepath.Join(t.TempDir(), "spec.bpe")
	code, stdout, stderr := runCmd(t, context.Background(), "tokenizer", "train", "--data", spec, "--vocab", "280", "--out", out)
	if code != 0 || !strings.Contains(stdout, "glob=**/*.go") {
		t.Fatalf("train --data %s: exit %d\n%s%s", spec, code, stdout, stderr)
	}
	code, _, stderr = runCmd(t, context.Background(), "tokenizer", "train", "--data", spec, "--glob", "*.go", "--out", out)
	if code != 2 || !strings.Contains(stderr, "says its own") {
		t.Errorf("--glob with a spec file: exit %d, %s", code, stderr)
	}
	// go-source from a tree given by $CROWDTRAIN_GO_SOURCE.
	t.Setenv("CROWDTRAIN_GO_SOURCE", dir)
	code, stdout, stderr = runCmd(t, context.Background(), "tokenizer", "train", "--data", "go-source", "--vocab", "280", "--out", out)
	if code != 0 || !strings.Contains(stdout, "go-source: ") {
		t.Fatalf("train --data go-source: exit %d\n%s%s", code, stdout, stderr)
	}
}

// The built binary, encode piped into decode through real processes.
func TestTokenizerPipe(t *testing.T) {
	testenv.Long(t, "builds the binary and pipes two processes")
	bin := crowdtrainBinary(t)
	dir := writeGoTree(t)
	out := filepath.Join(t.TempDir(), "go.bpe")
	if b, err := exec.Command(bin, "tokenizer", "train", "--data", dir, "--glob", "**/*.go", "--vocab", "290", "--out", out).CombinedOutput(); err != nil {
		t.Fatalf("train: %v\n%s", err, b)
	}
	src, err := os.ReadFile(filepath.Join(dir, "pkg1", "f5.go"))
	if err != nil {
		t.Fatal(err)
	}
	enc := exec.Command(bin, "tokenizer", "encode", "--tokenizer", out)
	dec := exec.Command(bin, "tokenizer", "decode", "--tokenizer", out)
	enc.Stdin = strings.NewReader(string(src))
	pipe, err := enc.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	dec.Stdin = pipe
	var got strings.Builder
	dec.Stdout = &got
	if err := enc.Start(); err != nil {
		t.Fatal(err)
	}
	if err := dec.Run(); err != nil {
		t.Fatal(err)
	}
	if err := enc.Wait(); err != nil {
		t.Fatal(err)
	}
	if got.String() != string(src) {
		t.Fatalf("encode | decode gave %q, want %q", got.String(), src)
	}
}
