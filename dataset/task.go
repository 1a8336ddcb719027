package dataset

import (
	"errors"
	"fmt"
	"strings"

	"github.com/crowdtrain/crowdtrain/rltask"
)

// Defaults and limits of a task data set's examples.
const (
	DefaultTaskExamples = 10000
	MaxTaskExamples     = 1_000_000
)

// validateTask checks the keys of type task, and that no other type sets
// them.
func (s Spec) validateTask() error {
	if s.Type != TypeTask {
		for _, k := range []struct {
			key string
			set bool
		}{{"name", s.Task != ""}, {"digits", s.Digits != 0}, {"length", s.Length != 0}, {"examples", s.Examples != 0}, {"seed", s.TaskSeed != 0}} {
			if k.set {
				return &KeyError{Key: "dataset." + k.key, Problem: fmt.Sprintf("is a key of type task, not %s", s.Type)}
			}
		}
		return nil
	}
	if s.Task == rltask.JSONL && s.Examples == 0 && s.TaskSeed != 0 {
		// Without examples, the file's problems each once, in its order.
		return &KeyError{Key: "dataset.seed", Problem: "draws examples problems of a jsonl file; without examples its problems are taken each once, in order: give examples or remove seed"}
	}
	if err := s.taskSpec().Validate(); err != nil {
		ke := err.(*rltask.KeyError)
		problem := ke.Problem
		if ke.Key == "name" {
			problem = fmt.Sprintf("%q is not a task (want %s)", s.Task, strings.Join(taskNames(), ", "))
		}
		return &KeyError{Key: "dataset." + ke.Key, Problem: problem}
	}
	if !(s.Task == rltask.JSONL && s.Examples == 0) && (s.Examples < 2 || s.Examples > MaxTaskExamples) {
		return &KeyError{Key: "dataset.examples", Problem: fmt.Sprintf("must be in 2..%d (problems written for training and validation; default %d), got %d", MaxTaskExamples, DefaultTaskExamples, s.Examples)}
	}
	return nil
}

// taskNames are the tasks a data set can be made of.
func taskNames() []string { return rltask.Names }

func (s Spec) taskSpec() rltask.Spec {
	return rltask.Spec{Name: s.Task, Digits: s.Digits, Length: s.Length, Path: s.Path}
}

// taskString describes a task spec for String.
func (s Spec) taskString() string {
	if s.Task == rltask.JSONL {
		return "name=jsonl" // the path is among the files
	}
	size := fmt.Sprintf("length=%d", s.Length)
	if s.Task == rltask.Add {
		size = fmt.Sprintf("digits=%d", s.Digits)
	}
	return fmt.Sprintf("name=%s %s examples=%d seed=%d", s.Task, size, s.Examples, s.TaskSeed)
}

func (s Spec) taskSource() (Source, error) {
	if s.Task == rltask.JSONL {
		return TaskSource{JSONLPath: s.Path, Examples: s.Examples, Seed: s.TaskSeed, ValFraction: s.ValFraction}, nil
	}
	task, err := rltask.New(s.taskSpec())
	if err != nil {
		return nil, &KeyError{Key: "dataset", Problem: err.Error()}
	}
	return TaskSource{Task: task, Examples: s.Examples, Seed: s.TaskSeed, ValFraction: s.ValFraction}, nil
}

// ReadJSONLTask reads a jsonl task file (rltask.ParseJSONL) as the data
// sets read theirs: a regular file only, opened without blocking, at most
// rltask.MaxJSONLBytes. Errors name key, the spec key of the path.
func ReadJSONLTask(key, path string) (*rltask.JSONLTask, error) {
	f, err := openRegular(path)
	if err != nil {
		return nil, rekey(fileError("", path, err, "name a regular file of {\"prompt\": ..., \"answer\": ...} lines"), key)
	}
	defer f.Close()
	t, err := rltask.ReadJSONL(f, path)
	if err != nil {
		problem := err.Error()
		if ke := (*rltask.KeyError)(nil); errors.As(err, &ke) {
			problem = ke.Problem
		}
		return nil, &KeyError{Key: key, Problem: problem, Err: err}
	}
	return t, nil
}

// TaskSource is a verifiable task's problems as text for supervised
// training: problems 0..Examples-1 of the stream Seed, each written as
// prompt, answer and a newline (rltask.Problem.Text), one after the other.
// The last ValFraction of the problems (at least one) are the validation
// split; both splits are cut into windows as any text is (TextSplits), so
// a window may start inside a problem and hold several.
//
// A jsonl task (JSONLPath) draws its Examples problems from its file's
// lines the same way; without Examples it is the file's problems each
// once, in the file's order, the last ValFraction of them (at least one)
// the validation split, so that no held-out problem is trained on.
type TaskSource struct {
	Task        rltask.Task
	Examples    int
	Seed        uint64
	ValFraction float64
	// JSONLPath, when set, is a jsonl task file, read at Load.
	JSONLPath string
	// eachOnce takes Task's problems in order instead of drawing them:
	// a jsonl file's lines without Examples.
	eachOnce bool
}

func (t TaskSource) Load(o Options) (train, val *Set, err error) {
	if o.Context < 1 {
		return nil, nil, &KeyError{Key: "model.input", Problem: fmt.Sprintf("a text data set needs a model input of [t] (the context, e.g. [128]); got a context of %d", o.Context)}
	}
	key := "dataset.examples"
	if t.JSONLPath != "" {
		jt, err := ReadJSONLTask("dataset.path", t.JSONLPath)
		if err != nil {
			return nil, nil, err
		}
		t.Task = jt
		if t.Examples == 0 {
			if len(jt.Problems) < 2 {
				return nil, nil, &KeyError{Key: "dataset.path", Problem: fmt.Sprintf("%s holds %d problem: a data set of its lines needs at least 2 (one to train on, one to hold out)", t.JSONLPath, len(jt.Problems))}
			}
			t.Examples, t.eachOnce, key = len(jt.Problems), true, "dataset.path"
		}
	}
	tr, va := t.Texts()
	return textSets("task-"+t.Task.Name(), key, tr, va, len(tr)+len(va), o)
}

// Texts returns the training and validation texts.
func (t TaskSource) Texts() (train, val []byte) {
	nVal := max(1, int(float64(t.Examples)*t.ValFraction))
	nTrain := t.Examples - nVal
	problem := func(i int) rltask.Problem { return t.Task.Problem(t.Seed, i) }
	if jt, ok := t.Task.(*rltask.JSONLTask); ok && t.eachOnce {
		problem = func(i int) rltask.Problem { return jt.Problems[i] }
	}
	write := func(from, to int) []byte {
		var b []byte
		for i := from; i < to; i++ {
			b = append(b, problem(i).Text()...)
		}
		return b
	}
	return write(0, nTrain), write(nTrain, t.Examples)
}
