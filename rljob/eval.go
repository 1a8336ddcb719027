package rljob

import (
	"fmt"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/rltask"
)

// EvalSeed is the stream of the held-out prompts: problems of another
// stream than any job's training seed picks in practice, the same at
// every evaluation of every job on the task.
const EvalSeed = 0x5eed_e7a1

// DefaultEvalProblems is how many held-out prompts an evaluation decodes.
const DefaultEvalProblems = 200

// Eval is an evaluation of the policy on the held-out prompts.
type Eval struct {
	// Reward is the mean reward of the greedy completions.
	Reward float64
	// Solved is the share of prompts answered exactly right; with the
	// tasks' 1/0 rewards it equals Reward.
	Solved   float64
	Problems int
}

// Evaluate decodes problems 0..n-1 of task's EvalSeed stream greedily
// with params, each up to maxNewTokens tokens (fitting the context) or
// its newline, and scores them with the task's checker; the policy reads
// bytes.
func Evaluate(m *nn.Model, params []float32, task rltask.Task, n, maxNewTokens int) (Eval, error) {
	return EvaluateWith(m, params, task, Bytes(), n, maxNewTokens)
}

// EvaluateWith is Evaluate of a policy whose tokens stand for text as
// codec says.
func EvaluateWith(m *nn.Model, params []float32, task rltask.Task, codec *Codec, n, maxNewTokens int) (Eval, error) {
	d, err := m.NewDecoder()
	if err != nil {
		return Eval{}, fmt.Errorf("evaluate: %w", err)
	}
	var e Eval
	for i := range n {
		p := task.Problem(EvalSeed, i)
		prompt := codec.Prompt(p)
		k := min(maxNewTokens, m.InputSize-len(prompt))
		if k < 1 {
			return Eval{}, fmt.Errorf("evaluate: held-out problem %d's prompt is %d tokens, which fills the context of %d", i, len(prompt), m.InputSize)
		}
		s, err := d.Generate(params, prompt, k, 0, nil, codec.Stops())
		if err != nil {
			return Eval{}, fmt.Errorf("evaluate: %w", err)
		}
		r := rltask.Reward(p, codec.Text(s.Tokens))
		e.Reward += r
		if r == 1 {
			e.Solved++
		}
	}
	e.Problems = n
	if n > 0 {
		e.Reward /= float64(n)
		e.Solved /= float64(n)
	}
	return e, nil
}
