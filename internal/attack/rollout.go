package attack

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/protocol"
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
	answer, err := answerOf(r.Prompt)
	if err != nil {
		return nil, "", fmt.Errorf("lease %d: %w", l.ID, err)
	}
	res := &protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: l.BaseVersion, Examples: r.GroupSize, ComputeMs: 1}
	for i := range r.GroupSize {
		text := answer
		if i%2 == 1 {
			text = wrong(answer)
		}
		toks := make([]int32, 0, len(text)+1)
		for _, b := range []byte(text + "\n") {
			toks = append(toks, int32(b))
		}
		toks = toks[:min(len(toks), r.MaxNewTokens)]
		lp := make([]float32, len(toks))
		for k := range lp {
			lp[k] = forgedLogProb
		}
		res.Rollouts = append(res.Rollouts, protocol.Rollout{Tokens: toks, LogProbs: lp})
	}
	return res, "forged", nil
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

// answerOf solves a built-in task's prompt (its bytes as tokens, after
// the newline before it): "A+B=", "reverse:S=" or "sort:S=".
func answerOf(prompt []int32) (string, error) {
	b := make([]byte, 0, len(prompt))
	for _, t := range prompt {
		if t < 0 || t > 255 {
			return "", fmt.Errorf("prompt token %d is not a byte: not a built-in task's prompt", t)
		}
		b = append(b, byte(t))
	}
	p := strings.TrimPrefix(string(b), "\n")
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
