package dataset

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A jsonl task as a data set (`{type: task, name: jsonl, path: F}`): the
// file's problems, each once, in its order, the last val_fraction of them
// held out; a file of one problem, or none readable, is refused naming
// dataset.path.
func TestJSONLTaskDataSet(t *testing.T) {
	dir := t.TempDir()
	var lines []string
	for i := range 10 {
		lines = append(lines, fmt.Sprintf(`{"prompt": "q%d=", "answer": "a%d"}`, i, i))
	}
	path := filepath.Join(dir, "qa.jsonl")
	if err := os.WriteFile(path, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	spec := Spec{Type: TypeTask, Task: "jsonl", Path: path, ValFraction: 0.2}
	if err := spec.Validate(); err != nil {
		t.Fatal(err)
	}
	train, val, err := Load(spec, Options{Context: 8})
	if err != nil {
		t.Fatal(err)
	}
	if got, want := string(train.U8), "q0=a0\nq1=a1\nq2=a2\nq3=a3\nq4=a4\nq5=a5\nq6=a6\nq7=a7\n"; got != want {
		t.Errorf("training text %q, want %q", got, want)
	}
	if got, want := string(val.U8), "q8=a8\nq9=a9\n"; got != want {
		t.Errorf("held-out text %q, want %q", got, want)
	}

	// With examples, problems are drawn from the lines (as an RL job's
	// evaluation text is), the same for the same seed.
	drawn := Spec{Type: TypeTask, Task: "jsonl", Path: path, Examples: 100, TaskSeed: 7, ValFraction: 0.1}
	a, _, err := Load(drawn, Options{Context: 8})
	if err != nil {
		t.Fatal(err)
	}
	b, _, _ := Load(drawn, Options{Context: 8})
	if string(a.U8) != string(b.U8) || strings.Count(string(a.U8), "\n") != 90 || !strings.Contains(string(a.U8), "q3=a3\n") {
		t.Errorf("drawn text: %q", a.U8)
	}

	one := filepath.Join(dir, "one.jsonl")
	os.WriteFile(one, []byte(lines[0]+"\n"), 0o644)
	bad := filepath.Join(dir, "bad.jsonl")
	os.WriteFile(bad, []byte(lines[0]+"\n{\"prompt\": 3}\n"), 0o644)
	for file, words := range map[string]string{
		one:                        "at least 2",
		bad:                        "line 2",
		filepath.Join(dir, "none"): "does not exist",
	} {
		_, _, err := Load(Spec{Type: TypeTask, Task: "jsonl", Path: file, ValFraction: 0.2}, Options{Context: 8})
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key != "dataset.path" || !strings.Contains(err.Error(), words) {
			t.Errorf("%s: %v; want an error on dataset.path mentioning %q", filepath.Base(file), err, words)
		}
	}
}
