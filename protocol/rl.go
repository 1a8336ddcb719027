package protocol

import (
	"fmt"
	"math"
)

// Reinforcement learning's two lease kinds (docs/PROTOCOL.md, RL leases).
// They ride on lease and result as optional fields, so a worker that does
// not announce Caps.RL never sees them: the coordinator places an RL job
// only on workers that do.
//
// A rollout lease (Lease.Rollout) asks for GroupSize completions of one
// prompt from the policy at the lease's base version; its result carries
// them in Result.Rollouts, the tokens and their log-probabilities, and no
// update. A learn lease (Lease.Learn) carries scored groups; its result is
// an ordinary gradient in Result.Update. Neither carries a reward from the
// worker: the coordinator scores the tokens itself.

// Bounds on the RL fields, checked by Validate. The coordinator checks
// the exact ones of its job (its vocabulary, its max_new_tokens, its
// group size).
const (
	MaxRolloutGroup  = 256     // completions a rollout lease asks for
	MaxRolloutTokens = 1 << 12 // tokens of one completion
	MaxPromptTokens  = 1 << 16 // tokens of one prompt
	MaxLearnGroups   = 1 << 10 // groups of one learn lease
	// MaxStopTokens bounds a rollout's stop tokens: a tokenized policy
	// stops after every token that holds a newline (rljob refuses a
	// tokenizer with more).
	MaxStopTokens = 1024
)

// RolloutTask is a rollout lease's work: GroupSize completions of Prompt,
// each at most MaxNewTokens tokens and ending early after a token of
// Stop, sampled at Temperature with the random stream of Seed
// (completion i draws from PCG(Seed, i)).
type RolloutTask struct {
	Prompt []int32 `msgpack:"prompt"`
	// Problem is the index of the prompt's problem in the task's stream:
	// informational, the coordinator keeps its own record.
	Problem      int64   `msgpack:"problem"`
	GroupSize    int     `msgpack:"group_size"`
	MaxNewTokens int     `msgpack:"max_new_tokens"`
	Temperature  float64 `msgpack:"temperature"`
	Seed         uint64  `msgpack:"seed"`
	Stop         []int32 `msgpack:"stop,omitempty"`
}

// LearnTask is a learn lease's work: the GRPO gradient of Groups under
// the policy at the lease's base version, with ratio clip Clip and the
// rollouts' sampling Temperature. With KLCoef above 0 the loss adds
// KLCoef times the KL penalty against the reference policy, whose
// parameters the worker GETs from ReferenceURL (the same for the job's
// whole life, so a worker downloads it once).
//
// With Steps above 1 (an RL job in mode diloco) the worker takes Steps
// local steps instead: Groups in Steps consecutive shares of equal size,
// from the base version one GRPO gradient and one step of Inner (its
// state fresh) per share, and returns the delta w_base - w_after. Only a
// worker that announces Caps.RLLocalSteps is given such a lease.
type LearnTask struct {
	Groups       []LearnGroup    `msgpack:"groups"`
	Clip         float64         `msgpack:"clip"`
	Temperature  float64         `msgpack:"temperature"`
	KLCoef       float64         `msgpack:"kl_coef,omitempty"`
	ReferenceURL string          `msgpack:"reference_url,omitempty"`
	Steps        int             `msgpack:"steps,omitempty"`
	Inner        *InnerOptimizer `msgpack:"inner,omitempty"`
}

// LearnGroup is one prompt and its scored completions.
type LearnGroup struct {
	Prompt      []int32           `msgpack:"prompt"`
	Completions []LearnCompletion `msgpack:"completions"`
}

// LearnCompletion is a completion as the coordinator scored it: its
// tokens, the log-probabilities logged when it was sampled, and the
// advantage the coordinator computed from its group's rewards.
type LearnCompletion struct {
	Tokens    []int32   `msgpack:"tokens"`
	LogProbs  []float32 `msgpack:"log_probs"`
	Advantage float64   `msgpack:"advantage"`
}

