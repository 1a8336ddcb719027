package rljob

import (
	"math"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rl"
)

// The check of a rollout's log-probabilities. A rollout result's tokens
// are scored by the task's checker, whoever sent them; its log-probabilities
// are the GRPO importance ratio's denominator, and only the policy the
// lease named could have given them. Recomputing them under that version
// (rl.LogProbs, the lease's temperature) catches a worker that returns the
// right answers without having sampled them, or samples from another
// model: its log-probabilities are not the policy's. It does not catch a
// worker that chooses its tokens and then computes their true
// log-probabilities: that worker has run the policy's forward passes.

// LogProbTolerance is the largest difference, per token, between a logged
// log-probability and the coordinator's recomputation that an honest
// worker may show at temperature 1 or above; below 1 it is divided by
// the temperature (LogProbToleranceAt), as the logits' rounding is.
//
// Measured (TestHonestLogProbsAgreeAcrossKernels, and a wider run of the
// same measurement over charlm-tiny and gpt-mini, random and perturbed
// policies, temperatures 0.1 to 3): completions sampled with the KV-cache
// decoder on one GEMM kernel (avx512, avx2, gonum, go) and recomputed by
// a full forward pass on any other differ by at most 3.3e-6 at
// temperature 1, 9.5e-7 at 3 and 3.2e-5 at 0.1 (1/temperature, as the
// logits' rounding scales). 0.01 is 3,000 times the largest at
// temperature 1 and 300 times at 0.1, room for backends not measured
// (wasm's exp, arm64's kernel); a forgery within it moves the importance
// ratio by at most 1% a token, far inside the ratio's clip.
const LogProbTolerance = 0.01

// LogProbToleranceAt is LogProbTolerance at temperature: divided by it
// below 1.
func LogProbToleranceAt(temperature float64) float64 {
	if temperature > 0 && temperature < 1 {
		return LogProbTolerance / temperature
	}
	return LogProbTolerance
}

// Claim is what a rollout result says it sampled: its completions of
// Prompt from the policy at Version, at Temperature.
type Claim struct {
	Problem     int64
	Version     int64
	Prompt      []int32
	Temperature float64
	Rollouts    []protocol.Rollout
}

// Verdict is what a log-probability check found.
type Verdict int

const (
	// Unchecked: the version's parameters are no longer held, so nothing
	// was recomputed; never evidence against the worker.
	Unchecked Verdict = iota
	// Matched: every token's log-probability is the policy's, within the
	// tolerance.
	Matched
	// Forged: some token's is not.
	Forged
)

// CheckLogProbs recomputes the log-probability of every token of c's
// completions under params (the policy at c.Version; nil when it is no
// longer held: Unchecked) at c.Temperature, and compares each with the
// logged one. Forged comes with a refusal (ReasonForged) naming the
// completion and token that differed most and by how much; maxDiff is
// the largest difference seen. ws is a workspace of m for one example.
// c should have passed the job's bounds (Score's check); a completion
// that cannot be recomputed (a token outside the vocabulary, too long
// for the context) is refused invalid, Unchecked: no evidence of a
// forgery.
func CheckLogProbs(m *nn.Model, ws *nn.Workspace, params []float32, c Claim) (v Verdict, maxDiff float64, ref *Refusal) {
	if params == nil {
		return Unchecked, 0, nil
	}
	tol := LogProbToleranceAt(c.Temperature)
	worst, worstTok := -1, -1
	var worstGot, worstWant float32
	for i, r := range c.Rollouts {
		if len(r.Tokens) == 0 {
			continue
		}
		want, err := rl.LogProbs(m, ws, params, c.Prompt, r.Tokens, c.Temperature)
		if err != nil {
			return Unchecked, 0, refuse(protocol.ReasonInvalid, "completion %d: its log-probabilities cannot be recomputed: %v", i, err)
		}
		for k, lp := range r.LogProbs {
			if d := math.Abs(float64(lp) - float64(want[k])); d > maxDiff || math.IsNaN(d) {
				maxDiff, worst, worstTok, worstGot, worstWant = d, i, k, lp, want[k]
			}
		}
	}
	if !(maxDiff <= tol) {
		return Forged, maxDiff, refuse(protocol.ReasonForged,
			"completion %d, token %d: logged log-probability %.4g, the policy at version %d gives %.4g at temperature %g (difference %.3g, tolerance %.3g): these tokens were not sampled from the policy the lease named",
			worst, worstTok, worstGot, c.Version, worstWant, c.Temperature, maxDiff, tol)
	}
	return Matched, maxDiff, nil
}

// String names a verdict.
func (v Verdict) String() string {
	switch v {
	case Matched:
		return "matched"
	case Forged:
		return "forged"
	}
	return "unchecked"
}

// claim is what the result of pending lease pr says it sampled.
func (j *Job) claim(pr pendingRollout, res *protocol.Result) Claim {
	return Claim{Problem: pr.problem, Version: pr.version, Prompt: pr.prompt, Temperature: j.cfg.Temperature, Rollouts: res.Rollouts}
}
