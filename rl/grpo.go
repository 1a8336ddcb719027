package rl

import (
	"errors"
	"fmt"
	"math"

	"github.com/crowdtrain/crowdtrain/nn"
)

// Completion is one sampled continuation of a prompt.
type Completion struct {
	Prompt []int32 // the prompt's tokens, at least one
	Tokens []int32 // the completion's tokens, at least one
	// OldLogProbs[j] is the log-probability the sampling policy gave
	// Tokens[j] (nn.Sample.LogProbs).
	OldLogProbs []float32
	// RefLogProbs[j] is the reference policy's log-probability of
	// Tokens[j] (LogProbs with the reference parameters); needed only
	// when KLCoef > 0, and reported as Stats.KL whenever given.
	RefLogProbs []float32
	Reward      float64
}

// Group is the completions of one prompt, whose rewards are compared.
type Group []Completion

// Config holds GRPO's hyperparameters. Zero fields take the defaults.
type Config struct {
	// Clip is ε of the clipped importance ratio, clip(ρ, 1-ε, 1+ε)
	// (default 0.2).
	Clip float64
	// KLCoef is β, the weight of the KL penalty against the reference
	// policy (default 0: no penalty).
	KLCoef float64
	// Eps keeps the advantage finite when a group's rewards barely differ
	// (default 1e-4).
	Eps float64
	// Temperature divides the policy's logits, as the sampler divided
	// them (default 1), so log-probabilities compare with OldLogProbs.
	Temperature float64
}

// Defaults of Config's zero fields.
const (
	DefaultClip        = 0.2
	DefaultEps         = 1e-4
	DefaultTemperature = 1
)

func (c Config) withDefaults() (Config, error) {
	if c.Clip == 0 {
		c.Clip = DefaultClip
	}
	if c.Eps == 0 {
		c.Eps = DefaultEps
	}
	if c.Temperature == 0 {
		c.Temperature = DefaultTemperature
	}
	switch {
	case !(c.Clip > 0 && c.Clip < 1):
		return c, fmt.Errorf("grpo: clip must be in (0, 1), got %v", c.Clip)
	case !(c.KLCoef >= 0) || math.IsInf(c.KLCoef, 0):
		return c, fmt.Errorf("grpo: kl_coef must be a finite number >= 0, got %v", c.KLCoef)
	case !(c.Eps > 0) || math.IsInf(c.Eps, 0):
		return c, fmt.Errorf("grpo: eps must be a finite number > 0, got %v", c.Eps)
	case !(c.Temperature > 0) || math.IsInf(c.Temperature, 0):
		return c, fmt.Errorf("grpo: temperature must be a finite number > 0, got %v", c.Temperature)
	}
	return c, nil
}

// Stats describe one Loss call.
type Stats struct {
	Loss   float64 // the GRPO loss, the mean over completion tokens
	Tokens int     // completion tokens in the batch
	// KL is the mean k3 estimate of KL(policy || reference) per token
	// (0 without RefLogProbs).
	KL float64
	// ClipFraction is the share of tokens whose clipped term was the
	// smaller one, so they pass no gradient.
	ClipFraction float64
	// Advantages per group and completion.
	Advantages [][]float64
}

// Loss computes the GRPO loss of groups under the policy params and
// OVERWRITES grad (len NumParams) with its gradient. For completion i of a
// group, A_i is its advantage (Advantages of the group's rewards); for
// each of its tokens, with logp the policy's log-probability (logits
// divided by Temperature), ρ = exp(logp - old) and k3 = exp(ref - logp) -
// (ref - logp) - 1, the token's loss is
//
//	-min(ρ·A_i, clip(ρ, 1-Clip, 1+Clip)·A_i) + KLCoef·k3
//
// and the loss is the mean over every completion token of the batch (each
// token weighs the same, whatever its completion's length). Each
// completion is one example, prompt then completion tokens, left-aligned
// in the context (they must fit it together); completions go through ws
// maxBatch at a time.
func Loss(m *nn.Model, ws *nn.Workspace, params []float32, groups []Group, cfg Config, grad []float32) (Stats, error) {
	return loss(m, ws, params, groups, nil, cfg, grad)
}

// LossWithAdvantages is Loss with each completion's advantage given
// (adv[g][i] for completion i of group g) instead of computed from the
// rewards, which it does not read: a learn lease carries the advantages
// the coordinator computed from the rewards it scored itself.
func LossWithAdvantages(m *nn.Model, ws *nn.Workspace, params []float32, groups []Group, adv [][]float64, cfg Config, grad []float32) (Stats, error) {
	if len(adv) != len(groups) {
		return Stats{}, fmt.Errorf("grpo: %d groups of advantages for %d groups", len(adv), len(groups))
	}
	for g, a := range adv {
		if len(a) != len(groups[g]) {
			return Stats{}, fmt.Errorf("grpo: group %d: %d advantages for %d completions", g, len(a), len(groups[g]))
		}
		for i, x := range a {
			if math.IsNaN(x) || math.IsInf(x, 0) {
				return Stats{}, fmt.Errorf("grpo: group %d, completion %d: advantage %v is not a finite number", g, i, x)
			}
		}
	}
	return loss(m, ws, params, groups, adv, cfg, grad)
}

