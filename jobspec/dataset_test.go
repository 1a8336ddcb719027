package jobspec

import (
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/dataset"
)

// The dataset key takes a built-in name or an object of each type; a
// spec file's relative paths are relative to the file, and a stored spec
// reads back the same.
func TestDatasetForms(t *testing.T) {
	dir := t.TempDir()
	const model = "model: {input: [1, 4, 4], layers: [{type: dense, units: 3}]}\n"
	cases := []struct {
		yaml string
		want dataset.Spec
	}{
		{"dataset: fashion-mnist\n", dataset.Spec{Name: "fashion-mnist"}},
		{"dataset: {type: idx, train_images: a/ti, train_labels: a/tl, test_images: /abs/si, test_labels: sl}\n",
			dataset.Spec{Type: "idx", TrainImages: filepath.Join(dir, "a/ti"), TrainLabels: filepath.Join(dir, "a/tl"), TestImages: "/abs/si", TestLabels: filepath.Join(dir, "sl")}},
		{"dataset:\n  type: npy\n  train_x: x.npy\n  train_y: y.npy\n  test_x: ../tx.npy\n  test_y: ty.npy\n",
			dataset.Spec{Type: "npy", TrainX: filepath.Join(dir, "x.npy"), TrainY: filepath.Join(dir, "y.npy"), TestX: filepath.Join(filepath.Dir(dir), "tx.npy"), TestY: filepath.Join(dir, "ty.npy")}},
		{"dataset: {type: text, path: corpus}\n", dataset.Spec{Type: "text", Path: filepath.Join(dir, "corpus"), ValFraction: 0.05}},
		{"dataset: {type: text, path: corpus.txt, val_fraction: 0.1}\n", dataset.Spec{Type: "text", Path: filepath.Join(dir, "corpus.txt"), ValFraction: 0.1}},
		{"dataset: {type: text, path: src, glob: \"**/*.go\", val_fraction: 0.01}\n", dataset.Spec{Type: "text", Path: filepath.Join(dir, "src"), Glob: "**/*.go", ValFraction: 0.01}},
		{"dataset: go-source\n", dataset.Spec{Name: "go-source"}},
	}
	for i, c := range cases {
		file := filepath.Join(dir, "job.yaml")
		if err := os.WriteFile(file, []byte("name: j\n"+model+c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		s, err := Load(file)
		if err != nil {
			t.Fatalf("case %d: %v", i, err)
		}
		if s.Dataset != c.want {
			t.Errorf("case %d: dataset %+v, want %+v", i, s.Dataset, c.want)
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatal(err)
		}
		var back Spec
		if err := json.Unmarshal(b, &back); err != nil || back.Dataset != s.Dataset {
			t.Errorf("case %d: stored as %s, read back %+v (%v)", i, b, back.Dataset, err)
		}
		if c.want.Name != "" && !strings.Contains(string(b), `"dataset":"`+c.want.Name+`"`) {
			t.Errorf("case %d: a built-in data set is stored as %s, want its name as before", i, b)
		}
	}
	// A spec stored before data set objects existed reads back.
	var old Spec
	if err := json.Unmarshal([]byte(`{"name":"x","dataset":"mnist"}`), &old); err != nil || old.Dataset.Name != "mnist" {
		t.Fatalf("old stored spec: %+v, %v", old.Dataset, err)
	}
}

func TestDatasetErrorsNameTheKey(t *testing.T) {
	const model = "model: {input: [1, 4, 4], layers: [{type: dense, units: 3}]}\n"
	for _, c := range []struct{ yaml, key, msg string }{
		{"dataset: cifar\n", "dataset", "not a built-in"},
		{"dataset: {type: csv, path: x}\n", "dataset.type", `"csv" is not a data set type`},
		{"dataset: {path: x}\n", "dataset.type", "not a data set type"},
		{"dataset: {type: idx, train_images: a, train_labels: b, test_images: c}\n", "dataset.test_labels", "missing"},
		{"dataset: {type: npy, train_x: a, train_y: b, test_x: c, test_y: d, path: e}\n", "dataset.path", "unknown key"},
		{"dataset: {type: text, path: x, val_fraction: 0.9}\n", "dataset.val_fraction", "(0, 0.5]"},
		{"dataset: {type: text, path: x, val_fraction: 0}\n", "dataset.val_fraction", "(0, 0.5]"},
		{"dataset: {type: text, path: x, val_fraction: abc}\n", "dataset.val_fraction", "abc"},
		{"dataset: {type: text, path: [a, b]}\n", "dataset.path", "path of a file"},
		{"dataset: {type: text, path: x, glob: \"\"}\n", "dataset.glob", "a pattern"},
		{"dataset: {type: text, path: x, glob: \"/abs/*.go\"}\n", "dataset.glob", "absolute"},
		{"dataset: {type: idx, train_images: a, train_labels: b, test_images: c, test_labels: d, glob: \"*\"}\n", "dataset.glob", "unknown key"},
		{"dataset: [mnist]\n", "dataset", "built-in name"},
	} {
		_, err := Parse([]byte("name: j\n" + model + c.yaml))
		var se *Error
		if !errors.As(err, &se) || se.Key != c.key || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%q: error %v; want key %s mentioning %q", c.yaml, err, c.key, c.msg)
		}
	}
	// A text model needs its input, the context; files of examples give
	// theirs (the coordinator fills it in from the data).
	_, err := Parse([]byte("name: j\nmodel: [{type: dense, units: 3}]\ndataset: {type: text, path: a}\n"))
	var se *Error
	if !errors.As(err, &se) || se.Key != "model.input" {
		t.Errorf("text without input: %v", err)
	}
	s, err := Parse([]byte("name: j\nmodel: [{type: dense, units: 3}]\ndataset: {type: npy, train_x: a, train_y: b, test_x: c, test_y: d}\n"))
	if err != nil || len(s.Model.Input) != 0 {
		t.Errorf("npy without input: %v, input %v", err, s.Model.Input)
	}
	if got := InputFromData([]int{5}); !slices.Equal(got, []int{1, 1, 5}) {
		t.Errorf("InputFromData([5]) = %v", got)
	}
	if got := InputFromData([]int{4, 6}); !slices.Equal(got, []int{1, 4, 6}) {
		t.Errorf("InputFromData([4 6]) = %v", got)
	}
	if got := InputFromData([]int{3, 4, 6}); !slices.Equal(got, []int{3, 4, 6}) {
		t.Errorf("InputFromData([3 4 6]) = %v", got)
	}
}
