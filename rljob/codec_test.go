package rljob

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rltask"
	"github.com/crowdtrain/crowdtrain/tokenizer"
)

// sumsTokenizer is a BPE tokenizer trained on two-digit sums and some
// text with newlines inside pieces ("{\n", ")\n\n").
func sumsTokenizer(t *testing.T) *tokenizer.Tokenizer {
	t.Helper()
	task, err := rltask.New(rltask.Spec{Name: rltask.Add, Digits: 2})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	for i := range 3000 {
		b.WriteString(task.Problem(9, i).Text())
	}
	b.WriteString(strings.Repeat("func f() {\n\treturn g(x)\n}\n\n", 2000))
	tok, err := tokenizer.Train(320, []byte(b.String()))
	if err != nil {
		t.Fatal(err)
	}
	return tok
}

// A tokenized policy's RL job: rollout leases carry the prompt in the
// tokenizer's ids and stop at every token that holds a newline; a
// completion is decoded before the task's checker reads it, so the right
// answer in any segmentation scores 1; a completion that goes on after a
// stop token is refused, as a byte-level one is after its newline.
func TestTokenizedPolicy(t *testing.T) {
	tok := sumsTokenizer(t)
	codec := Tokenized(tok)
	for id := range int32(tok.VocabSize()) {
		holds := bytes.IndexByte(tok.Token(id), '\n') >= 0
		if holds != slices.Contains(codec.Stops(), id) {
			t.Fatalf("token %d %q: a stop token %v, want %v (it holds a newline: %v)", id, tok.Token(id), !holds, holds, holds)
		}
	}
	if len(codec.Stops()) < 3 {
		t.Fatalf("stops %v: want the newline and the tokens that hold one with other bytes", codec.Stops())
	}
	j, task := addJob(t, Config{Seed: 3, Codec: codec, MaxNewTokens: 4, Vocab: tok.VocabSize()})
	r, err := j.NextRollout(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	p := task.Problem(3, 0)
	if got := string(mustDecode(t, tok, r.Prompt)); got != "\n"+p.Prompt || !slices.Equal(r.Prompt, tok.Encode([]byte(got))) || !slices.Equal(r.Stop, codec.Stops()) {
		t.Fatalf("rollout prompt %v (%q), stop %v; want %q in the tokenizer's ids, the codec's stops", r.Prompt, got, r.Stop, "\n"+p.Prompt)
	}
	enc := func(s string) protocol.Rollout {
		ids := tok.Encode([]byte(s))
		lp := make([]float32, len(ids))
		for i := range lp {
			lp[i] = -0.5
		}
		return protocol.Rollout{Tokens: ids, LogProbs: lp}
	}
	// The answer as its own token, as bytes one by one, and two wrong.
	var bytewise []int32
	for _, c := range []byte(p.Answer + "\n") {
		bytewise = append(bytewise, int32(c))
	}
	lp := make([]float32, len(bytewise))
	res := &protocol.Result{LeaseID: 1, JobID: "rl", BaseVersion: 0, Examples: 4, Rollouts: []protocol.Rollout{
		enc(p.Answer + "\n"), {Tokens: bytewise, LogProbs: lp}, enc("0\n"), enc("x"),
	}}
	g, err := j.Score(1, 0, res)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(g.Rewards, []float64{1, 1, 0, 0}) {
		t.Errorf("rewards %v of %q as a token, as bytes, %q, %q; want 1 1 0 0", g.Rewards, p.Answer+"\n", "0\n", "x")
	}

	if _, err := j.NextRollout(2, 0); err != nil {
		t.Fatal(err)
	}
	past := enc("\n" + p.Answer)
	past.Tokens = append(tok.Encode([]byte("\n")), tok.Encode([]byte("12"))...)
	past.LogProbs = make([]float32, len(past.Tokens))
	res = &protocol.Result{LeaseID: 2, JobID: "rl", BaseVersion: 0, Examples: 4, Rollouts: []protocol.Rollout{past, enc("1\n"), enc("2\n"), enc("3\n")}}
	if _, err := j.Score(2, 0, res); err == nil || !strings.Contains(err.Error(), "goes on after the newline") {
		t.Errorf("a completion past its stop token: %v; want refused, going on after the newline", err)
	}
}

func mustDecode(t *testing.T, tok *tokenizer.Tokenizer, ids []int32) []byte {
	t.Helper()
	b, err := tok.Decode(ids)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A tokenizer whose newline tokens would not fit a rollout lease's stop
// list is refused when the job is made, not lease by lease at every
// worker.
func TestTooManyStopTokensRefused(t *testing.T) {
	tok := sumsTokenizer(t)
	task, err := rltask.New(rltask.Spec{Name: rltask.Add, Digits: 2})
	if err != nil {
		t.Fatal(err)
	}
	codec := &Codec{tok: tok, stops: make([]int32, protocol.MaxStopTokens+1)}
	_, err = New(task, Config{GroupSize: 4, MaxNewTokens: 4, Temperature: 1, Clip: 0.2, Vocab: tok.VocabSize(), Context: 32, Codec: codec})
	if err == nil || !strings.Contains(err.Error(), "hold a newline") {
		t.Errorf("%d stop tokens: %v; want an error saying the newline tokens do not fit a lease", protocol.MaxStopTokens+1, err)
	}
}