// Rollout is one completion a worker sampled: its tokens and the
// log-probability of each under the distribution it was drawn from.
type Rollout struct {
	Tokens   []int32   `msgpack:"tokens"`
	LogProbs []float32 `msgpack:"log_probs"`
}

// validateRL checks a lease that carries Rollout or Learn: exactly one,
// from a granted snapshot (the policy version), and its fields.
func (m *Lease) validateRL() error {
	switch {
	case m.Rollout != nil && m.Learn != nil:
		return invalid(TypeLease, "rollout", "a lease is a rollout or a learn lease, not both")
	case m.BaseVersion < 0:
		return invalid(TypeLease, "base_version", "must not be negative, got %d", m.BaseVersion)
	case m.Snapshot != SnapshotGranted:
		return invalid(TypeLease, "snapshot", "an RL lease computes from the policy version it names: want %q, got %q", SnapshotGranted, m.Snapshot)
	case m.CopyOf != 0:
		return invalid(TypeLease, "copy_of", "RL leases have no spot-check copies yet")
	}
	if err := checkText(TypeLease, "snapshot_url", m.SnapshotURL, maxLongText, true); err != nil {
		return err
	}
	if r := m.Rollout; r != nil {
		switch {
		case r.GroupSize < 1 || r.GroupSize > MaxRolloutGroup:
			return invalid(TypeLease, "rollout.group_size", "must be in 1..%d, got %d", MaxRolloutGroup, r.GroupSize)
		case r.MaxNewTokens < 1 || r.MaxNewTokens > MaxRolloutTokens:
			return invalid(TypeLease, "rollout.max_new_tokens", "must be in 1..%d, got %d", MaxRolloutTokens, r.MaxNewTokens)
		case !finite(r.Temperature) || r.Temperature < 0:
			return invalid(TypeLease, "rollout.temperature", "must be a finite number >= 0, got %v", r.Temperature)
		case len(r.Stop) > MaxStopTokens:
			return invalid(TypeLease, "rollout.stop", "%d tokens, at most %d", len(r.Stop), MaxStopTokens)
		case r.Problem < 0:
			return invalid(TypeLease, "rollout.problem", "must not be negative, got %d", r.Problem)
		case len(r.Prompt) == 0:
			return invalid(TypeLease, "rollout.prompt", "must not be empty")
		}
		if err := checkTokens(TypeLease, "rollout.prompt", r.Prompt, MaxPromptTokens); err != nil {
			return err
		}
		return checkTokens(TypeLease, "rollout.stop", r.Stop, MaxStopTokens)
	}
	l := m.Learn
	switch {
	case len(l.Groups) < 1 || len(l.Groups) > MaxLearnGroups:
		return invalid(TypeLease, "learn.groups", "%d groups, want 1..%d", len(l.Groups), MaxLearnGroups)
	case !(l.Clip > 0 && l.Clip < 1):
		return invalid(TypeLease, "learn.clip", "must be in (0, 1), got %v", l.Clip)
	case !finite(l.Temperature) || !(l.Temperature > 0):
		return invalid(TypeLease, "learn.temperature", "must be a finite number > 0, got %v", l.Temperature)
	case !finite(l.KLCoef) || l.KLCoef < 0:
		return invalid(TypeLease, "learn.kl_coef", "must be a finite number >= 0, got %v", l.KLCoef)
	case l.KLCoef > 0 && l.ReferenceURL == "":
		return invalid(TypeLease, "learn.reference_url", "a learn lease with kl_coef %v needs the reference policy's URL", l.KLCoef)
	case l.Steps < 0 || l.Steps > len(l.Groups) || l.Steps > 1 && len(l.Groups)%l.Steps != 0:
		return invalid(TypeLease, "learn.steps", "%d steps of %d groups: want 0 or 1 (one gradient), or a divisor of the groups (local steps)", l.Steps, len(l.Groups))
	case l.Steps > 1 && l.Inner == nil:
		return invalid(TypeLease, "learn.inner", "local steps (%d) need the inner optimizer", l.Steps)
	}
	if l.Steps > 1 {
		if err := l.Inner.validate(); err != nil {
			return err
		}
	}
	if err := checkText(TypeLease, "learn.reference_url", l.ReferenceURL, maxLongText, false); err != nil {
		return err
	}
	for g, grp := range l.Groups {
		where := fmt.Sprintf("learn.groups[%d]", g)
		if len(grp.Prompt) == 0 {
			return invalid(TypeLease, where+".prompt", "must not be empty")
		}
		if err := checkTokens(TypeLease, where+".prompt", grp.Prompt, MaxPromptTokens); err != nil {
			return err
		}
		if len(grp.Completions) < 1 || len(grp.Completions) > MaxRolloutGroup {
			return invalid(TypeLease, where+".completions", "%d completions, want 1..%d", len(grp.Completions), MaxRolloutGroup)
		}
		for i, c := range grp.Completions {
			w := fmt.Sprintf("%s.completions[%d]", where, i)
			if err := checkRollout(TypeLease, w, c.Tokens, c.LogProbs); err != nil {
				return err
			}
			if !finite(c.Advantage) {
				return invalid(TypeLease, w+".advantage", "must be a finite number, got %v", c.Advantage)
			}
		}
	}
	return nil
}

