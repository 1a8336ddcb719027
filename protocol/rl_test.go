package protocol

import (
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"
)

func rolloutLease() *Lease {
	return &Lease{ID: 7, JobID: "rl-1", BaseVersion: 3, SnapshotURL: "/s/3", Snapshot: SnapshotGranted, DeadlineUnixMs: 1,
		Rollout: &RolloutTask{Prompt: []int32{10, 49, 43, 50, 61}, Problem: 4, GroupSize: 8, MaxNewTokens: 4, Temperature: 1, Seed: 99, Stop: []int32{10}}}
}

func learnLease() *Lease {
	return &Lease{ID: 8, JobID: "rl-1", BaseVersion: 3, SnapshotURL: "/s/3", Snapshot: SnapshotGranted, DeadlineUnixMs: 1,
		Learn: &LearnTask{Clip: 0.2, Temperature: 1, Groups: []LearnGroup{{Prompt: []int32{10, 49},
			Completions: []LearnCompletion{{Tokens: []int32{51, 10}, LogProbs: []float32{-0.5, -0.1}, Advantage: 1}, {Tokens: []int32{52}, LogProbs: []float32{-2}, Advantage: -1}}}}}}
}

// stepsLease is a learn lease of two local steps (an RL job in mode
// diloco): two groups, one a step.
func stepsLease() *Lease {
	l := learnLease()
	l.Learn.Groups = append(l.Learn.Groups, l.Learn.Groups[0])
	l.Learn.Steps = 2
	l.Learn.Inner = &InnerOptimizer{Type: InnerAdamW, LR: 4e-4, Beta1: 0.9, Beta2: 0.95, Epsilon: 1e-8, ClipNorm: 1}
	return l
}

func rolloutResult() *Result {
	return &Result{LeaseID: 7, JobID: "rl-1", BaseVersion: 3, Examples: 2,
		Rollouts: []Rollout{{Tokens: []int32{51, 10}, LogProbs: []float32{-0.5, -0.1}}, {Tokens: []int32{52}, LogProbs: []float32{0}}}}
}

// The RL leases and a rollout result travel and come back as they were.
func TestRLMessagesRoundTrip(t *testing.T) {
	withKL := learnLease()
	withKL.Learn.KLCoef, withKL.Learn.ReferenceURL = 0.05, "/api/v1/jobs/rl-1/reference"
	for _, m := range []Message{rolloutLease(), learnLease(), withKL, stepsLease(), rolloutResult(),
		&Hello{Protocol: Version, Kind: KindNative, Backend: "b", Threads: 1, Caps: &Caps{RL: true, RLLocalSteps: true}}} {
		b, err := Encode(m)
		if err != nil {
			t.Fatalf("%s: %v", m.MessageType(), err)
		}
		got, err := Decode(b, 1<<20)
		if err != nil {
			t.Fatalf("%s: %v", m.MessageType(), err)
		}
		if !reflect.DeepEqual(got, m) {
			t.Errorf("%s: decoded %+v, want %+v", m.MessageType(), got, m)
		}
	}
}

