package rljob

import (
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/compute"
	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
)

// policy is a charlm-tiny (the RL jobs' test model) initialised from
// seed and perturbed, so that its distributions are not near uniform.
func policy(t *testing.T, seed uint64) (*nn.Model, []float32) {
	t.Helper()
	ms, _ := nn.Preset("charlm-tiny")
	m, err := nn.NewModel(ms)
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, m.NumParams)
	m.Init(p, int64(seed))
	rng := rand.New(rand.NewPCG(seed, 11))
	for i := range p {
		p[i] += float32(0.05 * rng.NormFloat64())
	}
	return m, p
}

// sampled computes rollout lease id of j as a native worker computes it
// (compute.RLLease: the KV-cache decoder) from params.
func sampled(t *testing.T, j *Job, m *nn.Model, params []float32, id uint64, version int64) *protocol.Result {
	t.Helper()
	r, err := j.NextRollout(id, version)
	if err != nil {
		t.Fatal(err)
	}
	res, err := compute.RLLease(m, protocol.Lease{ID: id, JobID: "rl", BaseVersion: version, Snapshot: protocol.SnapshotGranted, SnapshotURL: "/s", Rollout: &r}, params, nil)
	if err != nil {
		t.Fatal(err)
	}
	res.JobID = "rl"
	return res
}

// verifier is the coordinator's check of a result against params (the
// policy at the lease's version; nil: not held), recording its verdict.
func verifier(m *nn.Model, params []float32, verdict *Verdict) func(Claim) *Refusal {
	ws := m.NewWorkspace(1)
	return func(c Claim) *Refusal {
		v, _, ref := CheckLogProbs(m, ws, params, c)
		*verdict = v
		return ref
	}
}

// The checking rule on real rollouts: a rollout sampled with the real
// decoder from the lease's policy passes and is buffered; the task's
// right answers with made-up log-probabilities, tokens sampled from
// another model's parameters, and an honest rollout with one
// log-probability moved past the tolerance are refused forged, naming the
// completion and token that differed and by how much, and leave nothing
// in the buffer; a log-probability moved within the tolerance passes;
// a version whose parameters are not held is not checked and the result
// is scored as without a check.
func TestCheckLogProbsCatchesForgeries(t *testing.T) {
	m, params := policy(t, 3)
	_, other := policy(t, 4)
	var verdict Verdict
	check := verifier(m, params, &verdict)
	j, task := addJob(t, Config{Seed: 5, MaxNewTokens: 4})
	id := uint64(0)
	next := func() uint64 { id++; return id }

	// Honest.
	for range 3 {
		l := next()
		if g, err := j.ScoreVerified(l, 0, sampled(t, j, m, params, l, 0), check); err != nil || verdict != Matched || g == nil {
			t.Fatalf("an honest rollout: %v, verdict %v; want it scored, matched", err, verdict)
		}
	}

	refusedForged := func(name string, res *protocol.Result, l uint64, words ...string) {
		t.Helper()
		before := j.Stats()
		buffered := j.Buffered()
		_, err := j.ScoreVerified(l, 0, res, check)
		var ref *Refusal
		if !errors.As(err, &ref) || ref.Reason != protocol.ReasonForged || verdict != Forged {
			t.Fatalf("%s: %v (verdict %v); want refused %s", name, err, verdict, protocol.ReasonForged)
		}
		for _, w := range words {
			if !strings.Contains(ref.Detail, w) {
				t.Errorf("%s: detail %q does not say %q", name, ref.Detail, w)
			}
		}
		if s := j.Stats(); s.Forged != before.Forged+1 || s.Refused != before.Refused+1 || s.Rollouts != before.Rollouts || j.Buffered() != buffered {
			t.Errorf("%s: forged %d, refused %d, rollouts %d, buffered %d; want one more forged and refused, nothing scored or buffered",
				name, s.Forged, s.Refused, s.Rollouts, j.Buffered())
		}
		j.Forget(l)
	}

	// The right answers, never sampled, each token claimed at -0.01.
	l := next()
	r, err := j.NextRollout(l, 0)
	if err != nil {
		t.Fatal(err)
	}
	answer := task.Problem(5, int(r.Problem)).Answer + "\n"
	res := &protocol.Result{LeaseID: l, JobID: "rl", BaseVersion: 0, Examples: r.GroupSize}
	for range r.GroupSize {
		ro := protocol.Rollout{Tokens: tokens(answer)}
		for range ro.Tokens {
			ro.LogProbs = append(ro.LogProbs, -0.01)
		}
		res.Rollouts = append(res.Rollouts, ro)
	}
	refusedForged("right answers with made-up log-probabilities", res, l, "completion 0, token 0", "logged log-probability -0.01", "version 0")

	// Another model's samples, with that model's log-probabilities.
	l = next()
	refusedForged("tokens sampled from another model", sampled(t, j, m, other, l, 0), l, "were not sampled from the policy")

	// One token off by twice the tolerance; then by half of it.
	l = next()
	res = sampled(t, j, m, params, l, 0)
	last := len(res.Rollouts) - 1
	k := len(res.Rollouts[last].LogProbs) - 1
	res.Rollouts[last].LogProbs[k] -= float32(2 * LogProbTolerance)
	refusedForged("one log-probability off by twice the tolerance", res, l, fmt.Sprintf("completion %d, token %d", last, k), "tolerance 0.01")
	l = next()
	res = sampled(t, j, m, params, l, 0)
	res.Rollouts[0].LogProbs[0] = float32(math.Min(float64(res.Rollouts[0].LogProbs[0])+LogProbTolerance/2, 0))
	if _, err := j.ScoreVerified(l, 0, res, check); err != nil || verdict != Matched {
		t.Errorf("a log-probability off by half the tolerance: %v, verdict %v; want it scored", err, verdict)
	}

	// The version's parameters are gone: not checked, scored; even the
	// made-up log-probabilities are no strike without a recomputation.
	unheld := verifier(m, nil, &verdict)
	l = next()
	r, _ = j.NextRollout(l, 0)
	res = &protocol.Result{LeaseID: l, JobID: "rl", BaseVersion: 0, Examples: r.GroupSize}
	for range r.GroupSize {
		res.Rollouts = append(res.Rollouts, completion("7\n"))
	}
	if _, err := j.ScoreVerified(l, 0, res, unheld); err != nil || verdict != Unchecked {
		t.Errorf("a version not held: %v, verdict %v; want it scored, unchecked", err, verdict)
	}
}

