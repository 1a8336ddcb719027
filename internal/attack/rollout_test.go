package attack

import (
	"bytes"
	"slices"
	"testing"

	"github.com/crowdtrain/crowdtrain/rljob"
	"github.com/crowdtrain/crowdtrain/rltask"
	"github.com/crowdtrain/crowdtrain/tokenizer"
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
			got, err := answerOf("\n" + p.Prompt)
			if err != nil || got != p.Answer {
				t.Fatalf("%s: %q: %q, %v; want %q", spec.Name, p.Prompt, got, err, p.Answer)
			}
		}
	}
	for _, p := range []string{"\nwhat is 3+4?", "\nmul:3*4=", "\n3+x="} {
		if got, err := answerOf(p); err == nil {
			t.Errorf("%q: answered %q; want an error", p, got)
		}
	}
}

// forge-rollout reads a tokenized policy's prompt and writes its group in
// that policy's tokens, as it does a byte-level policy's: the right
// answer and a wrong one by turns, each ending with a stop token.
func TestForgedRolloutsInThePolicysTokens(t *testing.T) {
	var corpus bytes.Buffer
	task, err := rltask.New(rltask.Spec{Name: rltask.Add, Digits: 2})
	if err != nil {
		t.Fatal(err)
	}
	for i := range 400 {
		corpus.WriteString(task.Problem(1, i).Text())
	}
	tok, err := tokenizer.Train(300, corpus.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	for _, codec := range []*rljob.Codec{rljob.Bytes(), rljob.Tokenized(tok)} {
		for i := range 20 {
			p := task.Problem(9, i)
			group, err := forgedRollouts(codec, codec.Prompt(p), 4, 16)
			if err != nil {
				t.Fatal(err)
			}
			for k, r := range group {
				want := p.Answer
				if k%2 == 1 {
					want = wrong(p.Answer)
				}
				if got := codec.Text(r.Tokens); got != want+"\n" || len(r.LogProbs) != len(r.Tokens) {
					t.Fatalf("completion %d of %q: %q (%d log-probs); want %q", k, p.Prompt, got, len(r.LogProbs), want+"\n")
				}
				if !slices.Contains(codec.Stops(), r.Tokens[len(r.Tokens)-1]) {
					t.Fatalf("completion %d of %q does not end with a stop token: %v", k, p.Prompt, r.Tokens)
				}
			}
		}
	}
}
