package jobspec

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/dataset"
	"github.com/crowdtrain/crowdtrain/rltask"
	"github.com/crowdtrain/crowdtrain/tokenizer"
)

// A text job on a task data set loads its problems as training text: the
// first window the model trains on is the first problems written out, the
// validation split is the last problems, and a BPE tokenizer learnt from
// the training docs encodes the same text.
func TestTaskDatasetSpecLoadsItsProblems(t *testing.T) {
	s, err := Parse([]byte("name: sft\nmodel: charlm-tiny\ndataset: {type: task, name: add, digits: 2, examples: 200, seed: 5}\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := dataset.Spec{Type: dataset.TypeTask, Task: "add", Digits: 2, Examples: 200, TaskSeed: 5, ValFraction: dataset.DefaultValFraction}
	if s.Dataset != want {
		t.Fatalf("dataset %+v, want %+v", s.Dataset, want)
	}
	b, _ := json.Marshal(s)
	var back Spec
	if err := json.Unmarshal(b, &back); err != nil || back.Dataset != s.Dataset {
		t.Fatalf("stored as %s, read back %+v (%v)", b, back.Dataset, err)
	}

	task, _ := rltask.New(rltask.Spec{Name: rltask.Add, Digits: 2})
	var trainText, valText string
	for i := range 190 {
		trainText += task.Problem(5, i).Text()
	}
	for i := 190; i < 200; i++ {
		valText += task.Problem(5, i).Text()
	}
	ctx := s.Model.Input[0]
	train, val, err := dataset.Load(s.Dataset, dataset.Options{Context: ctx})
	if err != nil {
		t.Fatal(err)
	}
	if train.N != (len(trainText)-1)/ctx || val.N != (len(valText)-1)/ctx {
		t.Fatalf("%d training and %d validation windows, want %d and %d", train.N, val.N, (len(trainText)-1)/ctx, (len(valText)-1)/ctx)
	}
	x := make([]float32, ctx)
	y := make([]int32, ctx)
	for _, i := range []int{0, 1, train.N - 1} {
		train.FillExample(x, y, i)
		window := trainText[i*ctx : i*ctx+ctx+1]
		for p := range ctx {
			if x[p] != float32(window[p]) || y[p] != int32(window[p+1]) {
				t.Fatalf("training window %d: position %d reads %v→%d, want %q→%q", i, p, x[p], y[p], window[p], window[p+1])
			}
		}
	}
	val.FillExample(x, y, 0)
	if got := string(bytesOf(x)); got != valText[:ctx] {
		t.Fatalf("first validation window %q, want %q", got, valText[:ctx])
	}

	docs, _, err := dataset.TrainingDocs(s.Dataset)
	if err != nil || len(docs) != 1 || string(docs[0]) != trainText {
		t.Fatalf("training docs: %d docs (%v), want the training problems' text", len(docs), err)
	}
	tok, err := tokenizer.Train(300, docs...)
	if err != nil {
		t.Fatal(err)
	}
	trainTok, _, err := dataset.Load(s.Dataset, dataset.Options{Context: ctx, Tokenizer: tok})
	if err != nil {
		t.Fatal(err)
	}
	ids := tok.Encode([]byte(trainText))
	if trainTok.Elem != dataset.Tokens16 || trainTok.N != (len(ids)-1)/ctx {
		t.Fatalf("tokenized: %s with %d windows, want %d windows of token ids", trainTok.Elem, trainTok.N, (len(ids)-1)/ctx)
	}
	trainTok.FillExample(x, y, 1)
	for p := range ctx {
		if x[p] != float32(ids[ctx+p]) || y[p] != ids[ctx+p+1] {
			t.Fatalf("tokenized window 1, position %d: %v→%d, want %d→%d", p, x[p], y[p], ids[ctx+p], ids[ctx+p+1])
		}
	}
}

func bytesOf(x []float32) []byte {
	b := make([]byte, len(x))
	for i, v := range x {
		b[i] = byte(v)
	}
	return b
}

func TestTaskDatasetDefaultsAndErrors(t *testing.T) {
	s, err := Parse([]byte("name: j\nmodel: charlm-tiny\ndataset: {type: task, name: sort, length: 6}\n"))
	if err != nil {
		t.Fatal(err)
	}
	if d := s.Dataset; d.Examples != dataset.DefaultTaskExamples || d.ValFraction != dataset.DefaultValFraction || d.TaskSeed != 0 {
		t.Errorf("defaults: %+v", d)
	}
	doc, err := Parse([]byte(docsYAML(t, "name: sft-add\n")))
	if err != nil || doc.Dataset.Task != "add" || doc.Dataset.Examples != 20000 {
		t.Errorf("docs/JOBS.md's sft-add: %+v, %v", doc.Dataset, err)
	}
	for _, c := range []struct{ yaml, key, msg string }{
		{"{type: task, name: mul, digits: 2}", "dataset.name", `"mul" is not a task (want add, reverse, sort, jsonl)`},
		{"{type: task, digits: 2}", "dataset.name", `"" is not a task`},
		{"{type: task, name: add}", "dataset.digits", "digits in 1..18"},
		{"{type: task, name: add, digits: 2, length: 4}", "dataset.length", "not a key of task add"},
		{"{type: task, name: reverse, length: 0}", "dataset.length", "length in 1..256"},
		{"{type: task, name: reverse, length: 300}", "dataset.length", "got 300"},
		{"{type: task, name: sort, length: x}", "dataset.length", "x"},
		{"{type: task, name: add, digits: 2, examples: 0}", "dataset.examples", "at least 2"},
		{"{type: task, name: add, digits: 2, examples: 1}", "dataset.examples", "2..1000000"},
		{"{type: task, name: add, digits: 2, examples: 2000000}", "dataset.examples", "got 2000000"},
		{"{type: task, name: add, digits: 2, seed: -1}", "dataset.seed", "-1"},
		{"{type: task, name: add, digits: 2, val_fraction: 0.7}", "dataset.val_fraction", "(0, 0.5]"},
		{"{type: task, name: add, digits: 2, path: x}", "dataset.path", "not a key of task add"},
		{"{type: task, name: jsonl}", "dataset.path", "needs path"},
		{"{type: task, name: jsonl, path: x.jsonl, examples: 1}", "dataset.examples", "2..1000000"},
		{"{type: task, name: jsonl, path: x.jsonl, seed: 3}", "dataset.seed", "give examples or remove seed"},
		{"{type: task, name: [add]}", "dataset.name", "name of a task"},
		{"{type: text, path: x, name: add}", "dataset.name", "unknown key"},
	} {
		_, err := Parse([]byte("name: j\nmodel: charlm-tiny\ndataset: " + c.yaml + "\n"))
		var se *Error
		if !errors.As(err, &se) || se.Key != c.key || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v; want key %s mentioning %q", c.yaml, err, c.key, c.msg)
		}
	}
}
