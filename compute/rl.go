package compute

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rl"
)

// RL jobs' leases (docs/PROTOCOL.md, RL leases) are computed on the host
// with package nn whatever the backend: a rollout lease with the
// KV-cache decoder, a learn lease with rl's GRPO gradient through the
// model's own backward pass. Neither needs the lease's shard.

// maxLearnBatch bounds the completions a learn lease's forward and
// backward pass take at once.
const maxLearnBatch = 16

// IsRL reports whether l is an RL job's rollout or learn lease.
func IsRL(l protocol.Lease) bool { return l.Rollout != nil || l.Learn != nil }

// RolloutSeed is the random stream completion i of a rollout lease draws
// its tokens from: PCG(seed, i), the same on every worker.
func RolloutSeed(seed uint64, i int) *rand.Rand { return rand.New(rand.NewPCG(seed, uint64(i))) }

// computeRL computes a rollout or a learn lease from t.Params.
func (c *Computer) computeRL(t *Task) (*protocol.Result, error) {
	l := t.Lease
	if len(t.Params) != c.model.NumParams {
		return nil, fmt.Errorf("RL lease: %d parameters, the model has %d", len(t.Params), c.model.NumParams)
	}
	start := time.Now()
	c.result = protocol.Result{LeaseID: l.ID, JobID: l.JobID, BaseVersion: t.Base}
	var err error
	if l.Rollout != nil {
		c.result.Rollouts, err = c.rollout(t.Params, l.Rollout)
		c.result.Examples = len(c.result.Rollouts)
	} else {
		c.result.Examples, err = c.learn(t.Params, t.Reference, l.Learn)
		c.result.Codec, c.result.Update = protocol.CodecF32, c.update
	}
	if err != nil {
		return nil, err
	}
	c.result.ComputeMs = float64(time.Since(start).Microseconds()) / 1000
	return &c.result, nil
}

// rollout samples r.GroupSize completions of r.Prompt, completion i from
// RolloutSeed(r.Seed, i).
func (c *Computer) rollout(params []float32, r *protocol.RolloutTask) ([]protocol.Rollout, error) {
	if c.decoder == nil {
		d, err := c.model.NewDecoder()
		if err != nil {
			return nil, fmt.Errorf("rollout lease: %w", err)
		}
		c.decoder = d
	}
	// A prompt and its completion must fit the context; a completion
	// that reaches it simply ends there.
	maxNew := min(r.MaxNewTokens, c.model.InputSize-len(r.Prompt))
	if maxNew < 1 {
		return nil, fmt.Errorf("rollout lease: a prompt of %d tokens leaves no room in the model's context of %d", len(r.Prompt), c.model.InputSize)
	}
	for i, tok := range r.Prompt {
		if int(tok) >= c.model.NumClasses {
			return nil, fmt.Errorf("rollout lease: prompt token %d is %d, outside the vocabulary 0..%d", i, tok, c.model.NumClasses-1)
		}
	}
	out := make([]protocol.Rollout, r.GroupSize)
	for i := range out {
		s, err := c.decoder.Generate(params, r.Prompt, maxNew, r.Temperature, RolloutSeed(r.Seed, i), r.Stop)
		if err != nil {
			return nil, fmt.Errorf("rollout lease: %w", err)
		}
		out[i] = protocol.Rollout{Tokens: s.Tokens, LogProbs: s.LogProbs}
	}
	return out, nil
}

