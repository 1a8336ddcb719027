package rljob

import (
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/rltask"
)

// Evaluate decodes the same held-out prompts every time, and a prompt
// that leaves no room for an answer is an error, not a zero.
func TestEvaluateHeldOut(t *testing.T) {
	ms, err := nn.Preset("charlm-tiny")
	if err != nil {
		t.Fatal(err)
	}
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, m.NumParams)
	m.Init(p, 1)
	task, _ := rltask.New(rltask.Spec{Name: rltask.Add, Digits: 1})
	a, err := Evaluate(m, p, task, 20, 3)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := Evaluate(m, p, task, 20, 3)
	if a != b || a.Problems != 20 || a.Solved < 0 || a.Solved > 1 || a.Reward != a.Solved {
		t.Errorf("evaluations %+v and %+v; want the same, of 20 problems, solved a share equal to the mean reward", a, b)
	}
	long, _ := rltask.New(rltask.Spec{Name: rltask.Reverse, Length: 40})
	if _, err := Evaluate(m, p, long, 1, 3); err == nil || !strings.Contains(err.Error(), "fills the context") {
		t.Errorf("a prompt longer than the context: %v", err)
	}
}