// Honest log-probabilities agree across the GEMM kernels far within the
// tolerance: completions sampled with the KV-cache decoder on each kernel
// this machine has, recomputed by a full forward pass on each, differ by
// less than a hundredth of LogProbToleranceAt(temperature) at every
// temperature a job may give.
func TestHonestLogProbsAgreeAcrossKernels(t *testing.T) {
	was := nn.KernelName()
	defer func() { _ = nn.UseKernel(was) }()
	m, params := policy(t, 7)
	prompt := tokens("\n3+4=")
	for _, temp := range []float64{0.1, 1, 3} {
		worst := 0.0
		for _, ka := range nn.Kernels() {
			if err := nn.UseKernel(ka); err != nil {
				t.Fatal(err)
			}
			d, err := m.NewDecoder()
			if err != nil {
				t.Fatal(err)
			}
			var samples []nn.Sample
			for s := range 6 {
				smp, err := d.Generate(params, prompt, 12, temp, compute.RolloutSeed(uint64(s), s), nil)
				if err != nil {
					t.Fatal(err)
				}
				samples = append(samples, smp)
			}
			for _, kb := range nn.Kernels() {
				if err := nn.UseKernel(kb); err != nil {
					t.Fatal(err)
				}
				ws := m.NewWorkspace(1)
				for _, smp := range samples {
					c := Claim{Prompt: prompt, Temperature: temp, Rollouts: []protocol.Rollout{{Tokens: smp.Tokens, LogProbs: smp.LogProbs}}}
					v, diff, ref := CheckLogProbs(m, ws, params, c)
					if v != Matched {
						t.Fatalf("temperature %v, sampled on %s, recomputed on %s: %v (%v)", temp, ka, kb, v, ref)
					}
					worst = max(worst, diff)
				}
			}
		}
		t.Logf("temperature %v: the largest difference over kernels %v is %.3g (tolerance %.3g)", temp, nn.Kernels(), worst, LogProbToleranceAt(temp))
		if worst > LogProbToleranceAt(temp)/100 {
			t.Errorf("temperature %v: honest log-probabilities differ by %.3g across kernels, more than a hundredth of the tolerance %.3g", temp, worst, LogProbToleranceAt(temp))
		}
	}
}