func loss(m *nn.Model, ws *nn.Workspace, params []float32, groups []Group, adv [][]float64, cfg Config, grad []float32) (Stats, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return Stats{}, err
	}
	if len(grad) != m.NumParams || len(params) != m.NumParams {
		return Stats{}, fmt.Errorf("grpo: %d parameters and %d gradients, the model has %d", len(params), len(grad), m.NumParams)
	}
	items, tokens, err := flatten(m, groups, cfg, adv == nil)
	if err != nil {
		return Stats{}, err
	}
	st := Stats{Tokens: tokens, Advantages: adv}
	if adv == nil {
		st.Advantages = make([][]float64, len(groups))
		for g, grp := range groups {
			rewards := make([]float64, len(grp))
			for i, c := range grp {
				rewards[i] = c.Reward
			}
			st.Advantages[g] = Advantages(rewards, cfg.Eps)
		}
	}
	T := m.InputSize
	batch := ws.MaxBatch()
	x := make([]float32, batch*T)
	var part []float32
	var clipped int
	for off := 0; off < len(items); off += batch {
		chunk := items[off:min(off+batch, len(items))]
		x := x[:len(chunk)*T]
		clear(x)
		for e, it := range chunk {
			for j, tok := range it.c.Prompt {
				x[e*T+j] = float32(tok)
			}
			for j, tok := range it.c.Tokens {
				x[e*T+len(it.c.Prompt)+j] = float32(tok)
			}
		}
		dst := grad
		if off > 0 {
			if part == nil {
				part = make([]float32, len(grad))
			}
			dst = part
		}
		m.GradientOfLogits(ws, params, x, dst, func(logits, dLogits []float32) float64 {
			for e, it := range chunk {
				l, kl, c := tokenLosses(m, cfg, it.c, st.Advantages[it.group][it.index], tokens,
					logits[e*T*m.NumClasses:(e+1)*T*m.NumClasses], dLogits[e*T*m.NumClasses:(e+1)*T*m.NumClasses])
				st.Loss += l
				st.KL += kl
				clipped += c
			}
			return 0
		})
		if off > 0 {
			for i, v := range part {
				grad[i] += v
			}
		}
	}
	st.Loss /= float64(tokens)
	st.KL /= float64(tokens)
	st.ClipFraction = float64(clipped) / float64(tokens)
	return st, nil
}

type item struct {
	c            Completion
	group, index int
}

// flatten checks every completion and lists them with their group and
// index; it returns the batch's completion tokens.
func flatten(m *nn.Model, groups []Group, cfg Config, rewards bool) ([]item, int, error) {
	if len(m.Spec.Input) != 1 || m.LabelsPerExample != m.InputSize {
		return nil, 0, fmt.Errorf("grpo: the model reads %v with %d rows of scores; it needs token ids [t] in and one row per position out", m.Spec.Input, m.LabelsPerExample)
	}
	if len(groups) == 0 {
		return nil, 0, errors.New("grpo: no groups")
	}
	var items []item
	tokens := 0
	for g, grp := range groups {
		if len(grp) == 0 {
			return nil, 0, fmt.Errorf("grpo: group %d is empty", g)
		}
		for i, c := range grp {
			where := fmt.Sprintf("grpo: group %d, completion %d", g, i)
			switch {
			case len(c.Prompt) == 0 || len(c.Tokens) == 0:
				return nil, 0, fmt.Errorf("%s: %d prompt and %d completion tokens; both need at least one", where, len(c.Prompt), len(c.Tokens))
			case len(c.Prompt)+len(c.Tokens) > m.InputSize:
				return nil, 0, fmt.Errorf("%s: %d prompt and %d completion tokens do not fit the context of %d", where, len(c.Prompt), len(c.Tokens), m.InputSize)
			case len(c.OldLogProbs) != len(c.Tokens):
				return nil, 0, fmt.Errorf("%s: %d old log-probabilities for %d tokens", where, len(c.OldLogProbs), len(c.Tokens))
			case c.RefLogProbs != nil && len(c.RefLogProbs) != len(c.Tokens):
				return nil, 0, fmt.Errorf("%s: %d reference log-probabilities for %d tokens", where, len(c.RefLogProbs), len(c.Tokens))
			case cfg.KLCoef > 0 && c.RefLogProbs == nil:
				return nil, 0, fmt.Errorf("%s: kl_coef %v needs the reference policy's log-probabilities (RefLogProbs)", where, cfg.KLCoef)
			case rewards && (math.IsNaN(c.Reward) || math.IsInf(c.Reward, 0)):
				return nil, 0, fmt.Errorf("%s: reward %v is not a finite number", where, c.Reward)
			}
			for _, tok := range append(capped(c.Prompt), c.Tokens...) {
				if tok < 0 || int(tok) >= m.NumClasses {
					return nil, 0, fmt.Errorf("%s: token %d is outside the vocabulary 0..%d", where, tok, m.NumClasses-1)
				}
			}
			for j := range c.Tokens {
				if lp := c.OldLogProbs[j]; !(lp <= 0) || math.IsInf(float64(lp), 0) {
					return nil, 0, fmt.Errorf("%s: old log-probability %d is %v, want a finite number <= 0", where, j, lp)
				}
				if c.RefLogProbs != nil {
					if lp := c.RefLogProbs[j]; !(lp <= 0) || math.IsInf(float64(lp), 0) {
						return nil, 0, fmt.Errorf("%s: reference log-probability %d is %v, want a finite number <= 0", where, j, lp)
					}
				}
			}
			items = append(items, item{c, g, i})
			tokens += len(c.Tokens)
		}
	}
	return items, tokens, nil
}

