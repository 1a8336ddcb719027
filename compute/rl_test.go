package compute

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/nn"
	"github.com/crowdtrain/crowdtrain/protocol"
	"github.com/crowdtrain/crowdtrain/rl"
)

func rlModel(t *testing.T) (*nn.Model, []float32) {
	t.Helper()
	m, err := nn.NewModel(nn.Transformer(nn.TransformerConfig{Context: 12, Width: 8, Blocks: 1, Heads: 2, Vocab: 9}))
	if err != nil {
		t.Fatal(err)
	}
	p := make([]float32, m.NumParams)
	m.Init(p, 3)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range p {
		p[i] += float32(0.4 * (2*rng.Float64() - 1))
	}
	return m, p
}

// A rollout lease gives group_size completions within max_new_tokens,
// ending at a stop token, whose logged log-probabilities are the policy's
// (recomputed by a full forward pass), the same on every run of the same
// seed, and a result that passes the protocol's checks.
func TestRolloutLease(t *testing.T) {
	m, p := rlModel(t)
	l := protocol.Lease{ID: 3, JobID: "rl", BaseVersion: 5, SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted,
		Rollout: &protocol.RolloutTask{Prompt: []int32{1, 4, 2}, GroupSize: 6, MaxNewTokens: 5, Temperature: 1, Seed: 77, Stop: []int32{0}}}
	res, err := RLLease(m, l, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Rollouts) != 6 || res.Examples != 6 || res.BaseVersion != 5 || res.Update != nil {
		t.Fatalf("%d rollouts, examples %d, base %d, update %d values; want 6, 6, 5, none", len(res.Rollouts), res.Examples, res.BaseVersion, len(res.Update))
	}
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	ws := m.NewWorkspace(1)
	distinct := map[string]bool{}
	for i, r := range res.Rollouts {
		if len(r.Tokens) > 5 {
			t.Errorf("completion %d has %d tokens, more than max_new_tokens 5", i, len(r.Tokens))
		}
		for j, tok := range r.Tokens[:len(r.Tokens)-1] {
			if tok == 0 {
				t.Errorf("completion %d goes on after the stop token at %d", i, j)
			}
		}
		want, err := rl.LogProbs(m, ws, p, l.Rollout.Prompt, r.Tokens, 1)
		if err != nil {
			t.Fatal(err)
		}
		for j := range want {
			if math.Abs(float64(want[j]-r.LogProbs[j])) > 1e-4 {
				t.Errorf("completion %d token %d: logged log-prob %v, the policy's %v", i, j, r.LogProbs[j], want[j])
			}
		}
		distinct[fmt.Sprint(r.Tokens)] = true
	}
	again, err := RLLease(m, l, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(again.Rollouts, res.Rollouts) {
		t.Error("the same rollout lease gave other completions")
	}
	if len(distinct) < 2 {
		t.Error("six completions at temperature 1 all alike: the completions do not draw from their own streams")
	}
	// A prompt that fills the context, a token outside the vocabulary:
	// errors, not panics.
	bad := l
	bad.Rollout = &protocol.RolloutTask{Prompt: make([]int32, 12), GroupSize: 1, MaxNewTokens: 1, Temperature: 1}
	if _, err := RLLease(m, bad, p, nil); err == nil {
		t.Error("a prompt filling the context was computed")
	}
	bad.Rollout = &protocol.RolloutTask{Prompt: []int32{9}, GroupSize: 1, MaxNewTokens: 1, Temperature: 1}
	if _, err := RLLease(m, bad, p, nil); err == nil {
		t.Error("a prompt token outside the vocabulary was computed")
	}
}

// A learn lease's update is the GRPO gradient of its groups with the
// advantages it carries.
func TestLearnLease(t *testing.T) {
	m, p := rlModel(t)
	roll, err := RLLease(m, protocol.Lease{ID: 3, JobID: "rl", SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted,
		Rollout: &protocol.RolloutTask{Prompt: []int32{1, 4}, GroupSize: 4, MaxNewTokens: 4, Temperature: 1, Seed: 5}}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	adv := []float64{1, -1, 0.5, -0.5}
	lg := protocol.LearnGroup{Prompt: []int32{1, 4}}
	g := rl.Group{}
	for i, r := range roll.Rollouts {
		lg.Completions = append(lg.Completions, protocol.LearnCompletion{Tokens: r.Tokens, LogProbs: r.LogProbs, Advantage: adv[i]})
		g = append(g, rl.Completion{Prompt: lg.Prompt, Tokens: r.Tokens, OldLogProbs: r.LogProbs})
	}
	l := protocol.Lease{ID: 4, JobID: "rl", BaseVersion: 2, SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted,
		Learn: &protocol.LearnTask{Groups: []protocol.LearnGroup{lg}, Clip: 0.2, Temperature: 1}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	res, err := RLLease(m, l, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Validate(); err != nil {
		t.Fatal(err)
	}
	want := make([]float32, m.NumParams)
	if _, err := rl.LossWithAdvantages(m, m.NewWorkspace(4), p, []rl.Group{g}, [][]float64{adv}, rl.Config{Clip: 0.2}, want); err != nil {
		t.Fatal(err)
	}
	var norm float64
	for i := range want {
		if math.Abs(float64(res.Update[i]-want[i])) > 1e-6 {
			t.Fatalf("gradient %d: %v, want %v", i, res.Update[i], want[i])
		}
		norm += float64(want[i]) * float64(want[i])
	}
	if res.Examples != 4 || res.BaseVersion != 2 || !(norm > 0) {
		t.Errorf("examples %d, base %d, gradient norm %v; want 4, 2, above 0", res.Examples, res.BaseVersion, math.Sqrt(norm))
	}
}

// A learn lease with a KL penalty computes its completions' reference
// log-probabilities under the reference parameters the task carries: its
// update is the GRPO gradient with that KL term (and differs from the one
// without it). Without the reference it fails, saying what is missing.
func TestLearnLeaseWithKLPenalty(t *testing.T) {
	m, p := rlModel(t)
	ref := append([]float32(nil), p...)
	rng := rand.New(rand.NewPCG(7, 8))
	for i := range ref {
		ref[i] += float32(0.3 * (2*rng.Float64() - 1))
	}
	roll, err := RLLease(m, protocol.Lease{ID: 3, JobID: "rl", SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted,
		Rollout: &protocol.RolloutTask{Prompt: []int32{1, 4}, GroupSize: 4, MaxNewTokens: 4, Temperature: 0.8, Seed: 5}}, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	adv := []float64{1, -1, 0.5, -0.5}
	lg := protocol.LearnGroup{Prompt: []int32{1, 4}}
	g := rl.Group{}
	ws := m.NewWorkspace(4)
	for i, r := range roll.Rollouts {
		lg.Completions = append(lg.Completions, protocol.LearnCompletion{Tokens: r.Tokens, LogProbs: r.LogProbs, Advantage: adv[i]})
		refLogProbs, err := rl.LogProbs(m, ws, ref, lg.Prompt, r.Tokens, 0.8)
		if err != nil {
			t.Fatal(err)
		}
		g = append(g, rl.Completion{Prompt: lg.Prompt, Tokens: r.Tokens, OldLogProbs: r.LogProbs, RefLogProbs: refLogProbs})
	}
	l := protocol.Lease{ID: 4, JobID: "rl", BaseVersion: 2, SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted,
		Learn: &protocol.LearnTask{Groups: []protocol.LearnGroup{lg}, Clip: 0.2, Temperature: 0.8, KLCoef: 0.5, ReferenceURL: "/api/v1/jobs/rl/reference"}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	res, err := NewComputer(nil, m).Compute(&Task{Lease: l, Params: p, Base: 2, Reference: ref})
	if err != nil {
		t.Fatal(err)
	}
	want := make([]float32, m.NumParams)
	st, err := rl.LossWithAdvantages(m, ws, p, []rl.Group{g}, [][]float64{adv}, rl.Config{Clip: 0.2, Temperature: 0.8, KLCoef: 0.5}, want)
	if err != nil {
		t.Fatal(err)
	}
	without := make([]float32, m.NumParams)
	for i := range g {
		g[i].RefLogProbs = nil
	}
	if _, err := rl.LossWithAdvantages(m, ws, p, []rl.Group{g}, [][]float64{adv}, rl.Config{Clip: 0.2, Temperature: 0.8}, without); err != nil {
		t.Fatal(err)
	}
	var moved float64
	for i := range want {
		if math.Abs(float64(res.Update[i]-want[i])) > 1e-6 {
			t.Fatalf("gradient %d: %v, want %v (with the KL term)", i, res.Update[i], want[i])
		}
		moved = max(moved, math.Abs(float64(want[i]-without[i])))
	}
	if !(st.KL > 0) || !(moved > 1e-4) {
		t.Errorf("KL %v, largest change of the gradient by the KL term %v; want both above 0", st.KL, moved)
	}

	if _, err := NewComputer(nil, m).Compute(&Task{Lease: l, Params: p, Base: 2}); err == nil || !strings.Contains(err.Error(), "reference policy") {
		t.Errorf("a learn lease with kl_coef and no reference: %v; want an error naming the reference policy", err)
	}
}

// BenchmarkLearnLease is a learn lease of 8 groups of 8 completions on
// charlm-tiny (the coordinator's learn lease at the default group size),
// without and with the KL penalty's reference forward passes: its cost.
func BenchmarkLearnLease(b *testing.B) {
	m, p, ref, groups := tinyLearnGroups(b)
	for _, kl := range []float64{0, 0.05} {
		b.Run(fmt.Sprintf("kl_coef=%v", kl), func(b *testing.B) {
			l := protocol.Lease{ID: 2, JobID: "rl", SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted,
				Learn: &protocol.LearnTask{Groups: groups, Clip: 0.2, Temperature: 1, KLCoef: kl, ReferenceURL: "/r"}}
			c := NewComputer(nil, m)
			for b.Loop() {
				if _, err := c.Compute(&Task{Lease: l, Params: p, Reference: ref}); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// A learn lease of local steps (an RL job in mode diloco) takes one step
// of its inner optimizer per share of its groups, each gradient at the
// parameters the previous step left, and returns w_base - w_after: with
// SGD that is lr·g1(w) + lr·g2(w - lr·g1(w)), which a second step makes
// different from one step on every group.
func TestLearnLeaseOfLocalSteps(t *testing.T) {
	m, p := rlModel(t)
	var lgs []protocol.LearnGroup
	var groups []rl.Group
	var advs [][]float64
	for k, prompt := range [][]int32{{1, 4}, {2, 5}} {
		roll, err := RLLease(m, protocol.Lease{ID: uint64(3 + k), JobID: "rl", SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted,
			Rollout: &protocol.RolloutTask{Prompt: prompt, GroupSize: 4, MaxNewTokens: 4, Temperature: 1, Seed: uint64(5 + k)}}, p, nil)
		if err != nil {
			t.Fatal(err)
		}
		adv := []float64{1, -1, 0.5, -0.5}
		lg := protocol.LearnGroup{Prompt: prompt}
		g := rl.Group{}
		for i, r := range roll.Rollouts {
			lg.Completions = append(lg.Completions, protocol.LearnCompletion{Tokens: r.Tokens, LogProbs: r.LogProbs, Advantage: adv[i]})
			g = append(g, rl.Completion{Prompt: prompt, Tokens: r.Tokens, OldLogProbs: r.LogProbs})
		}
		lgs, groups, advs = append(lgs, lg), append(groups, g), append(advs, adv)
	}
	const lr = 0.05
	l := protocol.Lease{ID: 9, JobID: "rl", BaseVersion: 2, SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted,
		Learn: &protocol.LearnTask{Groups: lgs, Clip: 0.2, Temperature: 1, Steps: 2, Inner: &protocol.InnerOptimizer{Type: protocol.InnerSGD, LR: lr}}}
	if err := l.Validate(); err != nil {
		t.Fatal(err)
	}
	res, err := RLLease(m, l, p, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := res.Validate(); err != nil || res.Examples != 8 {
		t.Fatalf("result: %v, %d examples; want valid, 8", err, res.Examples)
	}
	ws := m.NewWorkspace(4)
	cfg := rl.Config{Clip: 0.2, Temperature: 1}
	g1, g2 := make([]float32, m.NumParams), make([]float32, m.NumParams)
	if _, err := rl.LossWithAdvantages(m, ws, p, groups[:1], advs[:1], cfg, g1); err != nil {
		t.Fatal(err)
	}
	w1 := make([]float32, m.NumParams)
	for i := range w1 {
		w1[i] = p[i] - lr*g1[i]
	}
	if _, err := rl.LossWithAdvantages(m, ws, w1, groups[1:], advs[1:], cfg, g2); err != nil {
		t.Fatal(err)
	}
	oneStep := make([]float32, m.NumParams)
	if _, err := rl.LossWithAdvantages(m, ws, p, groups, advs, cfg, oneStep); err != nil {
		t.Fatal(err)
	}
	var diff float64
	for i := range p {
		want := (p[i] - (w1[i] - lr*g2[i]))
		if math.Abs(float64(res.Update[i]-want)) > 1e-6 {
			t.Fatalf("delta %d: %v, want %v (two SGD steps)", i, res.Update[i], want)
		}
		diff += math.Abs(float64(res.Update[i] - lr*2*oneStep[i]))
	}
	if !(diff > 1e-6) {
		t.Error("two local steps gave the delta of one step on every group: the second gradient was not taken at the moved parameters")
	}
	l.Learn.Inner = nil
	if _, err := RLLease(m, l, p, nil); err == nil || !strings.Contains(err.Error(), "inner optimizer") {
		t.Errorf("local steps without an inner optimizer: %v; want an error naming it", err)
	}
}

// An honest learn result computed on any GEMM kernel is within a tenth
// of the spot checks' tolerance (engine.DefaultSpotCheckTolerance, 0.05)
// of the same lease computed on any other: the coordinator's check of
// learn results (coordinator/learncheck.go) recomputes on its own kernel,
// not the worker's. Both kinds of learn lease, on charlm-tiny: one GRPO
// gradient with the KL penalty, and four local AdamW steps (mode diloco),
// whose first steps divide by the square root of tiny second moments.
func TestHonestLearnUpdatesAgreeAcrossKernels(t *testing.T) {
	was := nn.KernelName()
	defer func() { _ = nn.UseKernel(was) }()
	m, p, ref, groups := tinyLearnGroups(t)
	leases := map[string]*protocol.LearnTask{
		"gradient, kl_coef 0.05": {Groups: groups, Clip: 0.2, Temperature: 1, KLCoef: 0.05, ReferenceURL: "/r"},
		"4 local adamw steps": {Groups: groups, Clip: 0.2, Temperature: 1, Steps: 4,
			Inner: &protocol.InnerOptimizer{Type: protocol.InnerAdamW, LR: 2e-4, Beta1: 0.9, Beta2: 0.99, Epsilon: 1e-8, ClipNorm: 1}},
	}
	for name, task := range leases {
		l := protocol.Lease{ID: 2, JobID: "rl", SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted, Learn: task}
		if err := l.Validate(); err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		updates := map[string][]float32{}
		for _, k := range nn.Kernels() {
			if err := nn.UseKernel(k); err != nil {
				t.Fatal(err)
			}
			res, err := RLLease(m, l, p, ref)
			if err != nil {
				t.Fatalf("%s on %s: %v", name, k, err)
			}
			updates[k] = res.Update
		}
		worst := 0.0
		for ka, a := range updates {
			for kb, b := range updates {
				var d, na, nb float64
				for i := range a {
					x, y := float64(a[i]), float64(b[i])
					d, na, nb = d+(x-y)*(x-y), na+x*x, nb+y*y
				}
				if na == 0 || nb == 0 {
					t.Fatalf("%s: an all-zero update on %s or %s", name, ka, kb)
				}
				worst = max(worst, math.Sqrt(d/max(na, nb)))
			}
		}
		t.Logf("%s: the largest relative difference over kernels %v is %.3g", name, nn.Kernels(), worst)
		if worst > 0.05/10 {
			t.Errorf("%s: honest learn updates differ by %.3g across kernels, more than a tenth of the spot checks' tolerance 0.05", name, worst)
		}
	}
}

// tinyLearnGroups is charlm-tiny from seed 1, a reference policy from seed
// 2, and a learn lease's 8 groups of 8 completions sampled from it, with
// advantages of -1 and 1 in turn: the coordinator's learn lease at the
// default group size.
func tinyLearnGroups(tb testing.TB) (m *nn.Model, p, ref []float32, groups []protocol.LearnGroup) {
	tb.Helper()
	ms, err := nn.Preset("charlm-tiny")
	if err != nil {
		tb.Fatal(err)
	}
	if m, err = nn.NewModel(ms); err != nil {
		tb.Fatal(err)
	}
	p, ref = make([]float32, m.NumParams), make([]float32, m.NumParams)
	m.Init(p, 1)
	m.Init(ref, 2)
	for g := range 8 {
		prompt := []int32{10, int32('0' + g), '+', '3', '='}
		roll, err := RLLease(m, protocol.Lease{ID: 1, JobID: "rl", SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted,
			Rollout: &protocol.RolloutTask{Prompt: prompt, GroupSize: 8, MaxNewTokens: 3, Temperature: 1, Seed: uint64(g)}}, p, nil)
		if err != nil {
			tb.Fatal(err)
		}
		lg := protocol.LearnGroup{Prompt: prompt}
		for i, r := range roll.Rollouts {
			lg.Completions = append(lg.Completions, protocol.LearnCompletion{Tokens: r.Tokens, LogProbs: r.LogProbs, Advantage: float64(i%2*2 - 1)})
		}
		groups = append(groups, lg)
	}
	return m, p, ref, groups
}
