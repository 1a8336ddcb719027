package jobspec

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/crowdtrain/crowdtrain/engine"
)

const rlBase = "name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {job: sft-1}\ntask: {type: add, digits: 2}\n"

// A kind: rl spec fills the documented defaults and keeps the task and
// the policy as given.
func TestRLSpecDefaults(t *testing.T) {
	s, err := Parse([]byte(rlBase))
	if err != nil {
		t.Fatal(err)
	}
	want := RL{Algorithm: "grpo", GroupSize: 8, MaxNewTokens: 16, Temperature: 1, Clip: 0.2, MaxRolloutStaleness: 2}
	want.Task.Name, want.Task.Digits = "add", 2
	if s.Kind != KindRL || s.RL == nil || *s.RL != want {
		t.Fatalf("kind %q, rl %+v; want %+v", s.Kind, s.RL, want)
	}
	if s.Policy == nil || s.Policy.Job != "sft-1" || s.Init != nil {
		t.Errorf("policy %+v, init %+v; want policy {job: sft-1} and no init", s.Policy, s.Init)
	}
	if s.Mode != ModeAsync || s.Dataset.Type != "" || s.TargetAccuracy != 0 || s.Snapshot != SnapshotGranted || s.SpotCheck != engine.DefaultSpotCheckRate {
		t.Errorf("mode %s, dataset %+v, target_accuracy %v, snapshot %s, spot_check %v; want async, no data set, no target, granted, %v (rollouts are spot checked)",
			s.Mode, s.Dataset, s.TargetAccuracy, s.Snapshot, s.SpotCheck, engine.DefaultSpotCheckRate)
	}
	for _, rate := range []float64{0, 1} {
		s, err := Parse([]byte(fmt.Sprintf("%sspot_check: %v\n", rlBase, rate)))
		if err != nil || s.SpotCheck != rate {
			t.Errorf("spot_check: %v: %v, spot_check %v; want it kept", rate, err, s.SpotCheck)
		}
	}
	s, err = Parse([]byte("name: j\nkind: rl\nmodel: charlm-tiny\npolicy: sft.safetensors\ntask: {type: reverse, length: 4}\n" +
		"group_size: 4\nmax_new_tokens: 6\ntemperature: 0.7\nclip: 0.1\nmax_rollout_staleness: 0\nalgorithm: grpo\nkl_coef: 0\n"))
	if err != nil {
		t.Fatal(err)
	}
	want = RL{Algorithm: "grpo", GroupSize: 4, MaxNewTokens: 6, Temperature: 0.7, Clip: 0.1}
	want.Task.Name, want.Task.Length = "reverse", 4
	if *s.RL != want || s.Policy.File != "sft.safetensors" {
		t.Errorf("rl %+v, policy %+v", s.RL, s.Policy)
	}
	// Sync: rounds of round_size learn leases, and no spare places (a
	// learn lease past a round's K would throw its rollouts away) unless
	// backup_workers says so.
	if s, err := Parse([]byte(rlBase + "mode: sync\n")); err != nil || s.Mode != ModeSync || s.RoundSize != 4 || s.BackupWorkers != 0 {
		t.Errorf("mode: sync: %v; mode %s, round_size %d, backup_workers %d; want sync, 4, 0", err, s.Mode, s.RoundSize, s.BackupWorkers)
	}
	if s, err := Parse([]byte(rlBase + "mode: sync\nround_size: 2\nbackup_workers: 1\n")); err != nil || s.RoundSize != 2 || s.BackupWorkers != 1 {
		t.Errorf("mode: sync with round_size 2 and backup_workers 1: %v; got %d and %d", err, s.RoundSize, s.BackupWorkers)
	}
	// DiLoCo: rounds of learn leases of local steps, as any DiLoCo job's.
	if s, err := Parse([]byte(rlBase + "mode: diloco\nlocal_steps: 4\n")); err != nil || s.Mode != ModeDiLoCo || s.LocalSteps != 4 || s.BackupWorkers != 0 || s.UpdateKind() != "delta" {
		t.Errorf("mode: diloco: %v; mode %s, local_steps %d, backup_workers %d, update kind %s; want diloco, 4, 0, delta", err, s.Mode, s.LocalSteps, s.BackupWorkers, s.UpdateKind())
	}
	// Mode, async_diloco and local_steps are fixed when an RL job is
	// created (its learn leases are cut and granted for them); other
	// live keys still change.
	cur, err := Parse([]byte(rlBase + "mode: diloco\nlocal_steps: 4\n"))
	if err != nil {
		t.Fatal(err)
	}
	for _, patch := range []string{`{"mode": "sync"}`, `{"local_steps": 8}`, `{"async_diloco": true}`} {
		if _, _, err := Patch(cur, []byte(patch)); err == nil || !strings.Contains(err.Error(), "fixed when it is created") {
			t.Errorf("patch %s of an RL job: %v; want an error saying mode and local_steps are fixed", patch, err)
		}
	}
	if next, _, err := Patch(cur, []byte(`{"lr": 0.5}`)); err != nil || next.OuterOptimizer.LR != 0.5 {
		t.Errorf("patch lr of an RL job: %v, lr %v; want 0.5", err, next.OuterOptimizer.LR)
	}
	if s, err := Parse([]byte(rlBase + "kl_coef: 0.05\n")); err != nil || s.RL.KLCoef != 0.05 {
		t.Errorf("kl_coef: 0.05: %v; want it kept (the KL penalty against the initial policy)", err)
	}
}