// Each malformed RL field is refused, naming it.
func TestRLMessagesRefuseBadFields(t *testing.T) {
	nan := float32(math.NaN())
	for _, c := range []struct {
		name  string
		m     Message
		field string
	}{
		{"negative prompt token", func() Message { l := rolloutLease(); l.Rollout.Prompt[1] = -1; return l }(), "rollout.prompt"},
		{"empty prompt", func() Message { l := rolloutLease(); l.Rollout.Prompt = nil; return l }(), "rollout.prompt"},
		{"group of 0", func() Message { l := rolloutLease(); l.Rollout.GroupSize = 0; return l }(), "rollout.group_size"},
		{"too many new tokens", func() Message { l := rolloutLease(); l.Rollout.MaxNewTokens = MaxRolloutTokens + 1; return l }(), "rollout.max_new_tokens"},
		{"NaN temperature", func() Message { l := rolloutLease(); l.Rollout.Temperature = math.NaN(); return l }(), "rollout.temperature"},
		{"latest snapshot", func() Message { l := rolloutLease(); l.Snapshot = SnapshotLatest; return l }(), "snapshot"},
		{"both kinds", func() Message { l := rolloutLease(); l.Learn = learnLease().Learn; return l }(), "rollout"},
		{"learn: no groups", func() Message { l := learnLease(); l.Learn.Groups = nil; return l }(), "learn.groups"},
		{"learn: negative kl_coef", func() Message { l := learnLease(); l.Learn.KLCoef = -0.1; return l }(), "learn.kl_coef"},
		{"learn: NaN kl_coef", func() Message { l := learnLease(); l.Learn.KLCoef = math.NaN(); return l }(), "learn.kl_coef"},
		{"learn: kl_coef without a reference", func() Message { l := learnLease(); l.Learn.KLCoef = 0.1; return l }(), "learn.reference_url"},
		{"learn: clip 1", func() Message { l := learnLease(); l.Learn.Clip = 1; return l }(), "learn.clip"},
		{"learn: more steps than groups", func() Message { l := stepsLease(); l.Learn.Steps = 3; return l }(), "learn.steps"},
		{"learn: steps that do not divide the groups", func() Message {
			l := stepsLease()
			l.Learn.Groups = append(l.Learn.Groups, l.Learn.Groups[0])
			return l
		}(), "learn.steps"},
		{"learn: negative steps", func() Message { l := learnLease(); l.Learn.Steps = -1; return l }(), "learn.steps"},
		{"learn: steps without an inner optimizer", func() Message { l := stepsLease(); l.Learn.Inner = nil; return l }(), "learn.inner"},
		{"learn: steps with an inner rate of 0", func() Message { l := stepsLease(); l.Learn.Inner.LR = 0; return l }(), "inner_optimizer.lr"},
		{"learn: positive log-prob", func() Message { l := learnLease(); l.Learn.Groups[0].Completions[0].LogProbs[1] = 0.5; return l }(), "learn.groups[0].completions[0].log_probs"},
		{"learn: Inf advantage", func() Message { l := learnLease(); l.Learn.Groups[0].Completions[1].Advantage = math.Inf(1); return l }(), "learn.groups[0].completions[1].advantage"},
		{"learn: log-probs short", func() Message { l := learnLease(); l.Learn.Groups[0].Completions[0].LogProbs = []float32{-1}; return l }(), "learn.groups[0].completions[0].log_probs"},
		{"result: NaN log-prob", func() Message { r := rolloutResult(); r.Rollouts[0].LogProbs[0] = nan; return r }(), "rollouts[0].log_probs"},
		{"result: positive log-prob", func() Message { r := rolloutResult(); r.Rollouts[1].LogProbs[0] = 1e-3; return r }(), "rollouts[1].log_probs"},
		{"result: Inf log-prob", func() Message { r := rolloutResult(); r.Rollouts[1].LogProbs[0] = float32(math.Inf(-1)); return r }(), "rollouts[1].log_probs"},
		{"result: negative token", func() Message { r := rolloutResult(); r.Rollouts[0].Tokens[0] = -3; return r }(), "rollouts[0].tokens"},
		{"result: empty completion", func() Message { r := rolloutResult(); r.Rollouts[0] = Rollout{}; return r }(), "rollouts[0].tokens"},
		{"result: too long", func() Message {
			r := rolloutResult()
			r.Rollouts[0] = Rollout{Tokens: make([]int32, MaxRolloutTokens+1), LogProbs: make([]float32, MaxRolloutTokens+1)}
			return r
		}(), "rollouts[0].tokens"},
		{"result: with an update", func() Message { r := rolloutResult(); r.Update = Floats{1}; return r }(), "update"},
		{"result: examples", func() Message { r := rolloutResult(); r.Examples = 5; return r }(), "examples"},
	} {
		err := c.m.Validate()
		var ve *ValidationError
		if !errors.As(err, &ve) || ve.Field != c.field {
			t.Errorf("%s: error %v; want one naming %s", c.name, err, c.field)
		}
		// The frame decoder validates too: such a frame never reaches a
		// handler.
		b, err := Encode(c.m)
		if err == nil {
			if _, err := Decode(b, 1<<20); err == nil || !strings.Contains(err.Error(), c.field) {
				t.Errorf("%s: Decode gave %v; want an error naming %s", c.name, err, c.field)
			}
		}
	}
	for _, m := range []Message{rolloutLease(), learnLease(), rolloutResult()} {
		if err := m.Validate(); err != nil {
			t.Errorf("%s: %v", m.MessageType(), err)
		}
	}
}