// learn writes the GRPO gradient of l's groups into c.update and returns
// the number of completions. With a KL penalty, each completion's
// reference log-probabilities come from a forward pass under reference,
// at the rollouts' temperature, as the policy's own are.
func (c *Computer) learn(params, reference []float32, l *protocol.LearnTask) (int, error) {
	if l.KLCoef > 0 && len(reference) != c.model.NumParams {
		return 0, fmt.Errorf("learn lease: kl_coef %v needs the reference policy's %d parameters, got %d", l.KLCoef, c.model.NumParams, len(reference))
	}
	if c.ws == nil {
		c.ws = c.model.NewWorkspace(maxLearnBatch)
	}
	groups := make([]rl.Group, len(l.Groups))
	adv := make([][]float64, len(l.Groups))
	n := 0
	for g, grp := range l.Groups {
		groups[g] = make(rl.Group, len(grp.Completions))
		adv[g] = make([]float64, len(grp.Completions))
		for i, cp := range grp.Completions {
			groups[g][i] = rl.Completion{Prompt: grp.Prompt, Tokens: cp.Tokens, OldLogProbs: cp.LogProbs}
			if l.KLCoef > 0 {
				ref, err := rl.LogProbs(c.model, c.ws, reference, grp.Prompt, cp.Tokens, l.Temperature)
				if err != nil {
					return 0, fmt.Errorf("learn lease: group %d, completion %d under the reference policy: %w", g, i, err)
				}
				groups[g][i].RefLogProbs = ref
			}
			adv[g][i] = cp.Advantage
		}
		n += len(grp.Completions)
	}
	if n == 0 {
		return 0, errors.New("learn lease: no completions")
	}
	cfg := rl.Config{Clip: l.Clip, Temperature: l.Temperature, KLCoef: l.KLCoef}
	if l.Steps > 1 {
		return n, c.learnSteps(params, groups, adv, cfg, l)
	}
	if _, err := rl.LossWithAdvantages(c.model, c.ws, params, groups, adv, cfg, c.update); err != nil {
		return 0, fmt.Errorf("learn lease: %w", err)
	}
	return n, nil
}

// learnSteps takes l.Steps local steps from params (an RL job in mode
// diloco): the groups in l.Steps consecutive shares of equal size, one
// GRPO gradient at the local parameters and one step of the inner
// optimizer (its state fresh) per share, and writes the delta
// w_base - w_after into c.update. Each completion's ratio stays against
// the log-probabilities it was sampled with, so the clip bounds how far
// the local steps move from the sampling policy, as in PPO's epochs.
func (c *Computer) learnSteps(params []float32, groups []rl.Group, adv [][]float64, cfg rl.Config, l *protocol.LearnTask) error {
	if l.Inner == nil || len(groups)%l.Steps != 0 {
		return fmt.Errorf("learn lease: %d local steps of %d groups need an inner optimizer and a divisor of the groups", l.Steps, len(groups))
	}
	plan := InnerSteps{BatchSize: 1, Steps: l.Steps, Inner: *l.Inner, UpdateKind: protocol.UpdateDelta}
	if err := plan.Check(); err != nil {
		return fmt.Errorf("learn lease: %w", err)
	}
	c.startInner(params, plan.Inner)
	per := len(groups) / l.Steps
	for step := range l.Steps {
		lo, hi := step*per, (step+1)*per
		if _, err := rl.LossWithAdvantages(c.model, c.ws, c.local, groups[lo:hi], adv[lo:hi], cfg, c.grad); err != nil {
			return fmt.Errorf("learn lease, local step %d: %w", step, err)
		}
		c.innerStep(plan.Inner)
	}
	for i, w := range c.local {
		c.update[i] = params[i] - w
	}
	return nil
}

// RLLease computes an RL lease on the host from params (and, for a learn
// lease with a KL penalty, the reference policy's parameters), as a
// worker would: for the coordinator's checks, the attack tool and tests.
// The result's slices are its own.
func RLLease(m *nn.Model, l protocol.Lease, params, reference []float32) (res *protocol.Result, err error) {
	if !IsRL(l) {
		return nil, errors.New("not an RL lease: it has neither rollout nor learn")
	}
	defer func() {
		if r := recover(); r != nil {
			res, err = nil, fmt.Errorf("RL lease: the computation panicked: %v", r)
		}
	}()
	res, err = NewComputer(nil, m).computeRL(&Task{Lease: l, Params: params, Base: l.BaseVersion, Reference: reference})
	if err != nil {
		return nil, err
	}
	r := *res
	if r.Update != nil {
		r.Update = append(protocol.Floats(nil), res.Update...)
	}
	return &r, nil
}