// validateRollouts checks a rollout lease's result: completions and no
// update, each completion's tokens and log-probabilities.
func (m *Result) validateRollouts() error {
	switch {
	case len(m.Update) != 0 || len(m.Packed) != 0:
		return invalid(TypeResult, "update", "a rollout result carries rollouts, not an update")
	case len(m.Rollouts) > MaxRolloutGroup:
		return invalid(TypeResult, "rollouts", "%d completions, at most %d", len(m.Rollouts), MaxRolloutGroup)
	case m.Examples != len(m.Rollouts):
		return invalid(TypeResult, "examples", "must be the number of rollouts (%d), got %d", len(m.Rollouts), m.Examples)
	case !finite(m.ComputeMs) || m.ComputeMs < 0:
		return invalid(TypeResult, "compute_ms", "must be a finite number >= 0, got %v", m.ComputeMs)
	case !finite(m.CommMs) || m.CommMs < 0:
		return invalid(TypeResult, "comm_ms", "must be a finite number >= 0, got %v", m.CommMs)
	case m.BaseVersion < 0:
		return invalid(TypeResult, "base_version", "must not be negative, got %d", m.BaseVersion)
	}
	for i, r := range m.Rollouts {
		if err := checkRollout(TypeResult, fmt.Sprintf("rollouts[%d]", i), r.Tokens, r.LogProbs); err != nil {
			return err
		}
	}
	if err := checkText(TypeResult, "backend", m.Backend, MaxShortText, false); err != nil {
		return err
	}
	return checkText(TypeResult, "job_id", m.JobID, MaxShortText, true)
}

// checkRollout checks one completion: 1..MaxRolloutTokens tokens, none
// negative, and one log-probability per token, each finite and <= 0.
func checkRollout(t Type, where string, tokens []int32, logProbs []float32) error {
	if len(tokens) < 1 || len(tokens) > MaxRolloutTokens {
		return invalid(t, where+".tokens", "%d tokens, want 1..%d", len(tokens), MaxRolloutTokens)
	}
	if err := checkTokens(t, where+".tokens", tokens, MaxRolloutTokens); err != nil {
		return err
	}
	if len(logProbs) != len(tokens) {
		return invalid(t, where+".log_probs", "%d log-probabilities for %d tokens: want one per token", len(logProbs), len(tokens))
	}
	for i, lp := range logProbs {
		if math.IsNaN(float64(lp)) || math.IsInf(float64(lp), 0) || lp > 0 {
			return invalid(t, where+".log_probs", "value %d is %v: a log-probability is a finite number <= 0", i, lp)
		}
	}
	return nil
}

// checkTokens checks that a token list is at most max long and holds no
// negative id.
func checkTokens(t Type, where string, tokens []int32, max int) error {
	if len(tokens) > max {
		return invalid(t, where, "%d tokens, at most %d", len(tokens), max)
	}
	for i, tok := range tokens {
		if tok < 0 {
			return invalid(t, where, "token %d is %d: token ids are >= 0", i, tok)
		}
	}
	return nil
}