func capped(s []int32) []int32 { return s[:len(s):len(s)] }

// tokenLosses adds one completion's token losses to the batch: it returns
// their sum, the sum of their k3 estimates and how many were clipped, and
// writes each token's gradient, divided by the batch's tokens, into the
// logits row that predicted it.
func tokenLosses(m *nn.Model, cfg Config, c Completion, adv float64, tokens int, logits, dLogits []float32) (loss, kl float64, clipped int) {
	V := m.NumClasses
	P := len(c.Prompt)
	inv := 1 / cfg.Temperature
	lo, hi := 1-cfg.Clip, 1+cfg.Clip
	probs := make([]float64, V)
	for j, tok := range c.Tokens {
		row := logits[(P+j-1)*V : (P+j)*V]
		logp := logSoftmax(row, inv, probs, tok)
		ratio := math.Exp(logp - float64(c.OldLogProbs[j]))
		unclipped := ratio * adv
		clippedTerm := math.Min(math.Max(ratio, lo), hi) * adv
		// d(-surrogate)/dlogp: the unclipped term's ρ·A when it is the
		// smaller one (or they are equal, inside the clip range);
		// otherwise the clipped term is a constant.
		var dLogp float64
		if unclipped <= clippedTerm {
			loss -= unclipped
			dLogp = -unclipped
		} else {
			loss -= clippedTerm
			clipped++
		}
		if c.RefLogProbs != nil {
			d := float64(c.RefLogProbs[j]) - logp
			k3 := math.Exp(d) - d - 1
			kl += k3
			loss += cfg.KLCoef * k3
			dLogp += cfg.KLCoef * (1 - math.Exp(d))
		}
		// dlogp/dlogit_v = (onehot(tok) - softmax_v) / temperature.
		g := dLogp * inv / float64(tokens)
		drow := dLogits[(P+j-1)*V : (P+j)*V]
		for v := range drow {
			oh := 0.0
			if v == int(tok) {
				oh = 1
			}
			drow[v] = float32(g * (oh - probs[v]))
		}
	}
	return loss, kl, clipped
}

// logSoftmax returns log softmax(row·inv)[tok] and leaves the softmax in
// probs, all in float64.
func logSoftmax(row []float32, inv float64, probs []float64, tok int32) float64 {
	top := math.Inf(-1)
	for _, v := range row {
		top = max(top, float64(v)*inv)
	}
	var sum float64
	for v, z := range row {
		probs[v] = math.Exp(float64(z)*inv - top)
		sum += probs[v]
	}
	for v := range probs {
		probs[v] /= sum
	}
	return float64(row[tok])*inv - top - math.Log(sum)
}

// LogProbs returns the log-probability under params (logits divided by
// temperature, 0 meaning 1) of each completion token after prompt: what a
// reference policy's RefLogProbs are, or a check of logged OldLogProbs.
func LogProbs(m *nn.Model, ws *nn.Workspace, params []float32, prompt, completion []int32, temperature float64) ([]float32, error) {
	if temperature == 0 {
		temperature = 1
	}
	c := Completion{Prompt: prompt, Tokens: completion, OldLogProbs: make([]float32, len(completion))}
	if _, _, err := flatten(m, []Group{{c}}, Config{Temperature: temperature}, false); err != nil {
		return nil, err
	}
	T, V := m.InputSize, m.NumClasses
	x := make([]float32, T)
	for j, tok := range append(capped(prompt), completion...) {
		x[j] = float32(tok)
	}
	logits := m.Forward(ws, params, x)
	probs := make([]float64, V)
	out := make([]float32, len(completion))
	for j, tok := range completion {
		p := len(prompt) + j - 1
		out[j] = float32(min(logSoftmax(logits[p*V:(p+1)*V], 1/temperature, probs, tok), 0))
	}
	return out, nil
}
