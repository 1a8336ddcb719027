package attack

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rljob"
)

// forgedLogProb is the log-probability forge-rollout claims for every
// token it sends: a confident policy's, whatever the policy says.
const forgedLogProb = -0.01

// forgeRL answers an RL job's lease the way forge-rollout does: a
// rollout lease with the task's right answer as every other completion
// and a wrong one between (a group whose rewards differ, which GRPO
// learns from: a group all alike is dropped), each token claimed at
// forgedLogProb, nothing sampled (honestly sampled
// instead with chance 1 - Fraction); a learn lease honestly, its GRPO
// gradient from the named snapshot.
func (c *conn) forgeRL(ctx context.Context, l *protocol.Lease) (*protocol.Result, string, error) {
	if !compute.IsRL(*l) {
		return nil, "", fmt.Errorf("lease %d is not an RL job's: %s answers rollout leases only (give it an RL job with --job)", l.ID, ForgeRollout)
	}
	a := c.a
	cfg := a.sh.cfg
	if l.Learn != nil || (cfg.Fraction < 1 && a.rng.Float64() >= cfg.Fraction) {
		params, err := c.snapshot(ctx, l.SnapshotURL)
		if err != nil {
			return nil, "", err
		}
		var reference []float32
		if l.Learn != nil && l.Learn.KLCoef > 0 {
			if reference, err = c.snapshot(ctx, l.Learn.ReferenceURL); err != nil {
				return nil, "", err
			}
		}
		res, err := compute.RLLease(c.model, *l, params, reference)
		if l.Learn != nil {
			return res, "learn", err
		}
		return res, "honest", err
	}
	r := l.Rollout
	rollouts, err := forgedRollouts(cmp.Or(cfg.Codec, rljob.Bytes()), r.Prompt, r.GroupSize, r.MaxNewTokens)
	if err != nil {
		return nil, "", fmt.Errorf("lease %d: %w", l.ID, err)
	}
	res := &protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Examples: r.GroupSize, ComputeMs: 1, Rollouts: rollouts}
	return res, "forged", nil
}

// forgedRollouts are forge-rollout's group of n completions of prompt in
// the policy's tokens (codec): the right answer and a wrong one by turns,
// each ending with the newline, at most maxNew tokens, every token
// claimed at forgedLogProb.
func forgedRollouts(codec *rljob.Codec, prompt []int32, n, maxNew int) ([]protocol.Rollout, error) {
	answer, err := answerOf(codec.Text(prompt))
	if err != nil {
		return nil, err
	}
	out := make([]protocol.Rollout, n)
	for i := range out {
		text := answer
		if i%2 == 1 {
			text = wrong(answer)
		}
		toks := codec.Encode(text + "\n")
		toks = toks[:min(len(toks), maxNew)]
		lp := make([]float32, len(toks))
		for k := range lp {
			lp[k] = forgedLogProb
		}
		out[i] = protocol.Rollout{Tokens: toks, LogProbs: lp}
	}
	return out, nil
}

// wrong is an answer that is not s: its last byte changed.
func wrong(s string) string {
	if s == "" {
		return "x"
	}
	b := []byte(s)
	if b[len(b)-1] == 'x' {
		b[len(b)-1] = 'y'
	} else {
		b[len(b)-1] = 'x'
	}
	return string(b)
}

// answerOf solves a built-in task's prompt, decoded (after the newline
// before it): "A+B=", "reverse:S=" or "sort:S=".
func answerOf(text string) (string, error) {
	p := strings.TrimPrefix(text, "\n")
	body, ok := strings.CutSuffix(p, "=")
	if !ok {
		return "", fmt.Errorf("prompt %q does not end with '=': not a built-in task's prompt", p)
	}
	switch {
	case strings.HasPrefix(body, "reverse:"):
		s := []byte(strings.TrimPrefix(body, "reverse:"))
		slices.Reverse(s)
		return string(s), nil
	case strings.HasPrefix(body, "sort:"):
		s := []byte(strings.TrimPrefix(body, "sort:"))
		slices.Sort(s)
		return string(s), nil
	}
	x, y, ok := strings.Cut(body, "+")
	if ok {
		a, errA := strconv.ParseInt(x, 10, 64)
		b, errB := strconv.ParseInt(y, 10, 64)
		if errA == nil && errB == nil {
			return strconv.FormatInt(a+b, 10), nil
		}
	}
	return "", fmt.Errorf("prompt %q is none of the built-in tasks' (A+B=, reverse:S=, sort:S=)", p)
}