// Every wrong RL key is refused with an error naming it.
func TestRLSpecErrorsNameTheKey(t *testing.T) {
	for _, c := range []struct{ yaml, key, msg string }{
		{"name: j\nkind: rl\nmodel: charlm-tiny\ntask: {type: add, digits: 2}\n", "policy", "is required"},
		{"name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {job: x}\n", "task", "is required"},
		{"name: j\nkind: ppo\nmodel: charlm-tiny\n", "kind", "not a job kind"},
		{"name: j\nmodel: charlm-tiny\ndataset: bible-kjv\ngroup_size: 4\n", "group_size", "kind: rl"},
		{"name: j\nmodel: charlm-tiny\ndataset: bible-kjv\npolicy: {job: x}\n", "policy", "kind: rl"},
		{rlBase + "dataset: bible-kjv\n", "dataset", "come from its task"},
		{rlBase + "init: {job: y}\n", "init", "policy"},
		{rlBase + "sweep: {method: grid, space: {clip: [0.1, 0.2]}}\n", "sweep", "not supported yet"},
		{rlBase + "mode: diloco\nupdate_codec: sparse\n", "update_codec", "not supported for RL"},
		{rlBase + "snapshot: latest\n", "snapshot", "granted"},
		{rlBase + "spot_check: 1.5\n", "spot_check", "[0, 1]"},
		{rlBase + "algorithm: ppo\n", "algorithm", "grpo"},
		{rlBase + "group_size: 1\n", "group_size", "2..256"},
		{rlBase + "max_new_tokens: 0\n", "max_new_tokens", "context"},
		{rlBase + "max_new_tokens: 32\n", "max_new_tokens", "context (32 tokens)"},
		{rlBase + "temperature: 0\n", "temperature", "(0, 10]"},
		{rlBase + "clip: 1\n", "clip", "(0, 1)"},
		{rlBase + "kl_coef: -1\n", "kl_coef", ">= 0"},
		{rlBase + "kl_coef: .nan\n", "kl_coef", "finite"},
		{rlBase + "max_rollout_staleness: -1\n", "max_rollout_staleness", "0..64"},
		{rlBase + "group_size: [1]\n", "group_size", "single value"},
		{"name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {job: x}\ntask: {type: add}\n", "task.digits", "1..18"},
		{"name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {job: x}\ntask: {type: mul, digits: 2}\n", "task.type", "not a task"},
		{"name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {job: x}\ntask: {type: add, digits: 2, length: 3}\n", "task.length", "not a key"},
		{"name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {job: x}\ntask: {type: jsonl}\n", "task.path", "needs path"},
		{"name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {job: x}\ntask: {type: jsonl, path: t.jsonl, sha256: abc}\n", "task.sha256", "64 digits"},
		{"name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {job: x}\ntask: {type: add, digits: 2, sha256: " + strings.Repeat("a", 64) + "}\n", "task.sha256", "not a key"},
		{"name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {job: x}\ntask: {type: add, digits: 2, name: z}\n", "task.name", "unknown key"},
		{"name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {job: x, file: y}\ntask: {type: add, digits: 2}\n", "policy", "not both"},
		{"name: j\nkind: rl\nmodel: charlm-tiny\npolicy: {version: 3}\ntask: {type: add, digits: 2}\n", "policy.version", "recorded"},
		{"name: j\nkind: rl\nmodel: mnist-mlp\npolicy: {job: x}\ntask: {type: add, digits: 2}\n", "model", "language model"},
	} {
		_, err := Parse([]byte(c.yaml))
		var se *Error
		if !errors.As(err, &se) || se.Key != c.key || !strings.Contains(err.Error(), c.msg) {
			t.Errorf("%s: error %v; want key %s mentioning %q", strings.ReplaceAll(c.yaml, "\n", "; "), err, c.key, c.msg)
		}
	}
}

// docs/JOBS.md's RL example is a valid spec.
func TestDocsRLExampleParses(t *testing.T) {
	s, err := Parse([]byte(docsYAML(t, "name: rl-add\n")))
	if err != nil {
		t.Fatal(err)
	}
	if s.Kind != KindRL || s.RL.MaxNewTokens != 5 || s.Policy.Job == "" {
		t.Errorf("parsed %+v, rl %+v", s, s.RL)
	}
}
