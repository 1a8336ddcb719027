package dataset

import (
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
	if s.Task == rltask.JSONL {
		return &KeyError{Key: "dataset.name", Problem: "a jsonl task is not a data set: for supervised training write its prompts and answers as a text file (type: text)"}
	}
	if err := s.taskSpec().Validate(); err != nil {
		ke := err.(*rltask.KeyError)
		problem := ke.Problem
		if ke.Key == "name" {
			problem = fmt.Sprintf("%q is not a task (want %s)", s.Task, strings.Join(taskNames(), ", "))
		}
		return &KeyError{Key: "dataset." + ke.Key, Problem: problem}
	}
	if s.Examples < 2 || s.Examples > MaxTaskExamples {
		return &KeyError{Key: "dataset.examples", Problem: fmt.Sprintf("must be in 2..%d (problems written for training and validation; default %d), got %d", MaxTaskExamples, DefaultTaskExamples, s.Examples)}
	}
	return nil
}

// taskNames are the tasks a data set can be made of: the generated ones.
func taskNames() []string {
	var names []string
	for _, n := range rltask.Names {
		if n != rltask.JSONL {
			names = append(names, n)
		}
	}
	return names
}

func (s Spec) taskSpec() rltask.Spec {
	return rltask.Spec{Name: s.Task, Digits: s.Digits, Length: s.Length}
}

// taskString describes a task spec for String.
func (s Spec) taskString() string {
	size := fmt.Sprintf("length=%d", s.Length)
	if s.Task == rltask.Add {
		size = fmt.Sprintf("digits=%d", s.Digits)
	}
	return fmt.Sprintf("name=%s %s examples=%d seed=%d", s.Task, size, s.Examples, s.TaskSeed)
}

func (s Spec) taskSource() (Source, error) {
	task, err := rltask.New(s.taskSpec())
	if err != nil {
		return nil, &KeyError{Key: "dataset", Problem: err.Error()}
	}
	return TaskSource{Task: task, Examples: s.Examples, Seed: s.TaskSeed, ValFraction: s.ValFraction}, nil
}

// TaskSource is a verifiable task's problems as text for supervised
// training: problems 0..Examples-1 of the stream Seed, each written as
// prompt, answer and a newline (rltask.Problem.Text), one after the other.
// The last ValFraction of the problems (at least one) are the validation
// split; both splits are cut into windows as any text is (TextSplits), so
// a window may start inside a problem and hold several.
type TaskSource struct {
	Task        rltask.Task
	Examples    int
	Seed        uint64
	ValFraction float64
}

func (t TaskSource) Load(o Options) (train, val *Set, err error) {
	if o.Context < 1 {
		return nil, nil, &KeyError{Key: "model.input", Problem: fmt.Sprintf("a text data set needs a model input of [t] (the context, e.g. [128]); got a context of %d", o.Context)}
	}
	tr, va := t.Texts()
	return textSets("task-"+t.Task.Name(), "dataset.examples", tr, va, len(tr)+len(va), o)
}

// Texts returns the training and validation texts.
func (t TaskSource) Texts() (train, val []byte) {
	nVal := max(1, int(float64(t.Examples)*t.ValFraction))
	nTrain := t.Examples - nVal
	write := func(from, to int) []byte {
		var b []byte
		for i := from; i < to; i++ {
			b = append(b, t.Task.Problem(t.Seed, i).Text()...)
		}
		return b
	}
	return write(0, nTrain), write(nTrain, t.Examples)
}
