package compute

import (
	"fmt"
	"math"
	"math/rand/v2"
	"reflect"
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
	res, err := RLLease(m, l, p)
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
	again, err := RLLease(m, l, p)
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
	if _, err := RLLease(m, bad, p); err == nil {
		t.Error("a prompt filling the context was computed")
	}
	bad.Rollout = &protocol.RolloutTask{Prompt: []int32{9}, GroupSize: 1, MaxNewTokens: 1, Temperature: 1}
	if _, err := RLLease(m, bad, p); err == nil {
		t.Error("a prompt token outside the vocabulary was computed")
	}
}

// A learn lease's update is the GRPO gradient of its groups with the
// advantages it carries.
func TestLearnLease(t *testing.T) {
	m, p := rlModel(t)
	roll, err := RLLease(m, protocol.Lease{ID: 3, JobID: "rl", SnapshotURL: "/s", Snapshot: protocol.SnapshotGranted,
		Rollout: &protocol.RolloutTask{Prompt: []int32{1, 4}, GroupSize: 4, MaxNewTokens: 4, Temperature: 1, Seed: 5}}, p)
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
	res, err := RLLease(m, l, p)
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
