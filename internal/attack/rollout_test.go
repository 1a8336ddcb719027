package attack

import (
	"testing"

	"github.com/crowdtrain/crowdtrain/rltask"
)

// forge-rollout answers every built-in task's prompt right, as the
// task's own problems have it, from the prompt alone; a prompt of no
// built-in task is an error.
func TestAnswerOfSolvesTheBuiltInTasks(t *testing.T) {
	for _, spec := range []rltask.Spec{{Name: rltask.Add, Digits: 1}, {Name: rltask.Add, Digits: 18}, {Name: rltask.Reverse, Length: 7}, {Name: rltask.Sort, Length: 9}} {
		task, err := rltask.New(spec)
		if err != nil {
			t.Fatal(err)
		}
		for i := range 50 {
			p := task.Problem(4, i)
			prompt := []int32{'\n'}
			for _, b := range []byte(p.Prompt) {
				prompt = append(prompt, int32(b))
			}
			got, err := answerOf(prompt)
			if err != nil || got != p.Answer {
				t.Fatalf("%s: %q: %q, %v; want %q", spec.Name, p.Prompt, got, err, p.Answer)
			}
		}
	}
	for _, p := range []string{"\nwhat is 3+4?", "\nmul:3*4=", "\n3+x="} {
		prompt := []int32{}
		for _, b := range []byte(p) {
			prompt = append(prompt, int32(b))
		}
		if got, err := answerOf(prompt); err == nil {
			t.Errorf("%q: answered %q; want an error", p, got)
		}
	}
}
